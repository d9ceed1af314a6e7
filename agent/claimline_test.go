package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/lease"
)

// TestClaimOnRevocationWording: the successor's "received" line says
// whether it may claim on the revocation (until its deadline), or why not:
// the revocation names no quorum time, or its deadline has passed; another
// provider's line says nothing of it.
func TestClaimOnRevocationWording(t *testing.T) {
	self, _ := nostr.GetPublicKey(nostr.GeneratePrivateKey())
	other, _ := nostr.GetPublicKey(nostr.GeneratePrivateKey())
	cfg := lease.DemoConfig([]string{"wss://r1.test", "wss://r2.test", "wss://r3.test"})
	m, err := lease.New(cfg, self)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	rev := func(successor string, quorumAt time.Time) lease.Revocation {
		return lease.Revocation{Workload: "w1", Signer: other, Epoch: 1, Successor: successor, QuorumAt: quorumAt}
	}
	deadline := m.RevocationDeadline(rev(self, now))
	for _, c := range []struct {
		name string
		r    lease.Revocation
		want string
	}{
		{"for another successor", rev(other, now), ""},
		{"with a quorum time", rev(self, now), " (may claim on it until " + deadline.Format(time.RFC3339) + ")"},
		{"without a quorum time", rev(self, time.Time{}), "it names no time its holder had relay quorum: no claim on it, the takeover rule decides"},
		{"after its deadline", rev(self, now.Add(-time.Hour)), "(after its deadline " + now.Add(-time.Hour).Add(deadline.Sub(now)).Format(time.RFC3339) + ": no claim on it, the takeover rule decides)"},
	} {
		got := claimOnRevocation(m, c.r, now)
		if (c.want == "" && got != "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
