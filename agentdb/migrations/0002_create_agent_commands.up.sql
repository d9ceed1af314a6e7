-- The operator command queue: grants and releases queued by the CLI
-- (provider-agent workloads grant|release) and applied by the running agent.
CREATE TABLE agent_commands (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	action     TEXT    NOT NULL CHECK (action IN ('grant', 'release')),
	workload   TEXT    NOT NULL,
	spec       TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	applied_at INTEGER,
	result     TEXT    NOT NULL DEFAULT ''
);
