package uploader

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"provideragent/internal/sqlitedb"
)

// Component is the name under which the uploader's migrations are recorded.
const Component = "uploader"

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrations returns the uploader's embedded schema migrations in order.
func migrations() ([]sqlitedb.Migration, error) {
	return sqlitedb.LoadMigrations(migrationFS, "migrations")
}

// Status is the persisted state of a tile; the values read as English in
// SQLite.
type Status string

const (
	// StatusPending: the tile still has to reach the Blossom servers.
	StatusPending Status = "pending"
	// StatusUploaded: enough servers acknowledged the tile.
	StatusUploaded Status = "uploaded"
	// StatusUploadGiveup: the tile used up its per-tile attempt budget; a
	// human decides what happens next (tiles reset).
	StatusUploadGiveup Status = "upload_giveup"
	// StatusTrusted: a consumer verified the tile (its vote; this agent
	// never sets it).
	StatusTrusted Status = "trusted"
	// StatusRejected: a consumer rejected the tile (its vote; this agent
	// never sets it).
	StatusRejected Status = "rejected"
)

// Statuses lists every Status value.
var Statuses = []Status{StatusPending, StatusUploaded, StatusUploadGiveup, StatusTrusted, StatusRejected}

// Valid reports whether s is one of Statuses.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// Store errors.
var (
	// ErrNotFound means no tile has the given id.
	ErrNotFound = errors.New("tile not found")
	// ErrBadStatus means a status string is not one of Statuses.
	ErrBadStatus = errors.New("bad tile status")
	// ErrNotGivenUp means an operator reset targeted a tile that is not in
	// upload_giveup.
	ErrNotGivenUp = errors.New("tile is not in upload_giveup")
)

// Tile is one stored tile without its content (see Store.Content).
type Tile struct {
	ID                  int64
	Workload            string
	SHA256              string // lowercase hex of the content
	Size                int64
	Status              Status
	UploadAttempts      int
	LastRejectionReason string
	CreatedAt           time.Time
	UpdatedAt           time.Time
}

// AuditRecord is one row of the append-only tile_audit table.
type AuditRecord struct {
	ID     int64
	At     time.Time
	Kind   string // AuditGiveup or AuditReset
	TileID int64
	Detail string // JSON object
}

// Audit kinds.
const (
	// AuditGiveup records that a tile was moved to upload_giveup; detail is
	// {"tile_id","attempts","last_rejection_reason"}.
	AuditGiveup = "upload.giveup"
	// AuditReset records an operator moving a given-up tile back to pending.
	AuditReset = "operator.reset"
)

// Store keeps tiles in the agent's SQLite database. It is safe for concurrent
// use; all statements go through the database's single connection.
type Store struct {
	db    *sql.DB
	clock Clock
}

// NewStore migrates db to the latest uploader schema and returns a Store. A
// nil clock means the system clock (used only for timestamps).
func NewStore(ctx context.Context, db *sql.DB, clock Clock) (*Store, error) {
	if err := sqlitedb.MigrateEmbedded(ctx, db, Component, migrationFS, "migrations"); err != nil {
		return nil, fmt.Errorf("open tile store: %w", err)
	}
	if clock == nil {
		clock = SystemClock{}
	}
	return &Store{db: db, clock: clock}, nil
}

func (s *Store) nowMillis() int64 { return s.clock.Now().UnixMilli() }

const tileColumns = `tile_id, workload, sha256, size, status, upload_attempts, last_rejection_reason, created_at, updated_at`

type rowScanner interface{ Scan(dest ...any) error }

func scanTile(r rowScanner) (Tile, error) {
	var t Tile
	var st string
	var created, updated int64
	if err := r.Scan(&t.ID, &t.Workload, &t.SHA256, &t.Size, &st, &t.UploadAttempts, &t.LastRejectionReason, &created, &updated); err != nil {
		return Tile{}, err
	}
	t.Status = Status(st)
	t.CreatedAt = time.UnixMilli(created).UTC()
	t.UpdatedAt = time.UnixMilli(updated).UTC()
	return t, nil
}

func (s *Store) queryTiles(ctx context.Context, query string, args ...any) ([]Tile, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Tile
	for rows.Next() {
		t, err := scanTile(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// PendingUploads returns the pending tiles of workload ("" = every workload)
// in id order, at most limit of them (limit <= 0 = all). Tiles in any other
// status, upload_giveup included, are never returned.
func (s *Store) PendingUploads(ctx context.Context, workload string, limit int) ([]Tile, error) {
	q := `SELECT ` + tileColumns + ` FROM tiles WHERE status = 'pending'`
	var args []any
	if workload != "" {
		q += ` AND workload = ?`
		args = append(args, workload)
	}
	q += ` ORDER BY tile_id`
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	ts, err := s.queryTiles(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("pending uploads: %w", err)
	}
	return ts, nil
}

// CountPending returns how many tiles of workload ("" = all) are pending.
func (s *Store) CountPending(ctx context.Context, workload string) (int, error) {
	q := `SELECT COUNT(*) FROM tiles WHERE status = 'pending'`
	var args []any
	if workload != "" {
		q += ` AND workload = ?`
		args = append(args, workload)
	}
	var n int
	if err := s.db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count pending: %w", err)
	}
	return n, nil
}

// Filter selects tiles for List; zero fields match everything.
type Filter struct {
	Workload string
	Status   Status
}

// List returns the tiles matching f in id order.
func (s *Store) List(ctx context.Context, f Filter) ([]Tile, error) {
	q := `SELECT ` + tileColumns + ` FROM tiles`
	var conds []string
	var args []any
	if f.Workload != "" {
		conds = append(conds, `workload = ?`)
		args = append(args, f.Workload)
	}
	if f.Status != "" {
		if !f.Status.Valid() {
			return nil, fmt.Errorf("list tiles: status %q: %w", f.Status, ErrBadStatus)
		}
		conds = append(conds, `status = ?`)
		args = append(args, string(f.Status))
	}
	if len(conds) > 0 {
		q += ` WHERE ` + strings.Join(conds, ` AND `)
	}
	q += ` ORDER BY tile_id`
	ts, err := s.queryTiles(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list tiles: %w", err)
	}
	return ts, nil
}

// Get returns one tile, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id int64) (Tile, error) {
	t, err := scanTile(s.db.QueryRowContext(ctx, `SELECT `+tileColumns+` FROM tiles WHERE tile_id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Tile{}, fmt.Errorf("get tile %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Tile{}, fmt.Errorf("get tile %d: %w", id, err)
	}
	return t, nil
}

// Content returns the bytes of a tile, or ErrNotFound.
func (s *Store) Content(ctx context.Context, id int64) ([]byte, error) {
	var b []byte
	err := s.db.QueryRowContext(ctx, `SELECT content FROM tiles WHERE tile_id = ?`, id).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("tile %d content: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("tile %d content: %w", id, err)
	}
	return b, nil
}

func (s *Store) exec1(ctx context.Context, what string, id int64, query string, args ...any) error {
	res, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("%s tile %d: %w", what, id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s tile %d: %w", what, id, err)
	}
	if n == 0 {
		return fmt.Errorf("%s tile %d: %w", what, id, ErrNotFound)
	}
	return nil
}

// MarkUploaded records that a tile reached the servers: status uploaded and
// the last rejection reason cleared.
func (s *Store) MarkUploaded(ctx context.Context, id int64) error {
	return s.exec1(ctx, "mark uploaded", id,
		`UPDATE tiles SET status = 'uploaded', last_rejection_reason = '', updated_at = ? WHERE tile_id = ?`,
		s.nowMillis(), id)
}

// UpdateStatus sets a tile's status (one of the Status constants).
func (s *Store) UpdateStatus(ctx context.Context, id int64, st Status) error {
	if !st.Valid() {
		return fmt.Errorf("update status of tile %d: %q: %w", id, st, ErrBadStatus)
	}
	return s.exec1(ctx, "update status of", id,
		`UPDATE tiles SET status = ?, updated_at = ? WHERE tile_id = ?`, string(st), s.nowMillis(), id)
}

// RecordRejection stores the reason the last upload of a tile was rejected.
// It does not touch the attempt counter.
func (s *Store) RecordRejection(ctx context.Context, id int64, reason string) error {
	return s.exec1(ctx, "record rejection of", id,
		`UPDATE tiles SET last_rejection_reason = ?, updated_at = ? WHERE tile_id = ?`, reason, s.nowMillis(), id)
}

// IncrementUploadAttempts adds one to a tile's upload_attempts in a single
// UPDATE ... RETURNING and returns the new count. It is the only code that
// changes the counter.
func (s *Store) IncrementUploadAttempts(ctx context.Context, id int64) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx,
		`UPDATE tiles SET upload_attempts = upload_attempts + 1 WHERE tile_id = ? RETURNING upload_attempts`, id).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("increment upload attempts of tile %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("increment upload attempts of tile %d: %w", id, err)
	}
	return n, nil
}

// GiveUp moves a pending tile to upload_giveup and appends one AuditGiveup
// record, in one transaction. It returns false (and writes nothing) when the
// tile is not pending, so a tile is given up, and audited, once.
func (s *Store) GiveUp(ctx context.Context, id int64, attempts int, reason string) (bool, error) {
	detail, err := json.Marshal(struct {
		TileID              int64  `json:"tile_id"`
		Attempts            int    `json:"attempts"`
		LastRejectionReason string `json:"last_rejection_reason"`
	}{id, attempts, reason})
	if err != nil {
		return false, fmt.Errorf("give up tile %d: %w", id, err)
	}
	now := s.nowMillis()
	done := false
	err = sqlitedb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			`UPDATE tiles SET status = 'upload_giveup', last_rejection_reason = ?, updated_at = ? WHERE tile_id = ? AND status = 'pending'`,
			reason, now, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err
		}
		done = true
		_, err = tx.ExecContext(ctx, `INSERT INTO tile_audit (at, kind, tile_id, detail) VALUES (?, ?, ?, ?)`,
			now, AuditGiveup, id, string(detail))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("give up tile %d: %w", id, err)
	}
	return done, nil
}

// Reset is the operator's way back from upload_giveup: the tile becomes
// pending again and an AuditReset record with note is appended. The attempt
// counter is left alone (only IncrementUploadAttempts changes it), so a reset
// tile gets one more upload; a further rejection gives it up again.
func (s *Store) Reset(ctx context.Context, id int64, note string) error {
	now := s.nowMillis()
	err := sqlitedb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		var st string
		var attempts int
		err := tx.QueryRowContext(ctx, `SELECT status, upload_attempts FROM tiles WHERE tile_id = ?`, id).Scan(&st, &attempts)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		if Status(st) != StatusUploadGiveup {
			return fmt.Errorf("status is %s: %w", st, ErrNotGivenUp)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE tiles SET status = 'pending', updated_at = ? WHERE tile_id = ?`, now, id); err != nil {
			return err
		}
		detail, err := json.Marshal(struct {
			TileID   int64  `json:"tile_id"`
			Attempts int    `json:"attempts"`
			Note     string `json:"note"`
		}{id, attempts, note})
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO tile_audit (at, kind, tile_id, detail) VALUES (?, ?, ?, ?)`,
			now, AuditReset, id, string(detail))
		return err
	})
	if err != nil {
		return fmt.Errorf("reset tile %d: %w", id, err)
	}
	return nil
}

// Audit returns the audit records of tile id (0 = all tiles), oldest first.
func (s *Store) Audit(ctx context.Context, id int64) ([]AuditRecord, error) {
	q := `SELECT audit_id, at, kind, tile_id, detail FROM tile_audit`
	var args []any
	if id != 0 {
		q += ` WHERE tile_id = ?`
		args = append(args, id)
	}
	q += ` ORDER BY audit_id`
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	defer rows.Close()
	var out []AuditRecord
	for rows.Next() {
		var a AuditRecord
		var at int64
		if err := rows.Scan(&a.ID, &at, &a.Kind, &a.TileID, &a.Detail); err != nil {
			return nil, fmt.Errorf("read audit: %w", err)
		}
		a.At = time.UnixMilli(at).UTC()
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	return out, nil
}
