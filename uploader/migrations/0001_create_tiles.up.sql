-- Checkpoint tiles waiting to be (or already) uploaded to Blossom servers,
-- and the append-only audit trail of decisions about them.
CREATE TABLE tiles (
	tile_id               INTEGER PRIMARY KEY AUTOINCREMENT,
	workload              TEXT    NOT NULL CHECK (length(workload) > 0),
	sha256                TEXT    NOT NULL CHECK (length(sha256) = 64),
	size                  INTEGER NOT NULL CHECK (size >= 0),
	content               BLOB    NOT NULL,
	status                TEXT    NOT NULL DEFAULT 'pending'
		CHECK (status IN ('pending', 'uploaded', 'upload_giveup', 'trusted', 'rejected')),
	last_rejection_reason TEXT    NOT NULL DEFAULT '',
	created_at            INTEGER NOT NULL, -- unix milliseconds
	updated_at            INTEGER NOT NULL, -- unix milliseconds
	UNIQUE (workload, sha256)
);

CREATE INDEX tiles_status_workload ON tiles (status, workload, tile_id);

CREATE TABLE tile_audit (
	audit_id INTEGER PRIMARY KEY AUTOINCREMENT,
	at       INTEGER NOT NULL, -- unix milliseconds
	kind     TEXT    NOT NULL, -- e.g. 'upload.giveup', 'operator.reset'
	tile_id  INTEGER NOT NULL,
	detail   TEXT    NOT NULL  -- JSON object
);

CREATE INDEX tile_audit_tile ON tile_audit (tile_id, audit_id);

CREATE TRIGGER tile_audit_no_update BEFORE UPDATE ON tile_audit
BEGIN
	SELECT RAISE(ABORT, 'tile_audit is append-only');
END;

CREATE TRIGGER tile_audit_no_delete BEFORE DELETE ON tile_audit
BEGIN
	SELECT RAISE(ABORT, 'tile_audit is append-only');
END;
