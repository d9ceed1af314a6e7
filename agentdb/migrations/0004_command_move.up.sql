-- More operator commands: move (provider-agent workloads move), a planned
-- handover of a durable workload to a standby, spec holding the chosen
-- successor's hex key ('' for the first standby alive); drain and undrain
-- (provider-agent drain [--undo]), node-wide (workload ''). SQLite cannot
-- alter a CHECK: the table is rebuilt with its rows and its index.
CREATE TABLE agent_commands_new (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	action     TEXT    NOT NULL CHECK (action IN ('grant', 'release', 'move', 'drain', 'undrain')),
	workload   TEXT    NOT NULL,
	spec       TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	applied_at INTEGER,
	result     TEXT    NOT NULL DEFAULT ''
);
INSERT INTO agent_commands_new (seq, action, workload, spec, created_at, applied_at, result)
	SELECT seq, action, workload, spec, created_at, applied_at, result FROM agent_commands;
DROP TABLE agent_commands;
ALTER TABLE agent_commands_new RENAME TO agent_commands;
CREATE INDEX agent_commands_pending ON agent_commands (seq) WHERE applied_at IS NULL;
