package agent

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/internal/logcapture"
	"provideragent/internal/relaytest"
	"provideragent/lease"
)

// TestGrantsForOthersRefusedQuietly: @nostr-relay/core ignores the #p
// filter on live events, so every grant of a trusted issuer reaches every
// provider subscribed to its own (in the fleet, each agent got every
// grant: 225 WARN lines "lease grant refused" per agent at 12 providers
// and 300 workloads, 2026-11-29). The ingest refuses a grant that names
// this provider neither as primary nor as standby before its signature
// check (not_named), without a WARN, and the one that names it is taken.
func TestGrantsForOthersRefusedQuietly(t *testing.T) {
	t.Parallel()
	var urls []string
	for _, k := range []relaytest.Kind{relaytest.Khatru, relaytest.Khatru, relaytest.NostrRelay} {
		urls = append(urls, relaytest.StartKind(t, k, relaytest.KindOptions{}).URL())
	}
	lcfg := lease.DemoConfig(urls)
	issuer, _ := identity.NewKeys(nostr.GeneratePrivateKey())
	other, _ := identity.NewKeys(nostr.GeneratePrivateKey())
	logs := logcapture.New(slog.LevelInfo)
	ta := startAgent(t, agentOpts{name: "agent", lcfg: lcfg, issuers: []string{issuer.PublicKey()}, logger: slog.New(logs)})
	waitFor(t, 10*time.Second, "agent connected", func() bool { return eoseCount(ta.a.pool) == 3 })

	pool := clientPool(t, urls)
	grant := func(id, primary string) {
		ev, err := heartbeat.BuildLeaseGrant(issuer, heartbeat.LeaseGrantParams{
			WorkloadID: id, Primary: primary, Relays: urls, Quorum: 2, Replication: lease.ReplicationNone,
			RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever},
			Command:       []string{"sh", "-c", "while :; do sleep 1; done"}, At: time.Now(),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if res := pool.PublishQuorum(ctx, *ev, 3); res.AcceptedCount() < 3 {
			t.Fatalf("grant %s accepted by %d relays: %s", id, res.AcceptedCount(), res.Refusals())
		}
	}
	grant("for-someone-else", other.PublicKey())
	rejected := ta.a.obs.met.eventsRejected.WithLabelValues(string(heartbeat.ReasonNotNamed))
	waitFor(t, 10*time.Second, "the grant for someone else refused as not_named", func() bool { return testutil.ToFloat64(rejected) >= 1 })
	grant("for-me", ta.pub)
	ta.waitState("for-me", lease.StateLive, 1, 15*time.Second)
	if st, _ := ta.state("for-someone-else"); st != "" {
		t.Fatalf("grant naming another provider: state %q, want not tracked", st)
	}
	for _, r := range logs.Records() {
		if r.Level >= slog.LevelWarn && r.String("workload") == "for-someone-else" {
			t.Fatalf("a WARN about the grant for someone else: %s %v", r.Message, r)
		}
	}
}
