package sim

// The durable outbox, as the agent's courier keeps it: the rows the driver
// committed become receipts on the node's disk, sent to every relay until
// each accepted them, a revocation only once the shell's fence gate
// releases it (rule 7).

import (
	"fmt"
	"time"

	"provideragent/driver"
	"provideragent/lease"
)

// outboxEntry is one durable outbound event (revocation, withdrawn marker
// or announcement) and the relays that have not yet accepted it: the
// courier's receipts, kept with the database (they survive a crash).
type outboxEntry struct {
	Ev      Event
	Pending []bool
}

type timerOutbox struct{ gen uint64 }

// OutboxRetry is how often a LeaseNode re-sends outbox events that some
// relay has not accepted yet.
const OutboxRetry = 30 * time.Second

// fenceRetry is how often the simulated outbox looks again at a revocation
// the shell's fence gate held back (the agent's courier: every
// driver.DefaultFenceRecheck; a second here keeps the simulation's events
// few while a stop takes up to stop_grace).
const fenceRetry = time.Second

func (n *LeaseNode) pruneOutbox() {
	out := n.disk.outbox[:0]
	for _, e := range n.disk.outbox {
		for _, p := range e.Pending {
			if p {
				out = append(out, e)
				break
			}
		}
	}
	n.disk.outbox = out
}

// flushOutbox re-sends every outbox event to the relays that have not
// accepted it yet (the same event, as courier/ does). A revocation waits
// while its workload still runs here (its stop not completed): the agent's
// fence gate (rule 7).
func (n *LeaseNode) flushOutbox() {
	gated := false
	for _, e := range n.disk.outbox {
		var revokes string
		if rev, ok := e.Ev.Body.(LeaseRevocation); ok {
			revokes = rev.Workload
		}
		if !n.sh.Release(revokes) {
			gated = true
			continue
		}
		var to []RelayID
		for r, p := range e.Pending {
			if p {
				to = append(to, RelayID(r))
			}
		}
		if len(to) > 0 {
			n.env.Republish(e.Ev, to)
		}
	}
	// One retry timer: soon while a revocation waits for its stop, else
	// while any event waits for a relay.
	switch {
	case gated:
		n.flushGen++
		n.env.At(n.now.Add(n.sh.FenceRecheck()), timerOutbox{gen: n.flushGen})
	case len(n.disk.outbox) > 0:
		n.flushGen++
		n.env.At(n.now.Add(OutboxRetry), timerOutbox{gen: n.flushGen})
	}
}

// simOutbox is the node's driver.Outbox: simulated events, created at the
// job's time (whole seconds), as the agent signs them.
type simOutbox struct{ n *LeaseNode }

func (o simOutbox) Build(jobs []driver.OutboxJob) []driver.OutboxResult[Event] {
	out := make([]driver.OutboxResult[Event], len(jobs))
	for i, j := range jobs {
		ev := o.n.outboxEvent(j.At, j.Effect)
		ev.ID, ev.Author = o.n.env.NewEventID(), o.n.self
		out[i].Row = driver.OutboxRow[Event]{Key: fmt.Sprintf("%T:%s:%d:%d", j.Effect, j.Effect.Workload(), ev.CreatedAt, ev.ID), Payload: ev}
	}
	return out
}

// outboxEvent is the event an Outbox effect (lease.DurabilityOf) puts in
// the durable outbox, built as the agent builds it.
func (n *LeaseNode) outboxEvent(at time.Time, e lease.Effect) Event {
	switch e := e.(type) {
	case lease.PublishRevocation:
		var q int64
		if !e.QuorumAt.IsZero() {
			q = e.QuorumAt.UnixMilli() // whole milliseconds, rounded down, as on the wire
		}
		return Event{Kind: KindRevocation, CreatedAt: at.Unix(), D: e.ID, Body: LeaseRevocation{
			Workload: e.ID, Epoch: e.Epoch, Successor: e.Successor, Standbys: e.Standbys, Reason: e.Reason, QuorumAt: q,
			StateURI: e.StateURI,
		}}
	case lease.WithdrawClaim:
		return Event{Kind: KindClaim, CreatedAt: at.Unix(), D: ClaimD(e.ID), Body: LeaseClaim{
			Workload: e.ID, Epoch: e.Epoch, Active: false,
		}}
	case lease.AnnouncePromotion:
		return Event{Kind: KindClaim, CreatedAt: at.Unix(), D: AnnouncementD(e.ID), Body: LeaseAnnouncement{
			Workload: e.ID, Epoch: e.Epoch,
		}}
	}
	panic(fmt.Sprintf("sim: %T is not an outbox effect", e)) // lease.DurabilityOf and this switch disagree
}
