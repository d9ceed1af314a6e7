package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"

	_ "github.com/mattn/go-sqlite3" // registers the "sqlite3" driver
)

// ErrNotWAL is returned by Open when SQLite refused to switch the file to
// write-ahead logging (for example on a filesystem without shared memory).
var ErrNotWAL = errors.New("sqlite journal_mode is not wal")

// Options tunes Open. The zero value is the production setting.
type Options struct {
	// BusyTimeoutMillis is how long a statement waits for a lock before
	// failing with SQLITE_BUSY. Default 5000.
	BusyTimeoutMillis int
	// Synchronous is the synchronous pragma: "FULL" (default, an fsync per
	// commit: a returned commit survives power loss) or "NORMAL".
	Synchronous string
}

// Open opens (creating if needed) the SQLite database at path with WAL,
// synchronous=FULL, busy_timeout and foreign keys on, and a single
// connection so that all writes are serialised through one writer.
func Open(ctx context.Context, path string, opts Options) (*sql.DB, error) {
	if path == "" {
		return nil, errors.New("open sqlite: empty path")
	}
	if opts.BusyTimeoutMillis <= 0 {
		opts.BusyTimeoutMillis = 5000
	}
	switch strings.ToUpper(opts.Synchronous) {
	case "":
		opts.Synchronous = "FULL"
	case "FULL", "NORMAL":
		opts.Synchronous = strings.ToUpper(opts.Synchronous)
	default:
		return nil, fmt.Errorf("open sqlite %s: synchronous %q: want FULL or NORMAL", path, opts.Synchronous)
	}
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(opts.BusyTimeoutMillis))
	q.Set("_foreign_keys", "on")
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", opts.Synchronous)
	q.Set("_txlock", "immediate")
	dsn := "file:" + path + "?" + q.Encode()
	db, err := sql.Open("sqlite3", dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: read journal_mode: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: journal_mode=%s: %w", path, mode, ErrNotWAL)
	}
	return db, nil
}
