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
	case a.ckpt.publisher == nil:
		return w, "this agent publishes no checkpoints (no tile store)"
	case len(lease.StandbysOf(w)) == 0:
		return w, "its lease names no standby"
	case !a.machine().StandbyAlive(id):
		return w, "no standby alive: moving it would stop it with nobody to take over"
	}
	a.ckpt.mu.Lock()
	moving := a.ckpt.moving[id]
	a.ckpt.mu.Unlock()
	if moving {
		return w, "already moving"
	}
	return w, ""
}

// startMove begins moving workload w (machine goroutine): the rest runs
// on its own goroutine; the command seq gets the outcome.
func (a *Agent) startMove(ctx context.Context, seq int64, w lease.WorkloadSnapshot, successor string) {
	id := w.Spec.ID
	a.ckpt.mu.Lock()
	a.ckpt.moving[id] = true
	job, watched := a.ckpt.watched[id]
	a.ckpt.mu.Unlock()
	a.emit("move", id, "planned move of epoch %d started: stopping the workload for its final checkpoint", w.Epoch)
	a.goFeedback(ctx, func(ctx context.Context) {
		defer func() {
			a.ckpt.mu.Lock()
			delete(a.ckpt.moving, id)
			a.ckpt.mu.Unlock()
		}()
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
	a.unwatchCheckpoints(id)
	a.sh.Enqueue(ctx, driver.Op{Kind: driver.OpStop, Workload: id, Epoch: epoch, Reason: stopReasonMove})
	for !a.sh.Fenced(id) {
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return "move aborted: agent shutting down"
		}
	}
	// 2. Publish the final checkpoint. Always: an inode number does not
	// tell it from the one published last (a freed inode is reused), and
	// its tiles are on the servers already when it is the same.
	uri := ""
	last, ok := a.ckpt.publisher.Last(id)
	_, statErr := checkpoint.Stat(job.Dir.Path)
	switch {
	case statErr == nil:
		job.Final = true
		pctx, cancel := context.WithTimeout(ctx, a.ckpt.deps.MoveTimeout)
		pub, err := a.ckpt.publisher.Publish(pctx, job)
		cancel()
		if err != nil {
			return a.abortMove(ctx, w, job, fmt.Sprintf("final checkpoint not published: %v", err))
		}
		a.published(ctx, pub)
		a.emit("checkpoint", id, "final checkpoint epoch %d seq %d published (%d bytes on %d servers, record on %d relays)",
			epoch, pub.Seq, pub.Size, len(pub.Servers), len(pub.Relays))
		uri = pub.StateURI
	case ok && last.Epoch == epoch:
		uri = last.StateURI // it wrote none on SIGTERM: the last one stands
	default:
		return a.abortMove(ctx, w, job, fmt.Sprintf("no checkpoint to hand over: %v", statErr))
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
	if !a.holds(w.Spec.ID, w.Epoch) {
		return "move aborted: " + why + "; no longer held here"
	}
	a.sh.Enqueue(ctx, driver.Op{Kind: driver.OpStart, Workload: w.Spec.ID, Epoch: w.Epoch, Command: w.Spec.Command})
	job.Final = false
	a.ckpt.mu.Lock()
	a.ckpt.watched[w.Spec.ID] = job
	a.ckpt.mu.Unlock()
	a.ckpt.watcher.Watch(w.Spec.ID, w.Epoch, job.Dir.Path, checkpoint.FileID{})
	return "move aborted: " + why + "; restarted here"
}

// applyHandover feeds a handover to the step (machine goroutine).
func applyHandover(s interface{ HandOver(lease.Handover) error }, in *handoverInput) {
	err := s.HandOver(in.h)
	if err != nil && !errors.Is(err, lease.ErrCannotHandOver) {
		err = fmt.Errorf("hand over: %w", err)
	}
	in.done <- err
}
