package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"

	"github.com/mattn/go-sqlite3" // also registers the "sqlite3" driver
)

// ErrNotWAL is returned by Open when SQLite refused to switch the file to
// write-ahead logging (for example on a filesystem without shared memory).
var ErrNotWAL = errors.New("sqlite journal_mode is not wal")

// ErrCorrupt is returned by Open when the file fails SQLite's integrity
// check (PRAGMA quick_check) or is not a database at all.
var ErrCorrupt = errors.New("sqlite database is corrupt")

// FileMode is the mode of a database file Open creates. SQLite gives the
// -wal and -shm files it creates beside it the database file's mode, so they
// are private too.
const FileMode fs.FileMode = 0o600

// quickCheckRows bounds how many problems of PRAGMA quick_check an error quotes.
const quickCheckRows = 10

// Options tunes Open. The zero value is the production setting.
type Options struct {
	// BusyTimeoutMillis is how long a statement waits for a lock before
	// failing with SQLITE_BUSY. Default 5000.
	BusyTimeoutMillis int
	// Synchronous is the synchronous pragma: "FULL" (default, an fsync per
	// commit: a returned commit survives power loss) or "NORMAL".
	Synchronous string
}

// Open opens (creating if needed, mode 0600) the SQLite database at path with
// WAL, synchronous=FULL, busy_timeout and foreign keys on, and a single
// connection so that all writes are serialised through one writer. It runs
// PRAGMA quick_check before returning, so a corrupted page anywhere in the
// file (also in a table nothing reads at start) stops the caller with an
// error that names the file and wraps ErrCorrupt.
func Open(ctx context.Context, path string, opts Options) (*sql.DB, error) {
	if path == "" {
		return nil, errors.New("open sqlite: empty path")
	}
	if err := createPrivate(path); err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
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
		return nil, fmt.Errorf("open sqlite %s: read journal_mode: %w", path, corruptErr(err))
	}
	if !strings.EqualFold(mode, "wal") {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: journal_mode=%s: %w", path, mode, ErrNotWAL)
	}
	if err := quickCheck(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	return db, nil
}

// createPrivate creates an empty file at path with FileMode when none
// exists (an empty file is an empty SQLite database), so that SQLite never
// creates it with its default 0644. An existing file keeps its mode.
func createPrivate(path string) error {
	if path == ":memory:" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, FileMode)
	switch {
	case errors.Is(err, fs.ErrExist):
		return nil
	case err != nil:
		return fmt.Errorf("create database file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("create database file: %w", err)
	}
	return nil
}

// quickCheck runs PRAGMA quick_check (every page and b-tree of the file,
// without the index cross-checks of integrity_check) and returns an error
// wrapping ErrCorrupt that quotes SQLite's findings unless it says "ok".
func quickCheck(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, fmt.Sprintf("PRAGMA quick_check(%d)", quickCheckRows))
	if err != nil {
		return fmt.Errorf("quick_check: %w", corruptErr(err))
	}
	defer rows.Close()
	var found []string
	for rows.Next() {
		var msg string
		if err := rows.Scan(&msg); err != nil {
			return fmt.Errorf("quick_check: %w", corruptErr(err))
		}
		// One row may hold several findings, one per line.
		for _, line := range strings.Split(msg, "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "***") {
				found = append(found, line)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("quick_check: %w", corruptErr(err))
	}
	if len(found) == 1 && found[0] == "ok" {
		return nil
	}
	more := ""
	if len(found) > quickCheckRows {
		more = fmt.Sprintf(" (and %d more)", len(found)-quickCheckRows)
		found = found[:quickCheckRows]
	}
	return fmt.Errorf("%w: quick_check found: %s%s", ErrCorrupt, strings.Join(found, "; "), more)
}

// corruptErr wraps SQLite's "malformed" and "not a database" errors with
// ErrCorrupt and returns any other error unchanged.
func corruptErr(err error) error {
	var se sqlite3.Error
	if errors.As(err, &se) && (se.Code == sqlite3.ErrCorrupt || se.Code == sqlite3.ErrNotADB) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}
