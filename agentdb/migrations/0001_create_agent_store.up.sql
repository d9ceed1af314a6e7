-- The daemon's persisted state (package agent/store, component agent_store).
-- One row per workload: the lease machine's snapshot of it as JSON.
CREATE TABLE agent_workload_state (
	id         TEXT    PRIMARY KEY NOT NULL CHECK (length(id) > 0),
	state      TEXT    NOT NULL,           -- lease.State, e.g. 'live'
	epoch      INTEGER NOT NULL CHECK (epoch >= 0),
	spec       TEXT    NOT NULL,           -- lease.Spec as JSON
	snapshot   TEXT    NOT NULL,           -- lease.WorkloadSnapshot as JSON
	updated_at INTEGER NOT NULL            -- unix milliseconds
) WITHOUT ROWID;

-- Subscription cursor per relay: resume with since = this value. Writes only
-- ever raise it (MAX in the upsert).
CREATE TABLE agent_relay_cursors (
	relay      TEXT    PRIMARY KEY NOT NULL,
	since      INTEGER NOT NULL CHECK (since >= 0), -- unix seconds
	updated_at INTEGER NOT NULL
) WITHOUT ROWID;

-- Small key/value state of the daemon (machine-wide snapshot, flags).
CREATE TABLE agent_kv (
	key        TEXT    PRIMARY KEY NOT NULL,
	value      BLOB    NOT NULL,
	updated_at INTEGER NOT NULL
) WITHOUT ROWID;
