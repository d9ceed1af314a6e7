package agent

// Restoring a durable workload's checkpoint before its epoch starts: off
// the machine loop (like the claim step's reads), one attempt at a time
// per workload, cancelled by a stop.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"provideragent/agentdb"
	"provideragent/backend"
	"provideragent/checkpoint"
	"provideragent/lease"
	"provideragent/uploader"
)

// restoreRun is a restore attempt in flight, cancelled by a stop.
type restoreRun struct {
	epoch   uint64
	attempt int
	cancel  context.CancelFunc
}

// restoreMargin is how much sooner than the machine's restore timeout an
// attempt gives up, so that its report arrives while the machine still
// waits for it.
func restoreMargin(timeout time.Duration) time.Duration {
	return min(timeout/10, 2*time.Second)
}

// beginRestore registers a restore attempt of e and returns its context,
// bounded by the attempt's timeout; a previous attempt of the workload is
// cancelled.
func (d *durables) beginRestore(ctx context.Context, e lease.RestoreCheckpoint) (context.Context, func()) {
	timeout := e.Timeout
	if timeout <= 0 {
		timeout = lease.DefaultRestoreTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout-restoreMargin(timeout))
	run := &restoreRun{epoch: e.Epoch, attempt: e.Attempt, cancel: cancel}
	d.books.with(func(b *durableBooks) {
		if old := b.restores[e.ID]; old != nil {
			old.cancel()
		}
		b.restores[e.ID] = run
	})
	return rctx, func() {
		cancel()
		d.books.with(func(b *durableBooks) {
			if b.restores[e.ID] == run {
				delete(b.restores, e.ID)
			}
		})
	}
}

// cancelRestore cancels the workload's restore in flight whose attempt is
// at least from (0: any), if any. A stop cancels any (it never waits for a
// download, and nothing is placed after it); a start cancels the
// machine's attempts (1 and up: one the machine ended without its answer,
// a best-effort one still running at provision_timeout, must place
// nothing under the run) and leaves a restarted run's own recovery
// (attempt 0, in that start's preparation) alone.
func (d *durables) cancelRestore(id string, from int) {
	d.books.with(func(b *durableBooks) {
		if run := b.restores[id]; run != nil && run.attempt >= from {
			run.cancel()
			delete(b.restores, id)
		}
	})
}

// restoreJob is a restore attempt's request, and why the grant's
// checkpoint key could not be opened (nil when it was, or there is none).
type restoreJob struct {
	checkpoint.RestoreRequest
	keyErr error
}

// restoreRequest is what the restorer needs for e, of workload w as the
// machine holds it (ok false: the machine has no such workload; machine
// goroutine).
func (d *durables) restoreRequest(e lease.RestoreCheckpoint, w lease.WorkloadSnapshot, ok bool) restoreJob {
	req := restoreJob{RestoreRequest: checkpoint.RestoreRequest{RestoreCheckpoint: e}}
	if ok {
		req.Members = append([]string{w.Spec.Primary}, w.Spec.Standbys...)
		if p := w.Spec.Checkpoint; p != nil {
			req.Servers = append(req.Servers, p.Servers...)
		}
		req.Key, req.keyErr = d.checkpointKey(w.Spec)
	}
	req.Servers = append(req.Servers, d.deps.Servers...)
	d.exportServers(req.Servers)
	return req
}

// runRestore carries out one restore attempt (off the machine goroutine)
// and returns the machine's input.
func (d *durables) runRestore(ctx context.Context, job restoreJob) lease.RestoreResult {
	req := job.RestoreRequest
	fail := func(reason string) lease.RestoreResult {
		return lease.RestoreResult{Workload: req.ID, Epoch: req.Epoch, Attempt: req.Attempt, Reason: reason}
	}
	if job.keyErr != nil {
		d.env.logger.Error("checkpoint restore failed: the grant's checkpoint key cannot be opened here", "workload", req.ID, "epoch", req.Epoch, "err", job.keyErr)
		return fail(job.keyErr.Error())
	}
	cp, ok := d.env.backend.(backend.Checkpointer)
	if !ok {
		return fail("the backend gives workloads no checkpoint directory")
	}
	dir, err := cp.CheckpointDir(req.ID, req.Epoch)
	if err != nil {
		return fail(err.Error())
	}
	req.Dir = checkpoint.Dir{Path: dir.Path, UID: dir.UID, GID: dir.GID}
	start := time.Now()
	out := d.restorer.Restore(ctx, req)
	log := d.env.logger.With("workload", req.ID, "epoch", req.Epoch, "attempt", req.Attempt, "took", time.Since(start).Round(time.Millisecond))
	for _, f := range out.Refused {
		d.env.met.ckptRefused.WithLabelValues(f.Reason).Inc()
		log.Warn("checkpoint refused", "record", f.EventID, "reason", f.Reason, "detail", f.Detail)
	}
	switch r := out.Result; {
	case r.OK:
		d.setStateURI(req.ID, req.GrantAt, req.Epoch, out.StateURI)
		row := agentdb.CheckpointRow{Workload: req.ID, GrantAt: req.GrantAt, Epoch: req.Epoch, StateURI: out.StateURI, CreatedAt: d.env.now()}
		if d.publisher != nil {
			d.publisher.Protect(req.ID, req.Epoch, out.Blobs)
		}
		if out.Record != nil {
			parent := epochState{grant: req.GrantAt.Unix(), epoch: req.Epoch, uri: out.Record.EventID}
			d.books.with(func(b *durableBooks) { b.parents[req.ID] = parent })
			row.EventID = out.Record.EventID
		}
		d.saveCheckpoint(ctx, row)
		log.Info("checkpoint restored", "from", r.From, "dir", dir.Path)
		d.env.emit("restore", req.ID, "checkpoint restored for epoch %d: %s", req.Epoch, r.From)
	case r.Fresh:
		log.Info("no checkpoint to restore", "reason", r.Reason)
	default:
		log.Warn("checkpoint restore failed", "reason", r.Reason)
	}
	return out.Result
}

// countRestore counts a restore attempt's result as the machine acts on
// it: restored, fresh (the workload starts from nothing: nothing was
// published, or a best-effort attempt failed) or failed (a required
// attempt failed: it is retried).
func (d *durables) countRestore(mode lease.RestoreMode, r lease.RestoreResult) {
	switch {
	case r.OK:
		d.env.met.restores.WithLabelValues("restored").Inc()
	case r.Fresh || mode != lease.RestoreRequired:
		d.env.met.restores.WithLabelValues("fresh").Inc()
	default:
		d.env.met.restores.WithLabelValues("failed").Inc()
	}
}

// badCopy counts a server's bad copy of a checkpoint blob (the restorer
// logged it).
func (d *durables) badCopy(b checkpoint.BadCopy) {
	d.env.met.badCopies.WithLabelValues(b.Server, b.Reason).Inc()
}

// exportServers exports agent_checkpoint_blobs_refused_total at 0 for
// servers (a lease's, or uploader.servers) with every reason, so that an
// alert's increase() sees a server's first bad copy.
func (d *durables) exportServers(servers []string) {
	for _, s := range servers {
		for _, r := range BadCopyReasons {
			d.env.met.badCopies.WithLabelValues(uploader.ServerKey(s), r)
		}
	}
}

// localRecovery returns what the start of w's run at its epoch must do
// first when the epoch already stood on a checkpoint here (a restart of the
// agent, whose run's directory may be gone with a temporary workload dir):
// put that checkpoint back when the directory has none, so the workload
// does not start from nothing and then publish nothing over it. It tries
// for up to the policy's restore timeout; then a best-effort workload
// starts without it, and the start of a required one fails (the restart
// policy decides what follows: a start from nothing would publish its
// fresh state over the good checkpoint). nil when there is nothing to
// recover (machine goroutine). A stop cancels it (errStartDropped).
func (d *durables) localRecovery(w lease.WorkloadSnapshot) func(context.Context) error {
	if w.Spec.Checkpoint == nil {
		return nil
	}
	id, epoch := w.Spec.ID, w.Epoch
	uri := d.stateURI(id, w.Spec.CreatedAt, epoch)
	if uri == "" {
		return nil
	}
	servers := append(append([]string(nil), w.Spec.Checkpoint.Servers...), d.deps.Servers...)
	timeout := w.Spec.Checkpoint.Timeout()
	required := w.Spec.Checkpoint.Mode() == lease.RestoreRequired
	key, keyErr := d.checkpointKey(w.Spec)
	return func(ctx context.Context) error {
		cp, ok := d.env.backend.(backend.Checkpointer)
		if !ok {
			return nil
		}
		dir, err := cp.CheckpointDir(id, epoch)
		if err != nil {
			d.env.logger.Error("checkpoint directory", "workload", id, "epoch", epoch, "err", err)
			if required {
				return fmt.Errorf("restore required: checkpoint directory: %w", err)
			}
			return nil
		}
		if _, err := checkpoint.Stat(dir.Path); err == nil {
			return nil // the run's own checkpoint is there: newer than any published
		}
		if keyErr != nil {
			d.env.logger.Error("checkpoint of the restarted run not recovered: the grant's checkpoint key cannot be opened here", "workload", id, "epoch", epoch, "err", keyErr)
			if required {
				return fmt.Errorf("restore required: %w", keyErr)
			}
			return nil
		}
		rctx, done := d.beginRestore(ctx, lease.RestoreCheckpoint{ID: id, Epoch: epoch, Timeout: timeout})
		defer done()
		start := time.Now()
		for {
			_, err = d.restorer.PlaceURI(rctx, id, uri, key, servers, checkpoint.Dir{Path: dir.Path, UID: dir.UID, GID: dir.GID})
			if err == nil || !sleepCtx(rctx, time.Second) {
				break // placed, or the restore timeout (or a stop) ended the tries
			}
		}
		switch {
		case err == nil:
			d.env.logger.Info("checkpoint recovered for the run's restart", "workload", id, "epoch", epoch, "state_uri", uri,
				"took", time.Since(start).Round(time.Millisecond))
			d.env.emit("restore", id, "epoch %d restarts from its last checkpoint %s", epoch, uri)
		case rctx.Err() != nil && ctx.Err() == nil && !errors.Is(context.Cause(rctx), context.DeadlineExceeded):
			return errStartDropped // a stop cancelled it: the stop comes next
		case required:
			d.env.logger.Error("checkpoint of the restarted run not recovered: restore required, the start fails", "workload", id, "epoch", epoch,
				"state_uri", uri, "err", err)
			return fmt.Errorf("restore required: the checkpoint epoch %d stands on (%s) was not recovered within %v: %w", epoch, uri, timeout, err)
		default:
			d.env.logger.Error("checkpoint of the restarted run not recovered: it starts without it", "workload", id, "epoch", epoch,
				"state_uri", uri, "err", err)
		}
		return nil
	}
}
