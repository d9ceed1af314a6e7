package sim

import (
	"context"
	"fmt"
	"testing"
	"time"

	"provideragent/lease"
	"provideragent/lease/leasetest"
)

// didEnv is a real Env that counts what the node did through it, in
// leasetest.Did's words (the outbox's sends are Republish, not Publish).
type didEnv struct {
	Env
	did leasetest.Did
}

func (e *didEnv) Publish(ev Event, to []RelayID) EventID {
	e.did.Published++
	return e.Env.Publish(ev, to)
}

func (e *didEnv) Start(w string, epoch uint64) {
	e.did.Started++
	e.Env.Start(w, epoch)
}

func (e *didEnv) Stop(w string) {
	e.did.Stopped++
	e.Env.Stop(w)
}

func (e *didEnv) At(local time.Time, tag any) {
	if _, read := tag.(timerRead); read {
		e.did.ClaimReads++
	}
	e.Env.At(local, tag)
}

// TestLeaseNodePerformsEveryEffectAsWanted is the simulator's half of
// agent's TestAgentPerformsEveryEffectAsWanted: every example effect,
// committed and performed alone through the driver's step path with the
// node's Store, Outbox and Performer, with
// its workload running, does what leasetest.Want says, the same table the
// agent is held to. It fails if the simulator performs any effect
// differently from the agent (a withdrawn marker sent directly instead of
// through the outbox, say).
func TestLeaseNodePerformsEveryEffectAsWanted(t *testing.T) {
	for _, e := range leasetest.Effects() {
		t.Run(fmt.Sprintf("%T", e), func(t *testing.T) {
			cfg := LeaseConfig(2, 3)
			s, err := New(Config{Providers: 2, Relays: 3, LegDelay: time.Second, PublishTimeout: time.Second, QueryTimeout: time.Second,
				TickInterval: time.Second, KeepHeartbeats: 2}, []Node{
				NewLeaseNode(cfg, LeaseSpec(cfg, "w1", 2), 0, 2),
				NewLeaseNode(cfg, LeaseSpec(cfg, "w1", 2), 1, 2),
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			s.Boot()
			n := s.Node(0).(*LeaseNode)
			now := time.Unix(1_800_000_000, 0)
			env := &didEnv{Env: envFor(s, s.provs[0])}
			n.enter(env, now)
			commit := func(e lease.Effect) {
				st := n.d.Begin(now)
				st.Inject(e)
				if err := st.Commit(context.Background()); err != nil {
					t.Fatalf("commit(%s) = %v", e, err)
				}
			}
			commit(lease.StartWorkload{ID: "w1", Epoch: 1})
			env.did = leasetest.Did{}
			outbox := len(n.disk.store.Outbox)
			commit(e)
			env.did.Queued = len(n.disk.store.Outbox) - outbox
			if err := n.Err(); err != nil {
				t.Fatalf("perform(%s) = driver error %v", e, err)
			}
			if want := leasetest.Want(e); env.did != want {
				t.Errorf("perform(%s) did %+v, want %+v (lease.DurabilityOf: %s)", e, env.did, want, lease.DurabilityOf(e))
			}
		})
	}
}
