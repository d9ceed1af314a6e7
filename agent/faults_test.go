package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/heartbeat"
	"provideragent/internal/relaytest"
	"provideragent/lease"
)

// TestSingleRelayFaultsKeepQuorum is the fault drill over three real
// relays: relay 0 is killed and restarted mid-test, relay 1 rejects every
// write, relay 2 ends subscriptions with CLOSED and serves forged, replayed,
// re-served stale, future-dated and past-dated copies of what it stores
// (the dated copies validly signed with the primary's own key). The primary
// stays Live at epoch 1, the standby never moves, and the bad copies are
// rejected and counted, never counted as heartbeats.
func TestSingleRelayFaultsKeepQuorum(t *testing.T) {
	t.Parallel()
	primaryKey := nostr.GeneratePrivateKey()
	rs := []*relaytest.Relay{
		relaytest.Start(t),
		relaytest.Start(t, "--reject-writes"),
		relaytest.Start(t, "--send-closed", "error: rotating", "--closed-after", "700ms", "--closed-times", "3",
			"--forged", "--serve-stale", "--replay", "900ms", "--future", "1h", "--stale-shift", "1h", "--inject-key", primaryKey),
	}
	urls := []string{rs[0].URL(), rs[1].URL(), rs[2].URL()}
	lcfg := lease.DemoConfig(urls)
	// A relay restart must fit inside the debounce: t1 well above it.
	lcfg.T1, lcfg.T2 = 20*time.Second, 10*time.Second
	lcfg.ProvisionTimeout = lcfg.T1
	lcfg.TakeoverAfter = lcfg.T1 + lcfg.T2 + lcfg.Stale + lcfg.MaxSkew + lcfg.RelayDelay + 5*time.Second
	if err := lcfg.Validate(); err != nil {
		t.Fatal(err)
	}
	primary := startAgent(t, agentOpts{name: "primary", key: primaryKey, lcfg: lcfg})
	standby := startAgent(t, agentOpts{name: "standby", lcfg: lcfg})
	spec := warmSpec("w1", primary.pub, standby.pub, urls)
	for _, ta := range []*testAgent{primary, standby} {
		ta.a.Track(context.Background(), spec)
	}
	primary.waitState("w1", lease.StateLive, 1, 15*time.Second)

	time.Sleep(2 * time.Second) // CLOSED rounds, replays and bad copies flow
	rs[0].Kill()
	time.Sleep(time.Second)
	rs[0].Restart()
	// Longer than stale after the restart: quorum must be back from fresh
	// heartbeats on relays 0 and 2, not from anything left over.
	time.Sleep(lcfg.Stale + 2*time.Second)
	waitFor(t, 10*time.Second, "primary quorum in the standby's eyes", func() bool {
		return testutil.ToFloat64(standby.a.obs.met.quorum.WithLabelValues(primary.pub)) == 1
	})

	if got := strings.Join(primary.log.states(), ","); got != "provisioning@1,live@1" {
		t.Fatalf("primary transitions = %s, want provisioning@1,live@1", got)
	}
	if got := strings.Join(standby.log.states(), ","); got != "standby@1" {
		t.Fatalf("standby transitions = %s, want standby@1", got)
	}
	if !primary.backend.Running("w1") || standby.backend.Running("w1") {
		t.Fatalf("running: primary %v, standby %v, want only the primary", primary.backend.Running("w1"), standby.backend.Running("w1"))
	}
	for _, r := range []heartbeat.RejectReason{heartbeat.ReasonFuture, heartbeat.ReasonStale} {
		if got := testutil.ToFloat64(standby.a.obs.met.eventsRejected.WithLabelValues(string(r))); got == 0 {
			t.Errorf("standby rejected %s = 0, want the relay's %s copies rejected", r, r)
		}
	}
	forged := testutil.ToFloat64(standby.a.obs.met.eventsRejected.WithLabelValues(string(heartbeat.ReasonBadID))) +
		testutil.ToFloat64(standby.a.obs.met.eventsRejected.WithLabelValues(string(heartbeat.ReasonBadSig)))
	if forged == 0 {
		t.Errorf("standby rejected bad_id+bad_sig = 0, want the forged copies rejected")
	}
}
