-- One row per receipt with its delivery state; the bundle lives in
-- courier_bundles so that state updates never rewrite it. Times are unix
-- milliseconds; id is the random 64-bit receipt id stored as a signed integer.
CREATE TABLE courier_receipts (
	id              INTEGER PRIMARY KEY,
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
	receipt_id INTEGER PRIMARY KEY REFERENCES courier_receipts (id) ON DELETE CASCADE,
	bundle     BLOB    NOT NULL
);

CREATE UNIQUE INDEX courier_receipts_idempotency_key
	ON courier_receipts (idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Partial indexes, one per state: a state change moves a receipt from one
-- small index to another, Flush claims from the pending one, the DLQ lists
-- from the dead one and Prune deletes from the acknowledged one. Queries
-- must spell the state as a literal for SQLite to use them.
CREATE INDEX courier_receipts_due ON courier_receipts (next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX courier_receipts_dead ON courier_receipts (id) WHERE state = 'dead';
CREATE INDEX courier_receipts_acked ON courier_receipts (acknowledged_at) WHERE state = 'acknowledged';
