package agent

import (
	"testing"
	"time"

	"provideragent/identity"
	"provideragent/internal/relaytest"
	"provideragent/lease"
)

// TestOldRevocationAfterRegrantIgnored: revocations are
// addressable and stay on relays for ever, and a workload granted again
// starts again at epoch 1. An hour-old revocation of epoch 1 by the same
// primary, served by the relays after the re-grant, must not send the
// standby into the claim step while the primary runs the new grant; a
// fresh one of the current grant still does.
func TestOldRevocationAfterRegrantIgnored(t *testing.T) {
	t.Parallel()
	rs, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	primary, standby := startPair(t, lcfg, nil)
	keys, err := identity.NewKeys(primary.key)
	if err != nil {
		t.Fatal(err)
	}
	old := buildRevocation(t, keys, "w1", standby.pub, time.Now().Add(-time.Hour))
	for _, r := range rs {
		r.Inject(old, true)
	}
	waitFor(t, 10*time.Second, "the standby read the old revocation", receivedRevocation(standby, "w1"))
	time.Sleep(3 * time.Second) // a claim step would start within the relay delay
	if _, ok := standby.log.find(func(e Event) bool { return e.Kind == "state" && e.State == string(lease.StatePromoting) }); ok {
		t.Fatalf("an hour-old revocation of an earlier grant sent the standby into the claim step: %v", standby.log.states())
	}
	primary.waitState("w1", lease.StateLive, 1, time.Second)

	// The primary's own revocation under this grant still hands over.
	fresh := buildRevocation(t, keys, "w1", standby.pub, time.Now())
	for _, r := range rs {
		r.Inject(fresh, true)
	}
	standby.waitState("w1", lease.StatePromoting, 1, 10*time.Second)
}
