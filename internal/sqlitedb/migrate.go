package sqlitedb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Migration is one numbered schema step of a component.
type Migration struct {
	Version int    // parsed from the NNNN prefix
	Name    string // the part after the prefix, without suffix
	Up      string // SQL of NNNN_name.up.sql
	Down    string // SQL of NNNN_name.down.sql (may be empty)
}

// LoadMigrations reads `NNNN_name.up.sql` and `NNNN_name.down.sql` files from
// dir in fsys (usually an embed.FS) and returns them ordered by version. It
// rejects gaps, duplicates and files that do not follow the naming scheme.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("load migrations %s: %w", dir, err)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		name := e.Name()
		var dirn string
		switch {
		case strings.HasSuffix(name, ".up.sql"):
			dirn = "up"
		case strings.HasSuffix(name, ".down.sql"):
			dirn = "down"
		default:
			return nil, fmt.Errorf("load migrations %s: %q: want NNNN_name.up.sql or .down.sql", dir, name)
		}
		base := strings.TrimSuffix(strings.TrimSuffix(name, ".sql"), "."+dirn)
		num, rest, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 || rest == "" {
			return nil, fmt.Errorf("load migrations %s: %q: want NNNN_name prefix", dir, name)
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("load migrations %s: %w", dir, err)
		}
		m := byVersion[v]
		if m == nil {
			m = &Migration{Version: v, Name: rest}
			byVersion[v] = m
		} else if m.Name != rest {
			return nil, fmt.Errorf("load migrations %s: version %d has two names %q and %q", dir, v, m.Name, rest)
		}
		if dirn == "up" {
			m.Up = string(body)
		} else {
			m.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" {
			return nil, fmt.Errorf("load migrations %s: version %d has no .up.sql", dir, m.Version)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("load migrations %s: version %d follows %d: versions must be 1, 2, 3 ...", dir, m.Version, i)
		}
	}
	return out, nil
}

const createMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	component  TEXT    NOT NULL,
	version    INTEGER NOT NULL,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL DEFAULT (unixepoch()),
	PRIMARY KEY (component, version)
)`

// Version returns the highest applied migration version of component (0 when
// none is applied).
func Version(ctx context.Context, db *sql.DB, component string) (int, error) {
	if _, err := db.ExecContext(ctx, createMigrationsTable); err != nil {
		return 0, fmt.Errorf("migrations table: %w", err)
	}
	var v int
	err := db.QueryRowContext(ctx,
		`SELECT COALESCE(MAX(version), 0) FROM schema_migrations WHERE component = ?`, component).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("migration version of %s: %w", component, err)
	}
	return v, nil
}

// Migrate applies every migration of component above the applied version, up
// to and including target (target <= 0 means all). Each step runs in its own
// transaction together with its schema_migrations row.
func Migrate(ctx context.Context, db *sql.DB, component string, migs []Migration, target int) error {
	cur, err := Version(ctx, db, component)
	if err != nil {
		return err
	}
	if target <= 0 {
		target = len(migs)
	}
	if target > len(migs) {
		return fmt.Errorf("migrate %s: target version %d above latest %d", component, target, len(migs))
	}
	if cur > len(migs) {
		return fmt.Errorf("migrate %s: database is at version %d, newer than this binary knows (%d)", component, cur, len(migs))
	}
	for _, m := range migs {
		if m.Version <= cur || m.Version > target {
			continue
		}
		err := inTx(ctx, db, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, m.Up); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx,
				`INSERT INTO schema_migrations (component, version, name) VALUES (?, ?, ?)`, component, m.Version, m.Name)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate %s to %04d_%s: %w", component, m.Version, m.Name, err)
		}
	}
	return nil
}

// MigrateEmbedded loads component's migrations from dir in fsys (usually
// the package's embed.FS) and applies all of them: what every package that
// owns tables does when it opens.
func MigrateEmbedded(ctx context.Context, db *sql.DB, component string, fsys fs.FS, dir string) error {
	migs, err := LoadMigrations(fsys, dir)
	if err != nil {
		return err
	}
	return Migrate(ctx, db, component, migs, 0)
}

// MigrateDown rolls component back to target (0 = nothing applied) with the
// .down.sql files, newest first, one transaction per step.
func MigrateDown(ctx context.Context, db *sql.DB, component string, migs []Migration, target int) error {
	cur, err := Version(ctx, db, component)
	if err != nil {
		return err
	}
	if target < 0 {
		return fmt.Errorf("migrate down %s: target version %d below 0", component, target)
	}
	for i := len(migs) - 1; i >= 0; i-- {
		m := migs[i]
		if m.Version > cur || m.Version <= target {
			continue
		}
		if m.Down == "" {
			return fmt.Errorf("migrate down %s from %04d_%s: no .down.sql", component, m.Version, m.Name)
		}
		err := inTx(ctx, db, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, m.Down); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx,
				`DELETE FROM schema_migrations WHERE component = ? AND version = ?`, component, m.Version)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate down %s from %04d_%s: %w", component, m.Version, m.Name, err)
		}
	}
	return nil
}

// InTx runs fn in a transaction, committing when fn returns nil and rolling
// back otherwise.
func InTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	return inTx(ctx, db, fn)
}

// InTxWait is InTx for a caller that must not be stalled by the database:
// it waits at most wait for the pool's connection (another goroutine may
// hold the only one) and, through a busy_timeout lowered for this
// transaction alone, for SQLite's write lock (another process may hold it
// for long). It then fails with the context's deadline error or SQLITE_BUSY
// and the caller retries later. The connection's busy_timeout is restored
// afterwards (the connection is discarded if that fails).
func InTxWait(ctx context.Context, db *sql.DB, wait time.Duration, fn func(tx *sql.Tx) error) error {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, wait)
	conn, err := db.Conn(cctx)
	cancel()
	if err != nil {
		return fmt.Errorf("wait for the database connection: %w", err)
	}
	defer conn.Close()
	var prev int64
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&prev); err != nil {
		return fmt.Errorf("read busy_timeout: %w", err)
	}
	ms := max(1, min(prev, (wait-time.Since(start)).Milliseconds()))
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", ms)); err != nil {
		return fmt.Errorf("set busy_timeout: %w", err)
	}
	defer func() {
		if _, err := conn.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", prev)); err != nil {
			// Never hand a connection with the short timeout back to the
			// pool: discard it (the pool opens a fresh one from the DSN).
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()
	return RunTx(ctx, conn, fn)
}

func inTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	return RunTx(ctx, db, fn)
}

// Beginner starts transactions: a *sql.DB, or one *sql.Conn taken from it.
type Beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// RunTx runs fn in one transaction begun on b, committing when fn returns
// nil and rolling back otherwise.
func RunTx(ctx context.Context, b Beginner, fn func(tx *sql.Tx) error) error {
	tx, err := b.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
