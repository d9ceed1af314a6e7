-- The last checkpoint each durable workload's epoch published (or
-- restored) here: what its revocation names (state_uri) and where its next
-- record continues (seq, parent), across agent restarts. One row per
-- workload: only its newest epoch here matters, of the grant (grant_at,
-- unix seconds) it belongs to: a re-grant starts its epochs again.
CREATE TABLE checkpoint_ledger (
	workload   TEXT    PRIMARY KEY,
	grant_at   INTEGER NOT NULL,
	epoch      INTEGER NOT NULL,
	seq        INTEGER NOT NULL,
	event_id   TEXT    NOT NULL DEFAULT '',
	state_uri  TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL
);
