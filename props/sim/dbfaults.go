package sim

// Faults aimed at the driver's seams: the simulated database refuses or
// stalls commits, and the agent crashes between a step's stops and its
// commit or between its commit and its deferred effects.

import (
	"errors"
	"fmt"
	"time"
)

// ArmCommitFailure makes every commit fail for d from the node's latest
// local time (a full disk), as the driver sees it: the step's stops and
// reports are performed, the rest held; a crash meanwhile restores what was
// committed before; once a commit succeeds the held steps persist.
func (n *LeaseNode) ArmCommitFailure(d time.Duration) bool {
	if n.d == nil || n.halted {
		return false
	}
	n.failUntil = n.now.Add(d)
	return true
}

// ArmCommitStall makes every commit attempt for d wait for the database as
// long as the driver lets it (a write lock held by another process) and
// then fail: the node's loop stalls for that wait, its ticks and inputs
// delayed, as the agent's are.
func (n *LeaseNode) ArmCommitStall(d time.Duration) bool {
	if n.d == nil || n.halted {
		return false
	}
	n.stallUntil = n.now.Add(d)
	return true
}

// ArmMidStepCrash makes the agent crash at its next commit that writes a
// workload row, after the commit and before the step's deferred effects
// (starts, claim-step requests; the outbox rows are committed, not sent);
// it restarts after down. The workload process is left as it was.
func (n *LeaseNode) ArmMidStepCrash(down time.Duration) {
	n.crashArmed, n.crashBefore, n.crashDown = true, false, down
}

// ArmCrashBeforeCommit makes the agent crash at its next commit that would
// write a workload row, after the step's stops were performed and before
// anything is committed; it restarts after down.
func (n *LeaseNode) ArmCrashBeforeCommit(down time.Duration) {
	n.crashArmed, n.crashBefore, n.crashDown = true, true, down
}

// refuse is the database's answer to a commit attempt (the armed faults).
func (n *LeaseNode) refuse(b *simBatch, wait time.Duration) error {
	if n.crashArmed && n.crashBefore && n.crashAt(b) {
		n.crashArmed = false
		n.env.Logf("agent crashes after the step's stops, before its commit")
		n.halt()
		return errors.New("agent crashed")
	}
	if n.now.Before(n.stallUntil) {
		n.env.Stall(wait)
		return fmt.Errorf("database is locked (waited %v)", wait)
	}
	if n.now.Before(n.failUntil) {
		return errors.New("disk full")
	}
	return nil
}

// wrote is called once a commit wrote b: its outbox rows become receipts,
// sent now (a revocation once its workload's stop completed).
func (n *LeaseNode) wrote(b *simBatch) {
	for _, r := range b.Outbox {
		ev := r.Payload
		e := outboxEntry{Ev: ev, Pending: make([]bool, n.env.NumRelays())}
		for i := range e.Pending {
			e.Pending[i] = true
		}
		n.disk.outbox = append(n.disk.outbox, e)
	}
	if n.crashArmed && !n.crashBefore && n.crashAt(b) {
		n.crashArmed = false
		n.env.Logf("agent crashes after the commit, before the step's deferred effects")
		n.halt()
		return
	}
	if len(b.Outbox) > 0 {
		n.flushOutbox()
	}
}

// crashAt reports whether an armed crash strikes at the commit of b: one
// that writes a workload row (crashIf accepts).
func (n *LeaseNode) crashAt(b *simBatch) bool {
	for _, w := range b.Workloads {
		if n.crashIf == nil || n.crashIf(w) {
			return true
		}
	}
	return false
}

// halt stops the node handling anything and crashes its agent right after
// the current callback.
func (n *LeaseNode) halt() {
	n.halted = true
	n.env.CrashAgent(n.crashDown)
}
