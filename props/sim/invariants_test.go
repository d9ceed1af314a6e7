package sim

import (
	"strings"
	"testing"
	"time"
)

// fixedNode is a Node whose Live answer the test sets: the checker's tests
// are about the checker, not about how a machine reaches a state.
type fixedNode struct {
	epoch   uint64
	live    bool
	journal []CheckpointNote
}

func (n *fixedNode) CheckpointJournal() []CheckpointNote { return n.journal }

func (n *fixedNode) Boot(Env, time.Time)                                          {}
func (n *fixedNode) Tick(Env, time.Time)                                          {}
func (n *fixedNode) Receive(Env, time.Time, RelayID, *Event)                      {}
func (n *fixedNode) Connected(Env, time.Time, RelayID)                            {}
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

// record is a checkpoint record of w by author at epoch; heldLive is what
// the world saw when it was published.
func (w *checkerWorld) record(author ProviderID, epoch uint64, heldLive bool) *Event {
	return &Event{ID: w.s.newEventID(), Kind: KindCheckpoint, Author: author, D: CheckpointD("w", epoch),
		Body: LeaseCheckpoint{Workload: "w", Epoch: epoch, Seq: 3, Value: 42}, AuthorHeldLive: heldLive}
}

// restores journals that provider p restored epoch from rec.
func (w *checkerWorld) restores(p int, epoch uint64, rec *Event) {
	b := rec.Body.(LeaseCheckpoint)
	w.nodes[p].journal = append(w.nodes[p].journal, CheckpointNote{What: NoteRestored, Workload: "w", Epoch: epoch, Value: b.Value, Record: rec})
}

// Each clause of CheckpointLineage is tripped by a restore that breaks
// only that clause, after restores that break none.
func TestCheckpointLineageClauses(t *testing.T) {
	// lineage is a world in which P0 held epoch 1 and P1 epoch 2 Live
	// (seen by the checker), and P1 restored epoch 2 from P0's record of
	// epoch 1 and again from its own record of epoch 2.
	lineage := func(t *testing.T) *checkerWorld {
		w := newCheckerWorld(t)
		w.check = CheckpointLineage("w")
		w.live(0, 1)
		w.want(t, "P0 Live at epoch 1", "")
		w.notLive(0)
		w.restores(1, 2, w.record(0, 1, true))
		w.want(t, "P1 restores epoch 2 from P0's record of epoch 1", "")
		w.live(1, 2)
		w.want(t, "P1 Live at epoch 2", "")
		w.restores(1, 2, w.record(1, 2, true))
		w.want(t, "P1 restores epoch 2 again, from its own record of it", "")
		w.restores(2, 3, w.record(0, 1, true))
		w.want(t, "P2 restores epoch 3 from P0's record of epoch 1", "")
		return w
	}
	t.Run("an injected record", func(t *testing.T) {
		w := lineage(t)
		rec := w.record(1, 2, true)
		rec.Injected = true // otherwise a record P1 could have made
		w.restores(2, 3, rec)
		w.want(t, "P2 restores a record a relay served", "the record is a forgery a relay served")
	})
	t.Run("a record with a bad signature", func(t *testing.T) {
		w := lineage(t)
		rec := w.record(1, 2, true)
		rec.Forged, rec.Injected = true, true
		w.restores(2, 3, rec)
		w.want(t, "P2 restores a record whose signature fails", "the record is a forgery a relay served (bad signature true)")
	})
	t.Run("a later epoch", func(t *testing.T) {
		w := lineage(t)
		w.restores(2, 1, w.record(1, 2, true))
		w.want(t, "P2 restores epoch 1 from a record of epoch 2", "a record of a later epoch")
	})
	t.Run("its own epoch by another provider", func(t *testing.T) {
		w := lineage(t)
		w.restores(2, 2, w.record(1, 2, true))
		w.want(t, "P2 restores epoch 2 from P1's record of epoch 2", "a record of a later epoch, or of its own epoch by another provider")
	})
	t.Run("a signer never seen holding the epoch", func(t *testing.T) {
		w := lineage(t)
		w.restores(1, 3, w.record(2, 1, false))
		w.want(t, "P1 restores epoch 3 from P2's record of epoch 1", "P2 did not hold epoch 1 Live when it published the record")
	})
	t.Run("a bad restore after another note of the same step", func(t *testing.T) {
		w := lineage(t)
		w.nodes[2].journal = append(w.nodes[2].journal, CheckpointNote{What: NoteStarted, Workload: "w", Epoch: 3, Value: 42})
		w.restores(2, 3, w.record(2, 1, false))
		w.want(t, "P2 notes a start, then restores from a record published while not Live, between two checks", "P2 did not hold epoch 1 Live")
	})
	t.Run("a record published while not Live", func(t *testing.T) {
		w := lineage(t)
		w.restores(2, 3, w.record(0, 1, false)) // P0 held epoch 1 Live, but not when it published this
		w.want(t, "P2 restores epoch 3 from a record P0 published while not Live", "P0 did not hold epoch 1 Live when it published the record")
	})
}

// MoveLosesNothing trips only on the first start above the moved epoch
// whose value differs from the move's final value.
func TestMoveLosesNothingClauses(t *testing.T) {
	w := newCheckerWorld(t)
	w.check = MoveLosesNothing("w")
	note := func(p int, what NoteKind, epoch, value uint64) {
		w.nodes[p].journal = append(w.nodes[p].journal, CheckpointNote{What: what, Workload: "w", Epoch: epoch, Value: value})
	}
	note(0, NoteStarted, 1, 0)
	w.want(t, "P0 starts epoch 1 from nothing", "")
	note(0, NoteMoveAborted, 1, 50)
	note(0, NoteStarted, 1, 50)
	w.want(t, "an aborted move restarts P0's copy at epoch 1", "")
	note(0, NoteMoved, 1, 120)
	w.want(t, "P0 hands epoch 1 over at 120", "")
	note(1, NoteStarted, 2, 120)
	w.want(t, "P1 starts epoch 2 from 120", "")
	note(2, NoteStarted, 3, 7)
	w.want(t, "P2 starts epoch 3 from 7 with no move pending", "")
	note(2, NoteMoved, 3, 300)
	note(2, NoteMoveAborted, 3, 300) // P2 restarted before its handover was committed, and ran on
	note(1, NoteStarted, 4, 444)
	w.want(t, "P1 starts epoch 4 from 444 after P2's move of epoch 3 was aborted by a restart", "")
	note(1, NoteMoved, 4, 500)
	w.want(t, "P1 hands epoch 4 over at 500", "")
	note(2, NoteStarted, 4, 0) // a stale start of the moved epoch is not the successor's
	w.want(t, "a start at the moved epoch itself", "")
	note(0, NoteStarted, 5, 499)
	w.want(t, "P0 starts epoch 5 from 499", "P0 starts workload w at epoch 5 from value 499; P1's planned move handed epoch 4 over at value 500")

	// The mover retakes at once: its move and its own start of the next
	// epoch are read by the same check.
	w = newCheckerWorld(t)
	w.check = MoveLosesNothing("w")
	note(0, NoteStarted, 1, 0)
	w.want(t, "P0 starts epoch 1 from nothing", "")
	note(0, NoteMoved, 1, 120)
	note(0, NoteStarted, 2, 119)
	w.want(t, "P0 hands epoch 1 over at 120 and retakes epoch 2 from 119 between two checks", "P0 starts workload w at epoch 2 from value 119")
}

// TestSingleWriterEntryAndEvidenceEdges: the entry clause looks only at a
// provider that enters Live below the highest epoch held Live; a stored
// claim counts once per relay, however many claims of higher epochs that
// relay keeps, and is found among any number of other events; a provider
// whose agent is down is skipped without hiding the providers after it.
func TestSingleWriterEntryAndEvidenceEdges(t *testing.T) {
	t.Run("entering at the highest epoch held", func(t *testing.T) {
		w := newCheckerWorld(t)
		w.live(0, 2)
		w.want(t, "provider 0 at epoch 2", "")
		w.notLive(0)
		w.store(0, 2, 3) // provider 2 claimed epoch 3 and never went Live
		w.store(1, 2, 3)
		w.want(t, "provider 0 left", "")
		w.live(1, 2) // epoch 2 reused: its holder is gone, no one held 3 Live
		w.want(t, "provider 1 enters Live at epoch 2 beside stored claims of 3", "")
	})
	t.Run("a holder that stays Live below a later epoch", func(t *testing.T) {
		w := newCheckerWorld(t)
		w.live(1, 1)
		w.want(t, "provider 1 at epoch 1", "")
		w.live(0, 2)
		w.store(0, 0, 2)
		w.store(1, 0, 2)
		w.want(t, "provider 0 at epoch 2 while provider 1 has not yet fenced", "")
	})
	t.Run("one relay with two claims is one relay", func(t *testing.T) {
		w := newCheckerWorld(t)
		w.live(0, 3)
		w.want(t, "provider 0 at epoch 3", "")
		w.notLive(0)
		w.store(0, 0, 3)
		w.store(0, 2, 4)
		w.live(1, 1)
		w.want(t, "provider 1 enters at epoch 1 with higher claims on one relay only", "")
	})
	t.Run("evidence among other events", func(t *testing.T) {
		w := newCheckerWorld(t)
		w.live(0, 3)
		w.want(t, "provider 0 at epoch 3", "")
		w.notLive(0)
		for r := range 2 {
			for i := range 20 {
				v := "v" + string(rune('a'+i))
				w.storeClaim(r, 0, LeaseClaim{Workload: v, Epoch: 9, Active: true})
				ev := &Event{ID: w.s.newEventID(), Kind: KindRevocation, Author: 1, D: "other:" + v, Body: v}
				w.s.relays[r].store[storeKey{kind: KindRevocation, author: 1, d: ev.D}] = ev
			}
			w.store(r, 0, 3)
		}
		w.live(1, 1)
		w.want(t, "provider 1 enters at epoch 1 with epoch 3's claim on two relays among 40 other events each", "enters workload w Live at epoch 1 after epoch 3 was held Live")
	})
	t.Run("a provider down", func(t *testing.T) {
		w := newCheckerWorld(t)
		w.s.provs[0].up = false
		w.live(0, 1) // its node's last state: not counted while down
		w.live(1, 1)
		w.want(t, "provider 0 down, provider 1 at epoch 1", "")
		w.live(2, 1)
		w.want(t, "providers 1 and 2 at epoch 1", "both hold workload w Live at epoch 1")
	})
}
