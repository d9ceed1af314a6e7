package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/mattn/go-sqlite3"

	"provideragent/config"
	"provideragent/internal/sqlitedb"
)

// envDB names the database file when neither --db nor --config/--data-dir
// is on the command line (documented in the tiles and courier help).
const envDB = "PROVIDER_AGENT_DB"

// agentFilesHelp is the paragraph every tiles and courier help text carries.
const agentFilesHelp = `The database is the running agent's: <data_dir>/provider-agent.db, with
data_dir from --data-dir, else --config (or $PROVIDER_AGENT_CONFIG) and
$PROVIDER_AGENT_AGENT_DATA_DIR, exactly as 'provider-agent run' resolves it.
--db FILE overrides that, and so does $PROVIDER_AGENT_DB unless --config or
--data-dir is given.`

// agentFiles binds the agent's config flags (--config, --data-dir,
// --key-file, ...) and --db on a flag set, and resolves the agent's database
// and key file the way 'run' does, so that operator commands work on the
// files the running agent uses. A child (a subcommand's flag set) falls back
// to its parent's flags for everything not given on its own.
type agentFiles struct {
	parent *agentFiles
	fs     *flag.FlagSet
	flags  *config.Flags
	db     string

	// loaded caches config's result: the flags are fixed once parsed, and
	// a command asks for the config from several places.
	loaded *loadedConfig
}

type loadedConfig struct {
	cfg config.Config
	err error
}

// bindAgentFiles registers the flags on fs; parent may be nil.
func bindAgentFiles(fs *flag.FlagSet, parent *agentFiles) *agentFiles {
	a := &agentFiles{parent: parent, fs: fs, flags: config.BindFlags(fs)}
	fs.StringVar(&a.db, "db", "", "SQLite database `file` (default $"+envDB+", else <data_dir>/"+config.DBFileName+")")
	return a
}

// set reports whether flag name was given on this flag set or a parent's,
// and the value of the nearest.
func (a *agentFiles) set(name string) (string, bool) {
	for cur := a; cur != nil; cur = cur.parent {
		if f := cur.fs.Lookup(name); f != nil {
			given := false
			cur.fs.Visit(func(v *flag.Flag) { given = given || v.Name == name })
			if given {
				return f.Value.String(), true
			}
		}
	}
	return "", false
}

// config resolves the agent's config without validating the relay set:
// defaults, the config file, PROVIDER_AGENT_* and then the flags (parent's
// first, so the subcommand's win). It is loaded once, after the flags
// are parsed.
func (a *agentFiles) config() (config.Config, error) {
	if a.loaded == nil {
		var chain []*config.Flags
		for cur := a; cur != nil; cur = cur.parent {
			chain = append([]*config.Flags{cur.flags}, chain...)
		}
		cfg, err := loadConfigLoose(chain...)
		a.loaded = &loadedConfig{cfg: cfg, err: err}
	}
	return a.loaded.cfg, a.loaded.err
}

// leaseGiven reports whether the lease's relays or quorum were chosen on
// the command line or in the environment: a config file (--config,
// $PROVIDER_AGENT_CONFIG), --relay or --quorum, $PROVIDER_AGENT_LEASE_RELAYS
// or $PROVIDER_AGENT_LEASE_QUORUM.
func (a *agentFiles) leaseGiven() bool {
	for _, f := range []string{"config", "relay", "quorum"} {
		if _, ok := a.set(f); ok {
			return true
		}
	}
	for _, e := range []string{"PROVIDER_AGENT_CONFIG", "PROVIDER_AGENT_LEASE_RELAYS", "PROVIDER_AGENT_LEASE_QUORUM"} {
		if os.Getenv(e) != "" {
			return true
		}
	}
	return false
}

// dbPath is the database file: --db, else the config's DBPath when --config
// or --data-dir is on the command line, else $PROVIDER_AGENT_DB, else the
// config's DBPath (config file, environment, defaults).
func (a *agentFiles) dbPath() (string, error) {
	if p, ok := a.set("db"); ok {
		if p == "" {
			return "", usagef("--db: empty path")
		}
		return p, nil
	}
	_, cfgGiven := a.set("config")
	_, dirGiven := a.set("data-dir")
	if p := os.Getenv(envDB); p != "" && !cfgGiven && !dirGiven {
		return p, nil
	}
	cfg, err := a.config()
	if err != nil {
		return "", err
	}
	return cfg.DBPath(), nil
}

// openDB opens the database at dbPath with sqlitedb's settings. With create
// it makes the file's directory (0700, its missing parents 0755, as run
// does) and the file when missing; without,
// a missing file is an error naming the path and how to pick another.
func (a *agentFiles) openDB(ctx context.Context, create bool) (*sql.DB, string, error) {
	path, err := a.dbPath()
	if err != nil {
		return nil, "", err
	}
	if create {
		if err := config.MakeDataDir(filepath.Dir(path)); err != nil {
			return nil, path, fmt.Errorf("create database directory: %w", err)
		}
	} else if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, path, fmt.Errorf("open database %s: no such file (pass --data-dir, --config or --db)", path)
	}
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
	if err != nil {
		return nil, path, diagnoseDB(path, err)
	}
	return db, path, nil
}

// openDBWith opens the database (openDB) and applies one component's
// migrations with migrate (the agent's tables, the courier, the tile
// store); when that fails the database is closed and the error names the
// cause an operator can act on (diagnoseDB).
func (a *agentFiles) openDBWith(ctx context.Context, create bool, migrate func(context.Context, *sql.DB) error) (*sql.DB, string, error) {
	db, path, err := a.openDB(ctx, create)
	if err != nil {
		return nil, path, err
	}
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, path, diagnoseDB(path, err)
	}
	return db, path, nil
}

// diagnoseDB adds the cause an operator can act on to SQLite's words for a
// database it cannot write ("attempt to write a readonly database",
// "unable to open database file"): the data dir, where SQLite creates the
// -wal and -shm files beside the database, or the file itself is not
// writable. Other errors are returned as they are.
func diagnoseDB(path string, err error) error {
	var se sqlite3.Error
	if !errors.As(err, &se) || (se.Code != sqlite3.ErrReadonly && se.Code != sqlite3.ErrCantOpen && se.Code != sqlite3.ErrPerm) {
		return err
	}
	dir := filepath.Dir(path)
	if werr := checkWritable(dir); werr != nil {
		return fmt.Errorf("data dir %s is not writable (%v): SQLite creates %s-wal and -shm there: %w",
			dir, pathErrCause(werr), filepath.Base(path), err)
	}
	if f, ferr := os.OpenFile(path, os.O_RDWR, 0); ferr != nil {
		return fmt.Errorf("database %s is not writable (%v): %w", path, pathErrCause(ferr), err)
	} else {
		f.Close()
	}
	return err
}

// checkWritable creates and removes a file in dir: the honest test of
// whether this process may create files there (permissions, ACLs, a
// read-only mount, an immutable directory all answer it).
func checkWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".provider-agent-write-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// pathErrCause is the operating system's reason in a *fs.PathError
// ("permission denied", "read-only file system"), else err's text.
func pathErrCause(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// keyFile is the agent's identity key file as 'run' resolves it: --key-file,
// agent.key_file, else <data_dir>/identity.key.
func (a *agentFiles) keyFile() (string, error) {
	cfg, err := a.config()
	if err != nil {
		return "", err
	}
	return cfg.KeyFilePath(), nil
}
