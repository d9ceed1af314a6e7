package sim

import (
	"context"
	"fmt"
	"time"

	"provideragent/driver"
	"provideragent/lease"
)

// Mover is a Node that can move a workload it holds away at the operator's
// request (LeaseNode does): a planned handover.
type Mover interface {
	Move(env Env, now time.Time, w string)
}

// Move asks provider p's agent to move workload w away (the operator's
// workloads move): an event of its own, handled by the node now, or at
// resume when paused; nothing when its agent is down or it is no Mover.
// The node's CheckpointJournal says how it ended (NoteMoved,
// NoteMoveAborted).
func (s *Sim) Move(p ProviderID, w string) {
	pr := s.provs[p]
	m, ok := pr.node.(Mover)
	if !ok || !pr.up {
		s.Logf("move of %s away from %s: not possible (%s)", w, pr.name, map[bool]string{true: "down", false: "no mover"}[ok])
		return
	}
	s.Logf("operator moves %s away from %s", w, pr.name)
	inc := pr.incarnation
	s.schedule(s.now, func() {
		s.deliver(pr, inc, func(now time.Time) { m.Move(envFor(s, pr), now, w) })
	})
}

// Move implements Mover, as the agent's move does (design §5): refused
// unless the machine holds w Live and this node runs the copy it started;
// the copy is stopped (it writes its exact last value), the final record is
// published to every relay, and once M relays accepted it the machine hands
// w over (Step.HandOver: evicted, stop, revocation naming the successor and
// carrying the record as its state_uri). Fewer than M acceptances by
// MoveTimeout abort the move: the copy starts again here, from the file.
func (n *LeaseNode) Move(env Env, now time.Time, w string) {
	if !n.enter(env, now) {
		return
	}
	refuse := func(why string) {
		env.Logf("move of %s refused: %s", w, why)
	}
	epoch, live := n.Live(w)
	c := n.copies[w]
	switch {
	case !n.durable():
		refuse("its lease has no checkpoint policy")
		return
	case !live:
		refuse("not held Live here")
		return
	case n.moves[w] != nil:
		refuse("a move is under way")
		return
	case c == nil || c.epoch != epoch || c.stopped:
		refuse("no copy of it runs here")
		return
	}
	value, ok := n.stopCopy(w)
	if !ok {
		refuse("no copy of it runs here")
		return
	}
	n.sh.Enqueue(context.Background(), driver.Op{Kind: driver.OpStop, Workload: w, Epoch: epoch, Reason: "planned move"})
	f := n.disk.files[w]
	rec := n.publishRecord(w, f, now, true)
	mv := &moveOp{workload: w, epoch: epoch, value: value, rec: rec}
	if rec == nil {
		n.abortMove(mv, "the final checkpoint cannot be published: the blob servers are down")
		return
	}
	n.moves[w] = mv
	env.Logf("move of %s: copy stopped at value %d, final record %s published", w, value, eventID(rec.ID))
	env.At(now.Add(MoveTimeout), timerMove{workload: w, rec: rec.ID})
}

// moveFor is the move whose final record is id.
func (n *LeaseNode) moveFor(id EventID) *moveOp {
	for _, mv := range n.moves {
		if mv.rec.ID == id {
			return mv
		}
	}
	return nil
}

// movePublished counts one relay's answer to a move's final record: at M
// acceptances the machine hands the workload over; once every relay
// answered short of M, the move is aborted.
func (n *LeaseNode) movePublished(now time.Time, mv *moveOp, ok bool) {
	if mv.done {
		return
	}
	mv.answered++
	if ok {
		mv.acks++
	}
	switch {
	case mv.acks >= n.cfg.M:
		mv.done = true
		s := n.sh.Begin(now)
		err := s.HandOver(lease.Handover{Workload: mv.workload, Epoch: mv.epoch, StateURI: stateURI(mv.rec), Reason: "planned move"})
		n.commit(s)
		if err != nil {
			n.abortMove(mv, fmt.Sprintf("hand over: %v", err))
			return
		}
		delete(n.moves, mv.workload)
		n.note(CheckpointNote{What: NoteMoved, Workload: mv.workload, Epoch: mv.epoch, Value: mv.value, Record: mv.rec})
		n.env.Logf("move of %s: final record on %d relays, handed over", mv.workload, mv.acks)
	case mv.answered >= n.env.NumRelays():
		n.abortMove(mv, fmt.Sprintf("final record accepted by %d relays, fewer than %d", mv.acks, n.cfg.M))
	}
}

// checkMoveLost journals, after a restart, a handover the crash lost
// before its step was committed (its commit failed or never came): the
// restored machine holds the workload at the moved epoch again and starts
// the copy from the file, so the move was aborted by the restart.
func (n *LeaseNode) checkMoveLost() {
	w := n.spec.ID
	var last *CheckpointNote
	for i := range n.journal {
		if nt := &n.journal[i]; nt.Workload == w && (nt.What == NoteMoved || nt.What == NoteMoveAborted) {
			last = nt
		}
	}
	if last == nil || last.What != NoteMoved {
		return
	}
	if st, ok := n.d.Machine().State(w); ok && st.Holding() {
		if e, _, _ := n.Holding(w); e == last.Epoch {
			n.note(CheckpointNote{What: NoteMoveAborted, Workload: w, Epoch: last.Epoch, Value: last.Value, Record: last.Record,
				Detail: "aborted by the restart: the handover was lost before its commit"})
			n.env.Logf("move of %s at epoch %d aborted by the restart (its handover was never committed)", w, last.Epoch)
		}
	}
}

// abortMove gives a move up and starts the copy again when the machine
// still holds the workload at the move's epoch.
func (n *LeaseNode) abortMove(mv *moveOp, why string) {
	mv.done = true
	delete(n.moves, mv.workload)
	n.note(CheckpointNote{What: NoteMoveAborted, Workload: mv.workload, Epoch: mv.epoch, Value: mv.value, Record: mv.rec, Detail: why})
	n.env.Logf("move of %s aborted: %s", mv.workload, why)
	if e, _, ok := n.Holding(mv.workload); ok && e == mv.epoch {
		if st, _ := n.d.Machine().State(mv.workload); st == lease.StateLive || st == lease.StateSuspect {
			n.sh.Enqueue(context.Background(), driver.Op{Kind: driver.OpStart, Workload: mv.workload, Epoch: mv.epoch})
		}
	}
}
