package sim

// What checkers and fault schedules read of a node's machine.

import (
	"fmt"

	"provideragent/lease"
)

// Machine returns the node's machine (nil while crashed), for reading.
func (n *LeaseNode) Machine() *lease.Machine {
	if n.d == nil {
		return nil
	}
	return n.d.Machine()
}

// Live implements Node: whether the machine holds w in state Live.
func (n *LeaseNode) Live(w string) (uint64, bool) {
	if n.d == nil {
		return 0, false
	}
	st, epoch, _, ok := n.d.Machine().Epochs(w)
	if !ok || st != lease.StateLive {
		return 0, false
	}
	return epoch, true
}

// Holding implements Holder: the epoch the machine holds w at (a Holding
// state), or the one it claims (Promoting).
func (n *LeaseNode) Holding(w string) (uint64, bool, bool) {
	if n.d == nil {
		return 0, false, false
	}
	st, epoch, target, ok := n.d.Machine().Epochs(w)
	switch {
	case !ok:
		return 0, false, false
	case st == lease.StatePromoting:
		return target, true, true
	case st.Holding():
		return epoch, false, true
	}
	return 0, false, false
}

// Claiming reports whether the machine is in the claim step for w
// (Promoting), for fault schedules aimed at claim rounds.
func (n *LeaseNode) Claiming(w string) bool {
	if n.d == nil {
		return false
	}
	st, ok := n.d.Machine().State(w)
	return ok && st == lease.StatePromoting
}

// Describe implements Node.
func (n *LeaseNode) Describe() string {
	if n.d == nil {
		return "down"
	}
	w, ok := n.d.Machine().Workload(n.spec.ID)
	if !ok {
		return "untracked"
	}
	s := fmt.Sprintf("%s@%d", w.State, w.Epoch)
	if w.State == lease.StatePromoting {
		s += fmt.Sprintf("(%s->%d)", w.Phase, w.Target)
	}
	return s
}
