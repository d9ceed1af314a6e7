package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"provideragent/agent"
	"provideragent/internal/sqlitedb"
)

func init() {
	register(command{
		name:    "backup",
		summary: "write a consistent copy of the agent's database, also while it runs",
		run:     runBackup,
	})
}

const backupUsage = `Usage: provider-agent backup --out FILE [--config F | --data-dir D | --db PATH]

Writes a consistent copy of the agent's database (<data_dir>/provider-agent.db:
workloads, relay cursors, the outbox, tiles) to FILE, mode 0600, with
SQLite's VACUUM INTO: one read transaction, so the running agent goes on
committing its steps meanwhile, and the copy is the database as of one
commit, without its -wal file. Copying the file with cp while the agent
runs is not safe (the last commits are in the -wal file). It refuses to
overwrite FILE, and checks the copy (PRAGMA integrity_check).

The identity key file (agent.key_file, <data_dir>/identity.key) is not in
the database: back it up once, it never changes. What to back up, how to
restore and what a restored old database does: "Backup and restore" in
docs/operations.md.

` + agentFilesHelp + `

Example:
  sudo provider-agent backup --config /etc/provider-agent/provider-agent.toml \
      --out /var/backups/provider-agent-$(date +%F).db
  sqlite3 /var/lib/provider-agent/data/provider-agent.db ".backup '/var/backups/pa.db'"   # the same, with sqlite3`

func runBackup(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("backup", backupUsage, stdout)
	files := bindAgentFiles(fs, nil)
	out := fs.String("out", "", "the copy's `file` (must not exist)")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	if *out == "" {
		return usagef("backup: --out FILE is required")
	}
	db, path, err := openAgentDB(ctx, files, false)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer db.Close()
	// VACUUM INTO takes an empty file: made here, private, never over an
	// existing one.
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, sqlitedb.FileMode)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("backup: %s exists: refusing to overwrite it", *out)
	}
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	f.Close()
	if _, err := db.ExecContext(ctx, "VACUUM INTO ?", *out); err != nil {
		_ = os.Remove(*out)
		return fmt.Errorf("backup: VACUUM INTO %s: %w", *out, err)
	}
	cp, err := sqlitedb.Open(ctx, *out, sqlitedb.Options{})
	if err != nil {
		return fmt.Errorf("backup: the copy %s: %w", *out, err)
	}
	defer cp.Close()
	var check string
	if err := cp.QueryRowContext(ctx, "PRAGMA integrity_check").Scan(&check); err != nil || check != "ok" {
		return fmt.Errorf("backup: the copy %s fails its integrity check: %q %v", *out, check, err)
	}
	ws, err := agent.LoadWorkloads(ctx, cp)
	if err != nil {
		return fmt.Errorf("backup: the copy %s: %w", *out, err)
	}
	st, err := os.Stat(*out)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s (mode 0600, %d bytes): a consistent copy of %s with %d workloads; integrity ok\n",
		*out, st.Size(), path, len(ws))
	return nil
}
