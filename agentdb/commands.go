package agentdb

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Operator command actions (agent_commands.action).
const (
	ActionGrant   = "grant"
	ActionRelease = "release"
	// ActionMove is a planned handover of a durable workload; the
	// command's spec is the chosen successor's hex key ("" for any).
	ActionMove = "move"
	// ActionDrain and ActionUndrain turn the node's drain on and off
	// (workload "").
	ActionDrain   = "drain"
	ActionUndrain = "undrain"
)

// CommandRow is one operator request in the command queue
// (`provider-agent workloads grant|release` write it, the running agent
// applies it). Spec is the lease package's JSON of a grant's spec ("" for
// a release); the store does not interpret it.
type CommandRow struct {
	Seq       int64
	Action    string
	Workload  string
	Spec      string
	CreatedAt time.Time
	AppliedAt time.Time // zero while pending
	Result    string
}

// QueueCommand appends a command inside tx (nil: its own transaction) and
// returns its sequence number.
func (s *Store) QueueCommand(ctx context.Context, tx *sql.Tx, action, workload, spec string, now time.Time) (int64, error) {
	var seq int64
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO agent_commands (action, workload, spec, created_at) VALUES (?, ?, ?, ?)`,
			action, workload, spec, now.UnixMilli())
		if err != nil {
			return fmt.Errorf("queue %s %s: %w", action, workload, err)
		}
		seq, err = res.LastInsertId()
		return err
	})
	return seq, err
}

// Commands returns queued commands, oldest first: all of them, or
// (pendingOnly) those not applied yet; limit <= 0 means no limit.
func (s *Store) Commands(ctx context.Context, pendingOnly bool, limit int) ([]CommandRow, error) {
	q := `SELECT seq, action, workload, spec, created_at, COALESCE(applied_at, 0), result FROM agent_commands`
	if pendingOnly {
		q += ` WHERE applied_at IS NULL` // agent_commands_pending
	}
	q += ` ORDER BY seq`
	if limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, limit)
	}
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list commands: %w", err)
	}
	defer rows.Close()
	var out []CommandRow
	for rows.Next() {
		var c CommandRow
		var created, applied int64
		if err := rows.Scan(&c.Seq, &c.Action, &c.Workload, &c.Spec, &created, &applied, &c.Result); err != nil {
			return nil, fmt.Errorf("list commands: %w", err)
		}
		c.CreatedAt = time.UnixMilli(created).UTC()
		if applied != 0 {
			c.AppliedAt = time.UnixMilli(applied).UTC()
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list commands: %w", err)
	}
	return out, nil
}

// MarkCommand records inside tx (nil: its own transaction) that command
// seq was applied at now with result.
func (s *Store) MarkCommand(ctx context.Context, tx *sql.Tx, seq int64, now time.Time, result string) error {
	return s.inTx(ctx, tx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE agent_commands SET applied_at = ?, result = ? WHERE seq = ?`, now.UnixMilli(), result, seq); err != nil {
			return fmt.Errorf("mark command %d: %w", seq, err)
		}
		return nil
	})
}

// SetCommandResult replaces the result of an applied command (a drain's,
// once its moves are over), leaving when it was applied as it is.
func (s *Store) SetCommandResult(ctx context.Context, seq int64, result string) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE agent_commands SET result = ? WHERE seq = ? AND applied_at IS NOT NULL`, result, seq); err != nil {
		return fmt.Errorf("set the result of command %d: %w", seq, err)
	}
	return nil
}
