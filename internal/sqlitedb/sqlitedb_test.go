package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

func TestOpenSetsPragmas(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "a.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for pragma, want := range map[string]string{
		"journal_mode": "wal", "foreign_keys": "1", "synchronous": "2", "busy_timeout": "5000",
	} {
		var got string
		if err := db.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %s, want %s", pragma, got, want)
		}
	}
}

func TestOpenRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	if _, err := Open(ctx, "", Options{}); err == nil {
		t.Error("Open(\"\") = nil error, want error")
	}
	if _, err := Open(ctx, filepath.Join(t.TempDir(), "a.db"), Options{Synchronous: "OFF"}); err == nil || !strings.Contains(err.Error(), "OFF") {
		t.Errorf("Open(synchronous=OFF) = %v, want error naming OFF", err)
	}
	if _, err := Open(ctx, filepath.Join(t.TempDir(), "missing", "dir", "a.db"), Options{}); err == nil {
		t.Error("Open(missing dir) = nil error, want error")
	}
}

func TestMigrateUpDown(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "m.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	migs, err := LoadMigrations(os.DirFS("testdata"), "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if len(migs) != 2 || migs[0].Name != "create_things" || migs[1].Version != 2 {
		t.Fatalf("LoadMigrations = %+v, want 2 ordered migrations", migs)
	}
	if err := Migrate(ctx, db, "test", migs, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO things (name) VALUES ('a'), ('b')`); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, db, "test", migs, 0); err != nil {
		t.Fatal(err)
	}
	var sum int
	if err := db.QueryRowContext(ctx, `SELECT SUM(size) FROM things`).Scan(&sum); err != nil || sum != 0 {
		t.Fatalf("SUM(size) = %d, %v, want 0, nil", sum, err)
	}
	if v, _ := Version(ctx, db, "test"); v != 2 {
		t.Fatalf("Version = %d, want 2", v)
	}
	// Applying again is a no-op.
	if err := Migrate(ctx, db, "test", migs, 0); err != nil {
		t.Fatal(err)
	}
	if err := MigrateDown(ctx, db, "test", migs, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `SELECT size FROM things`); err == nil {
		t.Fatal("column size still exists after rollback to 1")
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM things`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows after rollback = %d, %v, want 2", n, err)
	}
	if err := MigrateDown(ctx, db, "test", migs, 0); err != nil {
		t.Fatal(err)
	}
	if v, _ := Version(ctx, db, "test"); v != 0 {
		t.Fatalf("Version after full rollback = %d, want 0", v)
	}
}

func TestLoadMigrationsRejectsBadNames(t *testing.T) {
	cases := map[string]fstest.MapFS{
		"bad suffix": {"m/0001_a.sql": {Data: []byte("x")}},
		"no number":  {"m/abc_a.up.sql": {Data: []byte("x")}},
		"gap":        {"m/0001_a.up.sql": {Data: []byte("x")}, "m/0003_c.up.sql": {Data: []byte("x")}},
		"down only":  {"m/0001_a.down.sql": {Data: []byte("x")}},
		"two names":  {"m/0001_a.up.sql": {Data: []byte("x")}, "m/0001_b.down.sql": {Data: []byte("x")}},
	}
	for name, fsys := range cases {
		if _, err := LoadMigrations(fsys, "m"); err == nil {
			t.Errorf("LoadMigrations(%s) = nil error, want error", name)
		}
	}
}

func TestMigrateRefusesNewerDatabase(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "n.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	migs, _ := LoadMigrations(os.DirFS("testdata"), "migrations")
	if err := Migrate(ctx, db, "test", migs, 0); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, db, "test", migs[:1], 0); err == nil {
		t.Fatal("Migrate with fewer known migrations than applied = nil error, want error")
	}
}

func TestMigrateEmbeddedAppliesAll(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "e.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := MigrateEmbedded(ctx, db, "test", os.DirFS("testdata"), "migrations"); err != nil {
		t.Fatal(err)
	}
	if v, _ := Version(ctx, db, "test"); v != 2 {
		t.Fatalf("Version after MigrateEmbedded = %d, want 2", v)
	}
	if err := MigrateEmbedded(ctx, db, "test", os.DirFS("testdata"), "missing"); err == nil {
		t.Fatal("MigrateEmbedded(missing dir) = nil error, want error")
	}
}

// TestOpenCreatesPrivateFiles: a database Open creates, and the -wal and
// -shm files SQLite creates beside it, are readable by their owner only
// (not 0644).
func TestOpenCreatesPrivateFiles(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "p.db")
	db, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (x); INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("stat %s: %v", p, err)
		}
		if got := fi.Mode().Perm(); got != FileMode {
			t.Errorf("mode of %s = %v, want %v", filepath.Base(p), got, FileMode)
		}
	}
}

// TestOpenReportsCorruption: a corrupted page in a table that nothing reads
// at start (SELECTs on the other table still work) stops Open with an error
// that wraps ErrCorrupt and names the file.
func TestOpenReportsCorruption(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.db")
	db, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE small (x); INSERT INTO small VALUES ('fine');
		CREATE TABLE big (x);
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
		INSERT INTO big SELECT printf('%0200d', i) FROM n`); err != nil {
		t.Fatal(err)
	}
	var root, pageSize int64
	if err := db.QueryRowContext(ctx, `SELECT rootpage FROM sqlite_schema WHERE name = 'big'`).Scan(&root); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	// Closing the only connection checkpoints the WAL into the file.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The first byte of a b-tree page is its type (2, 5, 10 or 13).
	if _, err := f.WriteAt([]byte{0x7f}, (root-1)*pageSize); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	// Without the check the damage goes unnoticed: the file opens and the
	// table read at start is fine.
	raw, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	var x string
	if err := raw.QueryRowContext(ctx, `SELECT x FROM small`).Scan(&x); err != nil || x != "fine" {
		t.Fatalf("SELECT x FROM small = %q, %v, want fine, nil", x, err)
	}
	raw.Close()

	db, err = Open(ctx, path, Options{})
	if err == nil {
		db.Close()
		t.Fatalf("Open(corrupted file) = nil error, want ErrCorrupt")
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open(corrupted file) = %v, want an error wrapping ErrCorrupt naming %s", err, path)
	}
	t.Logf("Open(corrupted file) = %v", err)
}

// TestInTxWaitIsBounded: with another process's connection holding the
// write lock, or another goroutine holding the pool's only connection,
// InTxWait fails after its own short wait although the database's
// busy_timeout is ten minutes; the busy_timeout is restored, and once the
// lock is released the transaction commits.
func TestInTxWaitIsBounded(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "w.db")
	db, err := Open(ctx, path, Options{BusyTimeoutMillis: 600000})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (x)`); err != nil {
		t.Fatal(err)
	}
	insert := func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO t VALUES (1)`)
		return err
	}
	// run calls InTxWait and fails the test if it does not return within
	// a deadline far below the busy_timeout.
	run := func() error {
		done := make(chan error, 1)
		go func() { done <- InTxWait(ctx, db, 100*time.Millisecond, insert) }()
		select {
		case err := <-done:
			return err
		case <-time.After(60 * time.Second):
			t.Fatalf("InTxWait(100ms) did not return within 60 s (busy_timeout 600 s)")
			return nil
		}
	}

	other, err := Open(ctx, path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	lock, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if err := run(); err == nil {
		t.Fatalf("InTxWait with the write lock held elsewhere = nil, want an error")
	}
	var bt int
	if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&bt); err != nil || bt != 600000 {
		t.Fatalf("busy_timeout after InTxWait = %d, %v, want 600000 restored", bt, err)
	}
	if _, err := lock.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}

	held, err := db.Conn(ctx) // the pool's only connection
	if err != nil {
		t.Fatal(err)
	}
	if err := run(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("InTxWait with the connection held = %v, want context.DeadlineExceeded", err)
	}
	held.Close()

	if err := run(); err != nil {
		t.Fatalf("InTxWait once the database is free = %v, want nil", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM t`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows = %d, %v, want 1", n, err)
	}
}
