package agent

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"provideragent/internal/sqlitedb"
	"provideragent/lease"
)

// Component is the name under which the agent's migrations are recorded.
const Component = "agent"

// migrations are the agent's tables, append-only. They live here as Go
// strings (the agent package owns no migrations directory).
var migrations = []sqlitedb.Migration{
	{
		Version: 1, Name: "create_agent_tables",
		Up: `
CREATE TABLE agent_workloads (
	id         TEXT    PRIMARY KEY,
	state      TEXT    NOT NULL,
	epoch      INTEGER NOT NULL,
	snapshot   TEXT    NOT NULL, -- lease.WorkloadSnapshot as JSON
	updated_at INTEGER NOT NULL  -- unix milliseconds
);
CREATE TABLE agent_meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
CREATE TABLE agent_commands (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	action     TEXT    NOT NULL CHECK (action IN ('grant', 'release')),
	workload   TEXT    NOT NULL,
	spec       TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	applied_at INTEGER,
	result     TEXT    NOT NULL DEFAULT ''
);`,
		Down: `DROP TABLE agent_commands; DROP TABLE agent_meta; DROP TABLE agent_workloads;`,
	},
}

// Migrate applies the agent's migrations to db.
func Migrate(ctx context.Context, db *sql.DB) error {
	if err := sqlitedb.Migrate(ctx, db, Component, migrations, 0); err != nil {
		return fmt.Errorf("migrate agent tables: %w", err)
	}
	return nil
}

// metaMachine is the agent_meta key of the machine snapshot without its
// workloads (relay tables, clock, sync flags).
const (
	metaMachine = "machine"
	metaCursor  = "cursor"
)

// workloadRow is one marshalled workload snapshot.
type workloadRow struct {
	id    string
	state string
	epoch uint64
	json  []byte
}

// saveWorkloads upserts workload snapshots inside tx.
func saveWorkloads(ctx context.Context, tx *sql.Tx, now time.Time, ws []lease.WorkloadSnapshot) error {
	rows := make([]workloadRow, 0, len(ws))
	for i := range ws {
		b, err := json.Marshal(&ws[i])
		if err != nil {
			return fmt.Errorf("save workload %s: %w", ws[i].Spec.ID, err)
		}
		rows = append(rows, workloadRow{id: ws[i].Spec.ID, state: string(ws[i].State), epoch: ws[i].Epoch, json: b})
	}
	return saveWorkloadRows(ctx, tx, now, rows)
}

// saveWorkloadRows upserts marshalled workload snapshots inside tx.
func saveWorkloadRows(ctx context.Context, tx *sql.Tx, now time.Time, rows []workloadRow) error {
	if len(rows) == 0 {
		return nil
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO agent_workloads (id, state, epoch, snapshot, updated_at)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET state = excluded.state, epoch = excluded.epoch,
			snapshot = excluded.snapshot, updated_at = excluded.updated_at`)
	if err != nil {
		return fmt.Errorf("save workloads: %w", err)
	}
	defer stmt.Close()
	for _, r := range rows {
		if _, err := stmt.ExecContext(ctx, r.id, r.state, int64(r.epoch), string(r.json), now.UnixMilli()); err != nil {
			return fmt.Errorf("save workload %s: %w", r.id, err)
		}
	}
	return nil
}

func deleteWorkload(ctx context.Context, tx *sql.Tx, id string) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM agent_workloads WHERE id = ?`, id); err != nil {
		return fmt.Errorf("delete workload %s: %w", id, err)
	}
	return nil
}

func setMeta(ctx context.Context, tx *sql.Tx, key, value string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO agent_meta (key, value) VALUES (?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value`, key, value)
	if err != nil {
		return fmt.Errorf("save %s: %w", key, err)
	}
	return nil
}

// saveMachineMeta stores the snapshot's non-workload part.
func saveMachineMeta(ctx context.Context, tx *sql.Tx, snap lease.Snapshot) error {
	snap.Workloads = nil
	b, err := json.Marshal(snap)
	if err != nil {
		return fmt.Errorf("save machine: %w", err)
	}
	return setMeta(ctx, tx, metaMachine, string(b))
}

// loadSnapshot reads the persisted machine; ok is false on a fresh database.
func loadSnapshot(ctx context.Context, db *sql.DB) (lease.Snapshot, bool, error) {
	var snap lease.Snapshot
	var meta string
	err := db.QueryRowContext(ctx, `SELECT value FROM agent_meta WHERE key = ?`, metaMachine).Scan(&meta)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return snap, false, nil
	case err != nil:
		return snap, false, fmt.Errorf("load machine: %w", err)
	}
	if err := json.Unmarshal([]byte(meta), &snap); err != nil {
		return snap, false, fmt.Errorf("load machine: %w", err)
	}
	ws, err := LoadWorkloads(ctx, db)
	if err != nil {
		return snap, false, err
	}
	snap.Workloads = ws
	return snap, true, nil
}

// LoadWorkloads reads every persisted workload snapshot (used by the agent
// at start and by `provider-agent status` when the agent is down).
func LoadWorkloads(ctx context.Context, db *sql.DB) ([]lease.WorkloadSnapshot, error) {
	rows, err := db.QueryContext(ctx, `SELECT snapshot FROM agent_workloads ORDER BY rowid`)
	if err != nil {
		return nil, fmt.Errorf("load workloads: %w", err)
	}
	defer rows.Close()
	var out []lease.WorkloadSnapshot
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("load workloads: %w", err)
		}
		var w lease.WorkloadSnapshot
		if err := json.Unmarshal([]byte(s), &w); err != nil {
			return nil, fmt.Errorf("load workloads: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load workloads: %w", err)
	}
	return out, nil
}

func loadCursor(ctx context.Context, db *sql.DB) (int64, error) {
	var v int64
	err := db.QueryRowContext(ctx, `SELECT CAST(value AS INTEGER) FROM agent_meta WHERE key = ?`, metaCursor).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("load cursor: %w", err)
	}
	return v, nil
}

// Command is one operator request queued in the database for the agent
// (`provider-agent workloads grant|release`). A running agent applies
// pending commands within a second; a stopped one applies them at start.
type Command struct {
	Seq       int64
	Action    string // "grant" or "release"
	Workload  string
	Spec      *lease.Spec // grant only
	CreatedAt time.Time
	AppliedAt time.Time
	Result    string
}

// QueueGrant queues a local operator lease grant for the agent.
func QueueGrant(ctx context.Context, db *sql.DB, spec lease.Spec, now time.Time) (int64, error) {
	if err := spec.Validate(); err != nil {
		return 0, fmt.Errorf("queue grant: %w", err)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return 0, fmt.Errorf("queue grant: %w", err)
	}
	res, err := db.ExecContext(ctx, `INSERT INTO agent_commands (action, workload, spec, created_at) VALUES ('grant', ?, ?, ?)`,
		spec.ID, string(b), now.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("queue grant: %w", err)
	}
	return res.LastInsertId()
}

// QueueRelease queues the release (stop and forget) of a workload.
func QueueRelease(ctx context.Context, db *sql.DB, workload string, now time.Time) (int64, error) {
	res, err := db.ExecContext(ctx, `INSERT INTO agent_commands (action, workload, created_at) VALUES ('release', ?, ?)`,
		workload, now.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("queue release: %w", err)
	}
	return res.LastInsertId()
}

// ListCommands returns queued commands, newest last (pendingOnly: those not
// applied yet).
func ListCommands(ctx context.Context, db *sql.DB, pendingOnly bool) ([]Command, error) {
	q := `SELECT seq, action, workload, spec, created_at, COALESCE(applied_at, 0), result FROM agent_commands`
	if pendingOnly {
		q += ` WHERE applied_at IS NULL`
	}
	q += ` ORDER BY seq`
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list commands: %w", err)
	}
	defer rows.Close()
	var out []Command
	for rows.Next() {
		var c Command
		var spec string
		var created, applied int64
		if err := rows.Scan(&c.Seq, &c.Action, &c.Workload, &spec, &created, &applied, &c.Result); err != nil {
			return nil, fmt.Errorf("list commands: %w", err)
		}
		c.CreatedAt = time.UnixMilli(created).UTC()
		if applied != 0 {
			c.AppliedAt = time.UnixMilli(applied).UTC()
		}
		if spec != "" {
			var s lease.Spec
			if err := json.Unmarshal([]byte(spec), &s); err != nil {
				return nil, fmt.Errorf("list commands: command %d: %w", c.Seq, err)
			}
			c.Spec = &s
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

func markCommand(ctx context.Context, tx *sql.Tx, seq int64, now time.Time, result string) error {
	_, err := tx.ExecContext(ctx, `UPDATE agent_commands SET applied_at = ?, result = ? WHERE seq = ?`, now.UnixMilli(), result, seq)
	if err != nil {
		return fmt.Errorf("mark command %d: %w", seq, err)
	}
	return nil
}
