package lease

import (
	"fmt"
	"slices"
	"time"
)

// Handover is a planned handover of a held workload (workloads move): the
// driver has stopped the workload process and published its final
// checkpoint, named by StateURI.
type Handover struct {
	Workload string
	Epoch    uint64
	// Successor is the member that should take over: one of those standing
	// by for this provider (StandbysOf); empty for the first of them seen
	// alive.
	Successor string
	StateURI  string
	Reason    string
}

// HandOver hands a workload this provider holds Live or Suspect at
// h.Epoch over to its successor, as quorum loss does (rule 7), but at the
// operator's request: it enters Evicted and emits the stop (the process
// already stopped: idempotent) and then the revocation, which carries
// h.StateURI so that the successor resumes exactly where this one stopped.
// If no successor claims, the retake rule brings the workload back here
// after TakeoverAfter (not while draining). Any other state, epoch or
// successor is ErrCannotHandOver.
func (m *Machine) HandOver(now time.Time, h Handover) ([]Effect, error) {
	w := m.byID[h.Workload]
	if w == nil {
		return nil, fmt.Errorf("hand over %s: %w: not tracked", h.Workload, ErrCannotHandOver)
	}
	if w.Holder != m.self || w.Epoch != h.Epoch || (w.State != StateLive && w.State != StateSuspect) {
		return nil, fmt.Errorf("hand over %s: %w: it is %s at epoch %d here, held by %s (asked: epoch %d)",
			h.Workload, ErrCannotHandOver, w.State, w.Epoch, short(w.Holder), h.Epoch)
	}
	standbys := w.standbysBut(m.self)
	if len(standbys) == 0 {
		return nil, fmt.Errorf("hand over %s: %w: its lease names no standby", h.Workload, ErrCannotHandOver)
	}
	if h.Successor != "" && !slices.Contains(standbys, h.Successor) {
		return nil, fmt.Errorf("hand over %s: %w: %s does not stand by for it", h.Workload, ErrCannotHandOver, short(h.Successor))
	}
	now = m.clock(now)
	reason := h.Reason
	if reason == "" {
		reason = "planned handover"
	}
	successor := h.Successor
	if successor == "" {
		successor = m.successor(standbys)
	}
	var out []Effect
	m.enter(w, StateEvicted, &out)
	out = append(out, StopWorkload{ID: w.Spec.ID, Epoch: h.Epoch, Reason: reason}, PublishRevocation{
		ID: w.Spec.ID, Epoch: h.Epoch, Successor: successor, Standbys: standbys, Reason: reason,
		QuorumAt: m.quorumAt(w), StateURI: h.StateURI,
	})
	return out, nil
}

// SetDraining turns draining on or off (the operator's drain): while
// draining this provider starts no claim step (no takeover, no claim on a
// revocation naming it, no retake of a workload it handed over), so that
// workloads moved away stay away. A claim step in progress stops at its
// next retry. It fences nothing: held workloads keep running until they
// are moved.
func (m *Machine) SetDraining(now time.Time, on bool) {
	m.clock(now)
	if m.draining == on {
		return
	}
	m.draining = on
	for _, w := range m.list {
		m.touch(w)
	}
}

// Draining reports whether this provider is draining (SetDraining).
func (m *Machine) Draining() bool { return m.draining }

// short is a key shortened for messages.
func short(k string) string {
	if len(k) > 8 {
		return k[:8]
	}
	return k
}
