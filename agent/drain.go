package agent

// A drain's moves, followed to their end (workloads drain --wait): the
// drain command's result is rewritten once every workload it moves is
// held by its successor, or its move gave up, so that an operator who
// waits knows when the node holds nothing it could hand over.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"provideragent/lease"
)

// DrainedPrefix begins the result a drain command ends with once every
// move it started is over (the CLI's --wait returns then); DrainingPrefix
// begins it while they run.
const (
	DrainedPrefix  = "drained:"
	DrainingPrefix = "draining:"
)

// drainNoneFailed is what a drain's final result says when every move it
// started ended with the workload held by its successor.
const drainNoneFailed = "; not moved 0: []"

// DrainMovedAll reports whether a drain command's result says that every
// workload it moved is held by its successor (true for results of other
// commands, and for a drain that moves nothing).
func DrainMovedAll(result string) bool {
	return !strings.HasPrefix(result, DrainedPrefix) || strings.Contains(result, drainNoneFailed)
}

// drainRun is one drain command's moves.
type drainRun struct {
	seq     int64
	left    string // what the drain left running, as its first result says
	pending map[string]bool
	moved   []string // held by their successors
	failed  []string // "id (why)": aborted, or not seen held elsewhere in time
}

// drains are the drain runs in progress, by workload moved.
type drains map[string]*drainRun

// startDrain follows the moves ids of drain command seq; left is what it
// leaves running.
func (a *Agent) startDrain(seq int64, ids []string, left string) {
	run := &drainRun{seq: seq, left: left, pending: make(map[string]bool, len(ids))}
	a.work.drains.with(func(runs *drains) {
		for _, id := range ids {
			run.pending[id] = true
			(*runs)[id] = run
		}
	})
}

// drainMoveDone ends the part of a drain that moves w: result is the
// move's; a moved workload counts once the node sees its successor hold
// it (within successorWithin), as its standby. The drain's result is
// rewritten when it was the last of its run.
func (a *Agent) drainMoveDone(ctx context.Context, w lease.WorkloadSnapshot, result string) {
	id := w.Spec.ID
	outcome := ""
	if !strings.HasPrefix(result, "moved") {
		outcome = result
	} else if !a.waitHeldElsewhere(ctx, id, w.Epoch, a.successorWithin()) {
		outcome = fmt.Sprintf("handed over, but not seen held by a successor within %v", a.successorWithin())
	}
	var run *drainRun
	last := false
	a.work.drains.with(func(runs *drains) {
		r := (*runs)[id]
		if r == nil || !r.pending[id] {
			return
		}
		delete(r.pending, id)
		delete(*runs, id)
		if outcome == "" {
			r.moved = append(r.moved, id)
		} else {
			r.failed = append(r.failed, id+" ("+outcome+")")
		}
		run, last = r, len(r.pending) == 0
	})
	if !last {
		return
	}
	res := fmt.Sprintf("%s moved %d, each held by its successor: %v; not moved %d: %v; left running %s",
		DrainedPrefix, len(run.moved), run.moved, len(run.failed), run.failed, run.left)
	if err := a.data.tables.SetCommandResult(context.WithoutCancel(ctx), run.seq, res); err != nil {
		a.logger.Error("record the drain's result", "seq", run.seq, "err", err)
	}
	a.emit("drain", "", "%s", res)
}

// successorWithin bounds how long a drain waits, after a handover, for
// the successor's heartbeats to list the workload: its claim step (two
// rounds and the relay delay), its provisioning (a restore included),
// and two beats to reach this node.
func (a *Agent) successorWithin() time.Duration {
	c := a.cfg.Lease
	return 2*c.ClaimTimeout + c.RelayDelay + c.ProvisionTimeout + 2*c.HeartbeatInterval + c.Stale
}

// waitHeldElsewhere waits until this node follows another holder of id at
// an epoch above epoch (its standby again: the successor's heartbeats list
// it), for at most limit; it reports whether it did.
func (a *Agent) waitHeldElsewhere(ctx context.Context, id string, epoch uint64, limit time.Duration) bool {
	deadline := a.now().Add(limit)
	for {
		var w WorkloadStatus
		var ok bool
		a.view.with(func(v *statusView) {
			var i int
			i, ok = v.idx[id]
			if ok && i < len(v.status.Workloads) {
				w = v.status.Workloads[i]
			}
		})
		if ok && w.Epoch > epoch && w.Primary != a.me.self && w.State == string(lease.StateStandby) {
			return true
		}
		if !a.now().Before(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			return false
		}
	}
}
