package heartbeat

import (
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
)

// TestRevocationQuorumAt: our revocations carry quorum_at_ms, when the holder
// last had relay quorum at the epoch (its successor's claim deadline rests
// on it); absent means unknown, and a value after the event's created_at
// is refused, since a holder cannot have had quorum after it revoked.
func TestRevocationQuorumAt(t *testing.T) {
	p, s1 := testKeys(t, "primary"), testKeys(t, "standby")
	build := func(q time.Time) *nostr.Event {
		t.Helper()
		ev, err := BuildRevocation(p, RevocationParams{WorkloadID: "w", Standbys: []string{s1.PublicKey()}, At: t0, Epoch: 1, QuorumAt: q})
		if err != nil {
			t.Fatalf("BuildRevocation(quorum_at %v) = %v", q, err)
		}
		return ev
	}
	for _, q := range []time.Time{{}, t0.Add(-5 * time.Minute), t0, t0.Add(999 * time.Millisecond)} {
		r, err := DecodeRevocation(build(q))
		if err != nil {
			t.Fatalf("DecodeRevocation(quorum_at %v) = %v", q, err)
		}
		if !r.QuorumAt.Equal(q) {
			t.Errorf("DecodeRevocation(quorum_at %v).QuorumAt = %v", q, r.QuorumAt)
		}
	}
	// Neither after the revocation nor at or before 1970: quorum_at_ms 0
	// is what DecodeRevocation refuses, so it is never written.
	for _, q := range []time.Time{t0.Add(time.Second), time.UnixMilli(0), time.UnixMilli(-1)} {
		if _, err := BuildRevocation(p, RevocationParams{WorkloadID: "w", At: t0, Epoch: 1, QuorumAt: q}); err == nil {
			t.Errorf("BuildRevocation(quorum_at %v) = nil error, want one", q)
		}
	}
	if _, err := BuildRevocation(p, RevocationParams{WorkloadID: "w", Standbys: []string{s1.PublicKey()}, At: t0, Epoch: 1, QuorumAt: time.UnixMilli(1)}); err != nil {
		t.Errorf("BuildRevocation(quorum_at 1 ms after 1970) = %v, want it built", err)
	}
	ev := build(t0)
	for _, bad := range []string{`"quorum_at_ms":0`, `"quorum_at_ms":` + itoa(t0.UnixMilli()+1000)} {
		forged := *ev
		forged.Content = strings.Replace(ev.Content, `"quorum_at_ms":`+itoa(t0.UnixMilli()), bad, 1)
		if err := p.Sign(&forged); err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeRevocation(&forged); err == nil || !strings.Contains(err.Error(), "quorum_at_ms") {
			t.Errorf("DecodeRevocation(%s) = %v, want an error naming quorum_at_ms", bad, err)
		}
	}
}
