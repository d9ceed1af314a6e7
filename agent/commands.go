package agent

// Operator commands (grants and releases queued in the database) applied
// in bounded batches between the machine's other work.

import (
	"context"
	"database/sql"
	"fmt"

	"provideragent/agentdb"
	"provideragent/lease"
)

// cmdBatch bounds the operator commands applied in one step (one commit);
// more wait for the loop's next turn, after inputs and ticks had theirs.
const cmdBatch = 256

// applyCommands applies up to cmdBatch operator commands queued in the
// database in one step; a release ends the batch (it removes the workload
// from the machine once committed). cmdsMore says whether more wait.
func (a *Agent) applyCommands(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, a.sh.Driver().Wait())
	cmds, err := listCommands(lctx, a.data.tables, true, cmdBatch+1)
	cancel()
	a.m.cmdsMore = false
	if err != nil {
		a.logger.Error("read operator commands", "err", err)
		return
	}
	if len(cmds) > cmdBatch {
		a.m.cmdsMore = true
		cmds = cmds[:cmdBatch]
	}
	if len(cmds) == 0 {
		return
	}
	now := a.now()
	s := a.sh.Begin(now)
	type applied struct {
		seq    int64
		result string
	}
	var marks []applied
	var release string
	type pendingMove struct {
		seq       int64
		w         lease.WorkloadSnapshot
		successor string
	}
	var moves []pendingMove
	type pendingDrain struct {
		seq    int64
		moving []string
		left   string
	}
	var drainRuns []pendingDrain
	for i, c := range cmds {
		result := "ok"
		switch c.Action {
		case agentdb.ActionGrant:
			if c.Spec == nil {
				result = "error: no spec"
				break
			}
			if err := s.Grant(*c.Spec); err != nil {
				result = "error: " + err.Error()
			}
			a.m.subs.dirty = true
			a.emit("grant", c.Workload, "local operator grant applied: %s", result)
		case agentdb.ActionMove:
			w, why := a.moveCheck(c.Workload)
			if why != "" {
				result = "error: " + why
				break
			}
			result = "moving"
			moves = append(moves, pendingMove{seq: c.Seq, w: w, successor: c.Successor})
		case agentdb.ActionDrain, agentdb.ActionUndrain:
			on := c.Action == agentdb.ActionDrain
			s.SetDraining(on)
			result = "ok: draining off"
			if on {
				var moving, left []string
				for _, id := range a.machine().IDs() {
					w, why := a.moveCheck(id)
					switch {
					case why == "":
						moving = append(moving, id)
						moves = append(moves, pendingMove{seq: 0, w: w})
					case w.Holder == a.me.self && w.State.Holding():
						left = append(left, id+" ("+why+")")
					}
				}
				leftRunning := fmt.Sprintf("%d: %v", len(left), left)
				result = fmt.Sprintf("%s moving %d durable workloads %v; left running %s", DrainingPrefix, len(moving), moving, leftRunning)
				if len(moving) == 0 {
					result = fmt.Sprintf("%s moved 0, each held by its successor: []; not moved 0: []; left running %s", DrainedPrefix, leftRunning)
				} else {
					drainRuns = append(drainRuns, pendingDrain{seq: c.Seq, moving: moving, left: leftRunning})
				}
			}
			a.emit("drain", "", "%s", result)
			a.m.status.dirty = true
		case agentdb.ActionRelease:
			if !s.Release(c.Workload) {
				result = "error: workload not tracked"
				break
			}
			release = c.Workload
		}
		marks = append(marks, applied{seq: c.Seq, result: result})
		if release != "" {
			a.m.cmdsMore = a.m.cmdsMore || i < len(cmds)-1
			break
		}
	}
	s.Extra(commitExtra(func(ctx context.Context, tx *sql.Tx) error {
		for _, m := range marks {
			if err := a.data.tables.MarkCommand(ctx, tx, m.seq, now, m.result); err != nil {
				return err
			}
		}
		return nil
	}))
	if err := s.Commit(ctx); err != nil {
		a.logger.Error("apply operator commands", "first_seq", cmds[0].Seq, "commands", len(marks), "err", err)
		a.m.cmdsMore = false // retried with the next second's turn
		return
	}
	for _, d := range drainRuns {
		a.startDrain(d.seq, d.moving, d.left)
	}
	for _, m := range moves {
		a.startMove(ctx, m.seq, m.w, m.successor)
	}
	if release != "" {
		a.m.heldDirty, a.m.status.dirty, a.m.subs.dirty = true, true, true
		a.m.status.ids.add(release)
		a.refreshPolicy([]string{release})
	}
}
