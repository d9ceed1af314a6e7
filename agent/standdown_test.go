package agent

import (
	"context"
	"testing"
	"time"

	"provideragent/internal/relaytest"
	"provideragent/lease"
)

// TestOtherStandbysStandDown: with two standbys, the primary's revocation
// names the first; it promotes to epoch 2 and runs the workload, while the
// second standby sees the higher epoch, stays a standby and never starts
// the workload.
func TestOtherStandbysStandDown(t *testing.T) {
	t.Parallel()
	rs, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	proxies, dial := cutProxies(t, rs, urls, 2)
	primary := startAgent(t, agentOpts{name: "primary", lcfg: lcfg, dial: dial})
	first := startAgent(t, agentOpts{name: "standby-1", lcfg: lcfg})
	second := startAgent(t, agentOpts{name: "standby-2", lcfg: lcfg})
	spec := warmSpec("w1", primary.pub, first.pub, urls)
	spec.Standbys = append(spec.Standbys, second.pub)
	ctx := context.Background()
	for _, ta := range []*testAgent{primary, first, second} {
		ta.a.Track(ctx, spec)
	}
	primary.waitState("w1", lease.StateLive, 1, 15*time.Second)
	second.waitState("w1", lease.StateStandby, 1, 10*time.Second)

	for _, p := range proxies {
		p.Cut()
	}
	bound := lcfg.T1 + lcfg.T2 + lcfg.Stale + lcfg.RelayDelay + 2*time.Second
	first.waitState("w1", lease.StateLive, 2, bound+10*time.Second)
	primary.waitState("w1", lease.StateFenced, 1, 10*time.Second)

	// Give the second standby time to hear of epoch 2 and to act on it if
	// it wrongly would (a takeover attempt needs takeover_after).
	waitFor(t, 10*time.Second, "second standby learns epoch 2", func() bool {
		_, ep := second.state("w1")
		return ep == 2
	})
	time.Sleep(2 * lcfg.RelayDelay)
	if st, ep := second.state("w1"); st != string(lease.StateStandby) || ep != 2 {
		t.Fatalf("second standby = %s@%d (history %v), want standby@2", st, ep, second.log.states())
	}
	if _, started := second.log.find(func(e Event) bool { return e.Kind == "start" }); started || second.backend.Running("w1") {
		t.Fatalf("second standby started the workload (history %v), want it never to", second.log.states())
	}
	if !first.backend.Running("w1") || primary.backend.Running("w1") {
		t.Fatalf("running: primary %v, first standby %v, want only the first standby",
			primary.backend.Running("w1"), first.backend.Running("w1"))
	}
}
