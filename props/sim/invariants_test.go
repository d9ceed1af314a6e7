package sim

import (
	"strings"
	"testing"
	"time"
)

// fixedNode is a Node whose Live answer the test sets: the checker's tests
// are about the checker, not about how a machine reaches a state.
type fixedNode struct {
	epoch uint64
	live  bool
}

func (n *fixedNode) Boot(Env, time.Time)                                          {}
func (n *fixedNode) Tick(Env, time.Time)                                          {}
func (n *fixedNode) Receive(Env, time.Time, RelayID, *Event)                      {}
func (n *fixedNode) EOSE(Env, time.Time, RelayID)                                 {}
func (n *fixedNode) PublishResult(Env, time.Time, RelayID, EventID, bool)         {}
func (n *fixedNode) QueryResult(Env, time.Time, RelayID, QueryID, []*Event, bool) {}
func (n *fixedNode) Timer(Env, time.Time, any)                                    {}
func (n *fixedNode) Exited(Env, time.Time, string, uint64)                        {}
func (n *fixedNode) Crash()                                                       {}
func (n *fixedNode) Live(string) (uint64, bool)                                   { return n.epoch, n.live }
func (n *fixedNode) Describe() string                                             { return "" }
func (n *fixedNode) Since() int64                                                 { return 0 }

// checkerWorld is a world of three providers (all up) and three relays
// whose states the test sets directly, and a SingleWriter checker of w
// with m = 2.
type checkerWorld struct {
	s     *Sim
	nodes []*fixedNode
	check Checker
}

func newCheckerWorld(t *testing.T) *checkerWorld {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Providers, cfg.Relays, cfg.Seed = 3, 3, 1
	w := &checkerWorld{check: SingleWriter("w", 2)}
	nodes := make([]Node, 3)
	for i := range nodes {
		w.nodes = append(w.nodes, &fixedNode{})
		nodes[i] = w.nodes[i]
	}
	s, err := New(cfg, nodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range s.provs {
		p.up = true
	}
	w.s = s
	return w
}

func (w *checkerWorld) live(p int, epoch uint64) { w.nodes[p].live, w.nodes[p].epoch = true, epoch }
func (w *checkerWorld) notLive(p int)            { w.nodes[p].live = false }
func (w *checkerWorld) run(p int, epoch uint64)  { w.s.provs[p].running["w"] = epoch }
func (w *checkerWorld) stop(p int)               { delete(w.s.provs[p].running, "w") }

// store puts an active claim of w at epoch by author on relay r.
func (w *checkerWorld) store(r int, author ProviderID, epoch uint64) {
	w.storeClaim(r, author, LeaseClaim{Workload: "w", Epoch: epoch, Active: true})
}

func (w *checkerWorld) storeClaim(r int, author ProviderID, c LeaseClaim) {
	ev := &Event{ID: w.s.newEventID(), Kind: KindClaim, Author: author, D: "claim:" + c.Workload, Body: c}
	w.s.relays[r].store[storeKey{kind: KindClaim, author: author, d: ev.D}] = ev
}

// want runs the checker and compares its verdict: "" for none, else a
// substring of the error.
func (w *checkerWorld) want(t *testing.T, step, want string) {
	t.Helper()
	err := w.check(w.s)
	switch {
	case want == "" && err != nil:
		t.Fatalf("%s: checker = %v, want no violation", step, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("%s: checker = %v, want a violation containing %q", step, err, want)
	}
}

// Each clause of SingleWriter is tripped by a state that breaks only that
// clause, after states that break none.
func TestSingleWriterClauses(t *testing.T) {
	t.Run("two writers", func(t *testing.T) {
		w := newCheckerWorld(t)
		w.live(0, 1)
		w.run(0, 1)
		w.want(t, "one holder running", "")
		w.notLive(0) // fenced, its process not stopped yet
		w.live(1, 2)
		w.want(t, "the new holder not running yet", "")
		w.run(1, 2)
		w.want(t, "both processes run", "two writers")
	})
	t.Run("two Live at one epoch", func(t *testing.T) {
		w := newCheckerWorld(t)
		w.live(0, 1)
		w.run(0, 1)
		w.want(t, "one holder", "")
		w.live(1, 1) // Live, its process not started: no second writer yet
		w.want(t, "a second holder at the same epoch", "both hold workload w Live at epoch 1")
	})
	t.Run("a holder's epoch goes backwards", func(t *testing.T) {
		w := newCheckerWorld(t)
		w.live(0, 3)
		w.want(t, "epoch 3", "")
		w.notLive(0)
		w.want(t, "fenced", "")
		w.live(0, 2) // no claim of epoch 3 is stored anywhere: the evidence clause stays quiet
		w.want(t, "Live again at epoch 2", "holds workload w Live at epoch 2 after holding epoch 3")
	})
	t.Run("Live below a stored higher epoch", func(t *testing.T) {
		w := newCheckerWorld(t)
		w.live(0, 2)
		w.want(t, "provider 0 at epoch 2", "")
		w.notLive(0)
		w.store(0, 0, 2)
		w.live(1, 1) // the claim of epoch 2 is on one relay only (m = 2)
		w.want(t, "evidence on one relay", "")
		w.notLive(1)
		w.want(t, "provider 1 left", "")
		w.store(1, 0, 2)
		w.live(1, 1)
		w.want(t, "provider 1 enters Live at epoch 1 with epoch 2's claim on two relays", "enters workload w Live at epoch 1 after epoch 2 was held Live")
	})
	t.Run("what is no evidence of a higher epoch", func(t *testing.T) {
		w := newCheckerWorld(t)
		w.live(0, 3)
		w.want(t, "provider 0 at epoch 3", "")
		for r := range 2 {
			w.store(r, 1, 2)                                                      // a claim at the entering epoch itself
			w.storeClaim(r, 2, LeaseClaim{Workload: "w", Epoch: 3})               // withdrawn
			w.storeClaim(r, 0, LeaseClaim{Workload: "v", Epoch: 3, Active: true}) // another workload
		}
		w.live(1, 2)
		w.want(t, "provider 1 enters Live at epoch 2 beside claims that prove nothing above it", "")
	})
}
