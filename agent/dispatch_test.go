package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/lease"
	"provideragent/lease/leasetest"
)

// TestAgentPerformsEveryEffectAsWanted: every example effect, committed
// and performed alone through the driver's step path with the agent's
// Store, Outbox and Performer (the outbox rows in the step's transaction,
// then lease.Perform) with its
// workload running, does what leasetest.Want says: the table
// props/sim's TestLeaseNodePerformsEveryEffectAsWanted holds the simulator
// to. It fails if the agent performs any effect differently from the
// simulator (a withdrawn marker published directly instead of queued in
// the outbox, say). Counted: backend starts and stops, rows in the real
// SQLite outbox, direct publishes (recPool), and claim reads queued for the
// batching loop (which only Run starts). The agent's effect metric names every effect type.
func TestAgentPerformsEveryEffectAsWanted(t *testing.T) {
	for _, e := range leasetest.Effects() {
		t.Run(fmt.Sprintf("%T", e), func(t *testing.T) {
			if effectType(e) == "other" {
				t.Errorf("effectType(%T) = other: the agent's metric does not name this effect", e)
			}
			pool := &recPool{}
			a := newStepAgent(t, stepOpts{pool: pool})
			be := a.work.backend.(*memBackend)
			ctx := context.Background()
			now := time.Now()
			if err := commitEffects(ctx, a, now, lease.StartWorkload{ID: "w1", Epoch: 1}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "w1 running", func() bool { return be.Running("w1") })
			starts, stops := be.counts()
			restores := restoresAsked(t, a)
			if err := commitEffects(ctx, a, now, e); err != nil {
				t.Fatalf("commit(%s) = %v", e, err)
			}
			a.work.act.wait()
			publishQueuedClaims(ctx, a)
			a.claims.wg.Wait()
			st, err := a.out.courier.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s2, p2 := be.counts()
			a.claims.reads.mu.Lock()
			reads := len(a.claims.reads.queue)
			a.claims.reads.mu.Unlock()
			pool.mu.Lock()
			did := leasetest.Did{Started: s2 - starts, Stopped: p2 - stops, Queued: st.Pending, Published: len(pool.evs), ClaimReads: reads, Restores: restoresAsked(t, a) - restores}
			pool.mu.Unlock()
			if want := leasetest.Want(e); did != want {
				t.Errorf("commit(%s) did %+v, want %+v (lease.DurabilityOf: %s)", e, did, want, lease.DurabilityOf(e))
			}
		})
	}
}

// restoresAsked is how many checkpoint restores a carried out (every
// result of agent_checkpoint_restores_total).
func restoresAsked(t *testing.T, a *Agent) int {
	t.Helper()
	n := 0.0
	for _, r := range RestoreResults {
		n += testutil.ToFloat64(a.obs.met.restores.WithLabelValues(r))
	}
	return int(n)
}
