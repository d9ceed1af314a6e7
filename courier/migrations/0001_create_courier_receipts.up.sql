-- One row per receipt with its delivery state; the bundle lives in
-- courier_bundles so that state updates never rewrite it. Times are unix
-- milliseconds; id is the random 64-bit receipt id stored as a signed
-- integer. Rows are keyed by seq, in insertion order, so that a group commit
-- appends to the tables instead of touching one random page per receipt.
CREATE TABLE courier_receipts (
	seq             INTEGER PRIMARY KEY,
	id              INTEGER NOT NULL UNIQUE,
	bundle_hash     TEXT    NOT NULL,
	sender          TEXT    NOT NULL,
	idempotency_key TEXT,
	created_at      INTEGER NOT NULL,
	state           TEXT    NOT NULL CHECK (state IN ('pending', 'acknowledged', 'dead')),
	attempts        INTEGER NOT NULL DEFAULT 0,
	next_attempt_at INTEGER NOT NULL,
	last_error      TEXT    NOT NULL DEFAULT '',
	failed_at       INTEGER,
	acknowledged_at INTEGER,
	size            INTEGER NOT NULL
);

CREATE TABLE courier_bundles (
	seq    INTEGER PRIMARY KEY REFERENCES courier_receipts (seq) ON DELETE CASCADE,
	bundle BLOB    NOT NULL
);

CREATE UNIQUE INDEX courier_receipts_idempotency_key
	ON courier_receipts (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Partial indexes, one per state: a state change moves a receipt from one
-- small index to another, Flush claims from the pending one, the DLQ lists
-- from the dead one and Prune deletes from the acknowledged one. Queries
-- must spell the state as a literal for SQLite to use them.
CREATE INDEX courier_receipts_due ON courier_receipts (next_attempt_at) WHERE state = 'pending';
CREATE INDEX courier_receipts_dead ON courier_receipts (id) WHERE state = 'dead';
CREATE INDEX courier_receipts_acked ON courier_receipts (acknowledged_at) WHERE state = 'acknowledged';
