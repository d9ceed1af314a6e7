// Package sqlitedb opens the agent's single SQLite file and applies the
// embedded, numbered migrations that each package owns.
//
// Open sets WAL, synchronous=FULL, busy_timeout and foreign keys, checks that
// journal_mode really is wal, and limits the pool to one connection so there is
// exactly one writer. Migrate applies a component's `NNNN_name.up.sql` files in
// order and records them in schema_migrations; MigrateDown rolls back with the
// matching `.down.sql` files. Migrations are append-only: a released file is
// never edited.
package sqlitedb
