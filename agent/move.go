package agent

// Planned handover of a durable workload (workloads move): stop it here,
// publish the checkpoint it wrote on SIGTERM, then hand the lease over
// naming that checkpoint, so that the successor resumes exactly where it
// stopped. Fencing still comes first: the process stops before anything
// is published, and the revocation is queued only after that.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"provideragent/agentdb"
	"provideragent/checkpoint"
	"provideragent/driver"
	"provideragent/lease"
)

// DefaultMoveTimeout bounds a move's final checkpoint publish.
const DefaultMoveTimeout = 60 * time.Second

// maxMoves bounds the moves in flight (a drain moves every durable
// workload held here).
const maxMoves = 8

// QueueDrain queues turning this node's drain on (no claim, takeover or
// retake; every durable workload held here is moved) or off.
func QueueDrain(ctx context.Context, db *sql.DB, on bool, now time.Time) (int64, error) {
	st, err := agentdb.Open(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("queue drain: %w", err)
	}
	action := agentdb.ActionUndrain
	if on {
		action = agentdb.ActionDrain
	}
	return st.QueueCommand(ctx, nil, action, "", "", now)
}

// QueueMove queues the planned handover of workload to successor (hex;
// "" for the first standby alive).
func QueueMove(ctx context.Context, db *sql.DB, workload, successor string, now time.Time) (int64, error) {
	st, err := agentdb.Open(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("queue move: %w", err)
	}
	return st.QueueCommand(ctx, nil, agentdb.ActionMove, workload, successor, now)
}

// handoverInput asks the machine goroutine to hand a workload over; the
// machine's verdict goes to done.
type handoverInput struct {
	h    lease.Handover
	done chan error
}

// moveCheck says why workload id cannot be moved now ("" when it can) and
// returns what the move needs (machine goroutine). The machine checks the
// successor at the handover.
func (a *Agent) moveCheck(id string) (lease.WorkloadSnapshot, string) {
	w, ok := a.machine().Workload(id)
	switch {
	case !ok:
		return w, "workload not tracked"
	case w.Holder != a.me.self || (w.State != lease.StateLive && w.State != lease.StateSuspect):
		return w, fmt.Sprintf("it is %s at epoch %d here, not held live", w.State, w.Epoch)
	case w.Spec.Checkpoint == nil:
		return w, "not a durable workload (its grant has no checkpoint policy): a move would lose its state"
	case !a.ckpt.publishes():
		return w, "this agent publishes no checkpoints (no tile store)"
	case len(lease.StandbysOf(w)) == 0:
		return w, "its lease names no standby"
	case !a.machine().StandbyAlive(id):
		return w, "no standby alive: moving it would stop it with nobody to take over"
	}
	if a.ckpt.moving(id) {
		return w, "already moving"
	}
	return w, ""
}

// startMove begins moving workload w (machine goroutine): the rest runs
// on its own goroutine; the command seq gets the outcome.
func (a *Agent) startMove(ctx context.Context, seq int64, w lease.WorkloadSnapshot, successor string) {
	id := w.Spec.ID
	job, watched := a.ckpt.beginMove(id)
	a.emit("move", id, "planned move of epoch %d started: stopping the workload for its final checkpoint", w.Epoch)
	a.goFeedback(ctx, func(ctx context.Context) {
		defer a.ckpt.endMove(id)
		select { // a drain moves maxMoves at a time
		case a.ckpt.moveSem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		result := a.move(ctx, w, job, watched, successor)
		<-a.ckpt.moveSem
		a.logger.Info("planned move", "workload", id, "epoch", w.Epoch, "result", result)
		a.emit("move", id, "planned move of epoch %d: %s", w.Epoch, result)
		a.obs.met.moves.WithLabelValues(moveOutcome(result)).Inc()
		if seq == 0 { // part of a drain: over once the successor holds it
			a.drainMoveDone(ctx, w, result)
			return
		}
		if err := a.data.tables.MarkCommand(context.WithoutCancel(ctx), nil, seq, a.now(), result); err != nil {
			a.logger.Error("record the move's result", "workload", id, "err", err)
		}
	})
}

func moveOutcome(result string) string {
	if strings.HasPrefix(result, "moved") {
		return "moved"
	}
	return "aborted"
}

// move runs a planned move: stop, final checkpoint, handover. It returns
// the command's result.
func (a *Agent) move(ctx context.Context, w lease.WorkloadSnapshot, job checkpoint.PublishJob, watched bool, successor string) string {
	id, epoch := w.Spec.ID, w.Epoch
	if !watched || job.Epoch != epoch {
		return "move aborted: its checkpoint directory is not watched at this epoch"
	}
	// 1. Stop the process (SIGTERM, SIGKILL after stop_grace): it writes
	// its final checkpoint. No new checkpoint is published meanwhile.
	a.ckpt.unwatch(id)
	a.sh.Enqueue(ctx, driver.Op{Kind: driver.OpStop, Workload: id, Epoch: epoch, Reason: stopReasonMove})
	for !a.sh.Fenced(id) {
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return "move aborted: agent shutting down"
		}
	}
	// 2. Publish the final checkpoint.
	uri, err := a.ckpt.finalCheckpoint(ctx, job)
	if err != nil {
		return a.abortMove(ctx, w, job, err.Error())
	}
	// 3. Hand over: the machine enters Evicted and queues the revocation
	// naming the final checkpoint.
	done := make(chan error, 1)
	a.send(ctx, input{handover: &handoverInput{h: lease.Handover{Workload: id, Epoch: epoch, Successor: successor, StateURI: uri, Reason: "planned move"}, done: done}})
	select {
	case err := <-done:
		if err != nil {
			return a.abortMove(ctx, w, job, err.Error())
		}
	case <-ctx.Done():
		return "move aborted: agent shutting down"
	}
	return "moved: final checkpoint " + uri
}

// abortMove starts the workload here again (its final checkpoint is in
// its directory) and says why the move was aborted.
func (a *Agent) abortMove(ctx context.Context, w lease.WorkloadSnapshot, job checkpoint.PublishJob, why string) string {
	if !a.ckpt.holds(w.Spec.ID, w.Epoch) {
		return "move aborted: " + why + "; no longer held here"
	}
	a.sh.Enqueue(ctx, driver.Op{Kind: driver.OpStart, Workload: w.Spec.ID, Epoch: w.Epoch, Command: w.Spec.Command})
	a.ckpt.rewatch(job)
	return "move aborted: " + why + "; restarted here"
}

// The durable side of a move: marking it, its final checkpoint, and
// watching the run again when the move is aborted.

// moving reports whether a planned move is handing workload id over.
func (d *durables) moving(id string) (moving bool) {
	d.books.with(func(b *durableBooks) { moving = b.moving[id] })
	return moving
}

// beginMove marks workload id as moving and returns what its run's new
// checkpoints are published as (watched false: its directory is not
// watched).
func (d *durables) beginMove(id string) (job checkpoint.PublishJob, watched bool) {
	d.books.with(func(b *durableBooks) {
		b.moving[id] = true
		job, watched = b.watched[id]
	})
	return job, watched
}

// endMove clears the mark beginMove set.
func (d *durables) endMove(id string) {
	d.books.with(func(b *durableBooks) { delete(b.moving, id) })
}

// finalCheckpoint is the checkpoint a move hands over once job's run has
// stopped: the one it wrote on SIGTERM, published now (always: an inode
// number does not tell it from the one published last, as a freed inode is
// reused, and its tiles are on the servers already when it is the same),
// else the last one its epoch published. An error says why there is none.
func (d *durables) finalCheckpoint(ctx context.Context, job checkpoint.PublishJob) (string, error) {
	last, ok := d.publisher.Last(job.Workload)
	_, statErr := checkpoint.Stat(job.Dir.Path)
	switch {
	case statErr == nil:
		job.Final = true
		pctx, cancel := context.WithTimeout(ctx, d.deps.MoveTimeout)
		pub, err := d.publisher.Publish(pctx, job)
		cancel()
		if err != nil {
			return "", fmt.Errorf("final checkpoint not published: %w", err)
		}
		d.published(ctx, pub)
		d.env.emit("checkpoint", job.Workload, "final checkpoint epoch %d seq %d published (%d bytes on %d servers, record on %d relays)",
			job.Epoch, pub.Seq, pub.Size, len(pub.Servers), len(pub.Relays))
		return pub.StateURI, nil
	case ok && last.Epoch == job.Epoch:
		return last.StateURI, nil // it wrote none on SIGTERM: the last one stands
	}
	return "", fmt.Errorf("no checkpoint to hand over: %w", statErr)
}

// rewatch watches job's run again after an aborted move (its final
// checkpoint is in its directory, published again as an ordinary one).
func (d *durables) rewatch(job checkpoint.PublishJob) {
	job.Final = false
	d.books.with(func(b *durableBooks) { b.watched[job.Workload] = job })
	d.watcher.Watch(job.Workload, job.Epoch, job.Dir.Path, checkpoint.FileID{})
}

// applyHandover feeds a handover to the step (machine goroutine).
func applyHandover(s interface{ HandOver(lease.Handover) error }, in *handoverInput) {
	err := s.HandOver(in.h)
	if err != nil && !errors.Is(err, lease.ErrCannotHandOver) {
		err = fmt.Errorf("hand over: %w", err)
	}
	in.done <- err
}
