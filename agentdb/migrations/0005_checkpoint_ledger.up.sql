-- The last checkpoint each durable workload's epoch published (or
-- restored) here: what its revocation names (state_uri) and where its next
-- record continues (seq, parent), across agent restarts. One row per
-- workload: only its newest epoch here matters.
CREATE TABLE checkpoint_ledger (
	workload   TEXT    PRIMARY KEY,
	epoch      INTEGER NOT NULL,
	seq        INTEGER NOT NULL,
	event_id   TEXT    NOT NULL DEFAULT '',
	state_uri  TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL
);
