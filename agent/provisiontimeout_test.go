package agent

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/relaytest"
	"provideragent/lease"
)

// TestRestartDuringRelayOutageHandsOn: a holder restarted while two of its
// three relays are cut stays syncing (rule 10) and, at provision_timeout,
// is evicted (rule 11), not failed for good, as it used to be. Its standby
// is down, so nobody takes the workload; once the relays are back the
// holder takes it back itself by the retake rule, at epoch 2.
func TestRestartDuringRelayOutageHandsOn(t *testing.T) {
	t.Parallel()
	rs, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	// Quorum loss's own eviction (T1+T2 after the quorum the holder had
	// before its restart) must come well after the provision timeout
	// (5 s after the restart), or it evicts first, as it did before rule
	// 11 changed: T2 20 s (takeover_after above its floor, 30 s).
	lcfg.T2 = 20 * time.Second
	lcfg.TakeoverAfter = 30 * time.Second
	proxies, dial := cutProxies(t, rs, urls, 2)
	key := nostr.GeneratePrivateKey()
	dbPath := filepath.Join(t.TempDir(), "primary.db")
	primary := startAgent(t, agentOpts{name: "primary", key: key, dbPath: dbPath, lcfg: lcfg, dial: dial})
	standby := startAgent(t, agentOpts{name: "standby", lcfg: lcfg})
	spec := warmSpec("w1", primary.pub, standby.pub, urls)
	ctx := context.Background()
	primary.a.Track(ctx, spec)
	standby.a.Track(ctx, spec)
	primary.waitState("w1", lease.StateLive, 1, 15*time.Second)
	standby.waitState("w1", lease.StateStandby, 1, 15*time.Second)
	standby.stop()
	primary.stop()

	for _, p := range proxies {
		p.Cut()
	}
	again := startAgent(t, agentOpts{name: "primary-again", key: key, dbPath: dbPath, lcfg: lcfg, dial: dial})
	again.waitState("w1", lease.StateEvicted, 1, lcfg.ProvisionTimeout+10*time.Second)
	if st, _ := again.state("w1"); st == string(lease.StateFailed) {
		t.Fatalf("w1 failed after the relay sync timeout, want evicted")
	}
	// (The revocation is queued when the step's effects are performed,
	// after the state change is reported.)
	waitFor(t, 10*time.Second, "a revocation of w1 queued, saying the relay sync timed out", func() bool {
		_, ok := again.log.find(func(e Event) bool {
			return e.Kind == "revocation" && e.Workload == "w1" && strings.Contains(e.Detail, "queued in the outbox") && strings.Contains(e.Detail, "relay sync timeout")
		})
		return ok
	})

	for _, p := range proxies {
		if err := p.Restore(); err != nil {
			t.Fatal(err)
		}
	}
	again.waitState("w1", lease.StateLive, 2, lcfg.TakeoverAfter+30*time.Second)
	waitFor(t, 10*time.Second, "w1 running again at epoch 2", func() bool { return again.backend.Running("w1") })
}
