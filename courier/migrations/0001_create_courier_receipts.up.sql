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

-- Serves Flush's claim (state = 'pending' by next_attempt_at), Prune and
-- the DLQ (by state).
CREATE INDEX courier_receipts_due ON courier_receipts (state, next_attempt_at, id);
