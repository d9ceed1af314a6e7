// Package sqlitedb opens the agent's single SQLite file and applies the
// embedded, numbered migrations that each package owns.
//
// Open creates a missing file with mode 0600 (SQLite gives its -wal and -shm
// files the same mode), sets WAL, synchronous=FULL, busy_timeout and foreign
// keys, checks that journal_mode really is wal, runs PRAGMA quick_check (a
// damaged file is refused with ErrCorrupt and its path), and limits the pool
// to one connection so there is exactly one writer. Migrate applies a component's `NNNN_name.up.sql` files in
// order and records them in schema_migrations; MigrateDown rolls back with the
// matching `.down.sql` files. Migrations are append-only: a released file is
// never edited.
package sqlitedb
