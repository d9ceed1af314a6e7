package agentdb

import (
	"context"
	"fmt"
	"time"
)

// CheckpointRow is the last checkpoint a durable workload's epoch stood on
// here: published (Seq >= 1, EventID its record) or restored (Seq 0,
// EventID the record it came from, "" for a state URI without one).
type CheckpointRow struct {
	Workload string
	// GrantAt is the created_at of the lease grant the epoch belongs to
	// (to the second).
	GrantAt   time.Time
	Epoch     uint64
	Seq       uint64
	EventID   string
	StateURI  string
	CreatedAt time.Time // the record's created_at (restored: when placed)
}

// PutCheckpoint records r as its workload's last checkpoint, unless the
// row already there is of a later epoch of the same grant.
func (s *Store) PutCheckpoint(ctx context.Context, r CheckpointRow) error {
	if r.Workload == "" {
		return fmt.Errorf("put checkpoint: %w: empty workload", ErrBadRow)
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO checkpoint_ledger (workload, grant_at, epoch, seq, event_id, state_uri, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (workload) DO UPDATE SET grant_at = excluded.grant_at, epoch = excluded.epoch, seq = excluded.seq,
			event_id = excluded.event_id, state_uri = excluded.state_uri, created_at = excluded.created_at
		WHERE excluded.grant_at <> checkpoint_ledger.grant_at OR excluded.epoch >= checkpoint_ledger.epoch`,
		r.Workload, r.GrantAt.Unix(), int64(r.Epoch), int64(r.Seq), r.EventID, r.StateURI, r.CreatedAt.UnixMilli())
	if err != nil {
		return fmt.Errorf("put checkpoint of %s: %w", r.Workload, err)
	}
	return nil
}

// DeleteCheckpoint forgets workload's row (a released or finished lease).
func (s *Store) DeleteCheckpoint(ctx context.Context, workload string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM checkpoint_ledger WHERE workload = ?`, workload); err != nil {
		return fmt.Errorf("delete checkpoint of %s: %w", workload, err)
	}
	return nil
}

// Checkpoints lists every workload's row.
func (s *Store) Checkpoints(ctx context.Context) ([]CheckpointRow, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT workload, grant_at, epoch, seq, event_id, state_uri, created_at FROM checkpoint_ledger ORDER BY workload`)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	defer rows.Close()
	var out []CheckpointRow
	for rows.Next() {
		var r CheckpointRow
		var grantAt, epoch, seq, created int64
		if err := rows.Scan(&r.Workload, &grantAt, &epoch, &seq, &r.EventID, &r.StateURI, &created); err != nil {
			return nil, fmt.Errorf("list checkpoints: %w", err)
		}
		r.GrantAt = time.Unix(grantAt, 0).UTC()
		r.Epoch, r.Seq, r.CreatedAt = uint64(epoch), uint64(seq), time.UnixMilli(created).UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	return out, nil
}
