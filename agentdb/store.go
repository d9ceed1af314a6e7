package agentdb

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"provideragent/internal/sqlitedb"
)

// Component is the name under which the store's migrations are recorded in
// schema_migrations.
const Component = "agent_store"

//go:embed migrations/*.sql
var migrationFS embed.FS

// Errors; classify with errors.Is.
var (
	// ErrNotFound means no row has the given key.
	ErrNotFound = errors.New("not found")
	// ErrBadRow means a row to be saved is malformed (empty id, invalid
	// JSON, negative cursor).
	ErrBadRow = errors.New("bad row")
)

// Store is the daemon's persisted state in the shared SQLite file. Its
// methods that take a *sql.Tx write inside the caller's transaction, so a
// machine step, its cursor and the courier's outbox rows commit together;
// a nil tx makes the write commit on its own. The database has a single
// connection: inside WithTx use only the tx, never the Store's own readers,
// or the call waits for the connection forever.
type Store struct {
	db  *sql.DB
	now func() time.Time
}

// Open applies the store's migrations to db and returns the store.
func Open(ctx context.Context, db *sql.DB) (*Store, error) {
	if err := sqlitedb.MigrateEmbedded(ctx, db, Component, migrationFS, "migrations"); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return &Store{db: db, now: time.Now}, nil
}

// DB returns the underlying database.
func (s *Store) DB() *sql.DB { return s.db }

// WithTx runs fn in one transaction, committing if fn returns nil.
func (s *Store) WithTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return sqlitedb.InTx(ctx, s.db, fn)
}

// WorkloadRow is one workload's persisted state. Spec and Snapshot are the
// lease package's JSON (lease.Spec and lease.WorkloadSnapshot); the store
// does not interpret them beyond checking they are valid JSON.
type WorkloadRow struct {
	ID        string
	State     string // lease state as text, e.g. "live"
	Epoch     uint64
	Spec      json.RawMessage
	Snapshot  json.RawMessage
	UpdatedAt time.Time // set by the store on save
}

// Step is everything one machine step persists. Saved as a unit by SaveStep.
type Step struct {
	// Workloads are upserted.
	Workloads []WorkloadRow
	// Deleted workloads are removed (after the upserts).
	Deleted []string
	// Cursors raise the per-relay subscription cursors (never lower them).
	Cursors map[string]int64
	// KV entries are upserted; a nil value deletes the key.
	KV map[string][]byte
}

// SaveStep writes step inside tx (nil: its own transaction).
func (s *Store) SaveStep(ctx context.Context, tx *sql.Tx, step Step) error {
	return s.inTx(ctx, tx, func(tx *sql.Tx) error {
		if err := s.saveWorkloads(ctx, tx, step.Workloads); err != nil {
			return err
		}
		for _, id := range step.Deleted {
			if _, err := tx.ExecContext(ctx, `DELETE FROM agent_workload_state WHERE id = ?`, id); err != nil {
				return fmt.Errorf("delete workload %s: %w", id, err)
			}
		}
		relays := make([]string, 0, len(step.Cursors))
		for r := range step.Cursors {
			relays = append(relays, r)
		}
		sort.Strings(relays)
		for _, r := range relays {
			if _, err := s.saveCursor(ctx, tx, r, step.Cursors[r]); err != nil {
				return err
			}
		}
		keys := make([]string, 0, len(step.KV))
		for k := range step.KV {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := s.setKV(ctx, tx, k, step.KV[k]); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *Store) saveWorkloads(ctx context.Context, tx *sql.Tx, rows []WorkloadRow) error {
	if len(rows) == 0 {
		return nil
	}
	for _, r := range rows {
		if err := r.check(); err != nil {
			return err
		}
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO agent_workload_state (id, state, epoch, spec, snapshot, updated_at)
		VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET state = excluded.state, epoch = excluded.epoch,
			spec = excluded.spec, snapshot = excluded.snapshot, updated_at = excluded.updated_at`)
	if err != nil {
		return fmt.Errorf("save workloads: %w", err)
	}
	defer stmt.Close()
	now := s.now().UnixMilli()
	for _, r := range rows {
		if _, err := stmt.ExecContext(ctx, r.ID, r.State, int64(r.Epoch), string(r.Spec), string(r.Snapshot), now); err != nil {
			return fmt.Errorf("save workload %s: %w", r.ID, err)
		}
	}
	return nil
}

func (r WorkloadRow) check() error {
	switch {
	case r.ID == "":
		return fmt.Errorf("save workload: empty id: %w", ErrBadRow)
	case r.Epoch > 1<<63-1:
		return fmt.Errorf("save workload %s: epoch %d out of range: %w", r.ID, r.Epoch, ErrBadRow)
	case !json.Valid(r.Spec):
		return fmt.Errorf("save workload %s: spec is not valid JSON: %w", r.ID, ErrBadRow)
	case !json.Valid(r.Snapshot):
		return fmt.Errorf("save workload %s: snapshot is not valid JSON: %w", r.ID, ErrBadRow)
	}
	return nil
}

// DeleteWorkload removes a workload inside tx (nil: its own transaction).
// Deleting a missing workload is not an error.
func (s *Store) DeleteWorkload(ctx context.Context, tx *sql.Tx, id string) error {
	return s.SaveStep(ctx, tx, Step{Deleted: []string{id}})
}

const workloadCols = `id, state, epoch, spec, snapshot, updated_at`

func scanWorkload(sc interface{ Scan(...any) error }) (WorkloadRow, error) {
	var r WorkloadRow
	var epoch, updated int64
	var spec, snap string
	if err := sc.Scan(&r.ID, &r.State, &epoch, &spec, &snap, &updated); err != nil {
		return WorkloadRow{}, err
	}
	r.Epoch = uint64(epoch)
	r.Spec, r.Snapshot = json.RawMessage(spec), json.RawMessage(snap)
	r.UpdatedAt = time.UnixMilli(updated)
	return r, nil
}

// LoadAll returns every workload row ordered by id.
func (s *Store) LoadAll(ctx context.Context) ([]WorkloadRow, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+workloadCols+` FROM agent_workload_state ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("load workloads: %w", err)
	}
	defer rows.Close()
	var out []WorkloadRow
	for rows.Next() {
		r, err := scanWorkload(rows)
		if err != nil {
			return nil, fmt.Errorf("load workloads: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load workloads: %w", err)
	}
	return out, nil
}

// Workload returns one workload row, or ErrNotFound.
func (s *Store) Workload(ctx context.Context, id string) (WorkloadRow, error) {
	r, err := scanWorkload(s.db.QueryRowContext(ctx, `SELECT `+workloadCols+` FROM agent_workload_state WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return WorkloadRow{}, fmt.Errorf("workload %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return WorkloadRow{}, fmt.Errorf("workload %s: %w", id, err)
	}
	return r, nil
}

// SaveCursor raises relay's cursor to since inside tx (nil: its own
// transaction) and returns the stored value, which never goes backwards:
// a lower since leaves the cursor where it is. relay should be the
// normalised URL.
func (s *Store) SaveCursor(ctx context.Context, tx *sql.Tx, relay string, since int64) (int64, error) {
	var got int64
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		var err error
		got, err = s.saveCursor(ctx, tx, relay, since)
		return err
	})
	return got, err
}

func (s *Store) saveCursor(ctx context.Context, tx *sql.Tx, relay string, since int64) (int64, error) {
	if relay == "" {
		return 0, fmt.Errorf("save cursor: empty relay: %w", ErrBadRow)
	}
	if since < 0 {
		return 0, fmt.Errorf("save cursor %s: since %d < 0: %w", relay, since, ErrBadRow)
	}
	var got int64
	err := tx.QueryRowContext(ctx, `INSERT INTO agent_relay_cursors (relay, since, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (relay) DO UPDATE SET since = MAX(since, excluded.since), updated_at = excluded.updated_at
		RETURNING since`, relay, since, s.now().UnixMilli()).Scan(&got)
	if err != nil {
		return 0, fmt.Errorf("save cursor %s: %w", relay, err)
	}
	return got, nil
}

// ClampCursor lowers relay's persisted cursor to limit when it lies above
// it, inside tx (nil: its own transaction), and returns the stored value.
// It is the one write that may lower a cursor: it heals one that an event
// dated in the future pushed ahead of the clock (the agent clamps to now at
// start), which would otherwise hide every event until then.
func (s *Store) ClampCursor(ctx context.Context, tx *sql.Tx, relay string, limit int64) (int64, error) {
	if relay == "" {
		return 0, fmt.Errorf("clamp cursor: empty relay: %w", ErrBadRow)
	}
	if limit < 0 {
		return 0, fmt.Errorf("clamp cursor %s: limit %d < 0: %w", relay, limit, ErrBadRow)
	}
	var got int64
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE agent_relay_cursors SET since = ?, updated_at = ? WHERE relay = ? AND since > ?`,
			limit, s.now().UnixMilli(), relay, limit); err != nil {
			return fmt.Errorf("clamp cursor %s: %w", relay, err)
		}
		err := tx.QueryRowContext(ctx, `SELECT since FROM agent_relay_cursors WHERE relay = ?`, relay).Scan(&got)
		if errors.Is(err, sql.ErrNoRows) {
			got = 0
			return nil
		}
		if err != nil {
			return fmt.Errorf("clamp cursor %s: %w", relay, err)
		}
		return nil
	})
	return got, err
}

// Cursor returns relay's persisted cursor, 0 when none was saved.
func (s *Store) Cursor(ctx context.Context, relay string) (int64, error) {
	var since int64
	err := s.db.QueryRowContext(ctx, `SELECT since FROM agent_relay_cursors WHERE relay = ?`, relay).Scan(&since)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("cursor %s: %w", relay, err)
	}
	return since, nil
}

// Cursors returns every persisted cursor by relay.
func (s *Store) Cursors(ctx context.Context) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT relay, since FROM agent_relay_cursors`)
	if err != nil {
		return nil, fmt.Errorf("cursors: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var r string
		var since int64
		if err := rows.Scan(&r, &since); err != nil {
			return nil, fmt.Errorf("cursors: %w", err)
		}
		out[r] = since
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cursors: %w", err)
	}
	return out, nil
}

// SetKV upserts key inside tx (nil: its own transaction); a nil value
// deletes it.
func (s *Store) SetKV(ctx context.Context, tx *sql.Tx, key string, value []byte) error {
	return s.inTx(ctx, tx, func(tx *sql.Tx) error { return s.setKV(ctx, tx, key, value) })
}

func (s *Store) setKV(ctx context.Context, tx *sql.Tx, key string, value []byte) error {
	if key == "" {
		return fmt.Errorf("set kv: empty key: %w", ErrBadRow)
	}
	var err error
	if value == nil {
		_, err = tx.ExecContext(ctx, `DELETE FROM agent_kv WHERE key = ?`, key)
	} else {
		_, err = tx.ExecContext(ctx, `INSERT INTO agent_kv (key, value, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
			key, value, s.now().UnixMilli())
	}
	if err != nil {
		return fmt.Errorf("set kv %s: %w", key, err)
	}
	return nil
}

// KV returns the value of key, or ErrNotFound.
func (s *Store) KV(ctx context.Context, key string) ([]byte, error) {
	var v []byte
	err := s.db.QueryRowContext(ctx, `SELECT value FROM agent_kv WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("kv %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("kv %s: %w", key, err)
	}
	return v, nil
}

// inTx runs fn in tx, or in a new transaction when tx is nil.
func (s *Store) inTx(ctx context.Context, tx *sql.Tx, fn func(tx *sql.Tx) error) error {
	if tx != nil {
		return fn(tx)
	}
	return sqlitedb.InTx(ctx, s.db, fn)
}
