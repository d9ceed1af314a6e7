package agent

// Operator commands (grants and releases queued in the database) applied
// in bounded batches between the machine's other work.

import (
	"context"
	"database/sql"

	"provideragent/agentdb"
)

// cmdBatch bounds the operator commands applied in one step (one commit);
// more wait for the loop's next turn, after inputs and ticks had theirs.
const cmdBatch = 256

// applyCommands applies up to cmdBatch operator commands queued in the
// database in one step; a release ends the batch (it removes the workload
// from the machine once committed). cmdsMore says whether more wait.
func (a *Agent) applyCommands(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, a.d.Wait())
	cmds, err := listCommands(lctx, a.data.tables, true, cmdBatch+1)
	cancel()
	a.in.cmdsMore = false
	if err != nil {
		a.logger.Error("read operator commands", "err", err)
		return
	}
	if len(cmds) > cmdBatch {
		a.in.cmdsMore = true
		cmds = cmds[:cmdBatch]
	}
	if len(cmds) == 0 {
		return
	}
	now := a.now()
	s := a.d.Begin(now)
	type applied struct {
		seq    int64
		result string
	}
	var marks []applied
	var release string
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
			a.subs.dirty = true
			a.emit("grant", c.Workload, "local operator grant applied: %s", result)
		case agentdb.ActionRelease:
			if !s.Release(c.Workload) {
				result = "error: workload not tracked"
				break
			}
			release = c.Workload
		}
		marks = append(marks, applied{seq: c.Seq, result: result})
		if release != "" {
			a.in.cmdsMore = a.in.cmdsMore || i < len(cmds)-1
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
		a.in.cmdsMore = false // retried with the next second's turn
		return
	}
	if release != "" {
		a.beat.dirty, a.view.dirty, a.subs.dirty = true, true, true
		a.view.ids.add(release)
		a.refreshPolicy([]string{release})
	}
}
