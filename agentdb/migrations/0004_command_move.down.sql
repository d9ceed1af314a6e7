CREATE TABLE agent_commands_old (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	action     TEXT    NOT NULL CHECK (action IN ('grant', 'release')),
	workload   TEXT    NOT NULL,
	spec       TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	applied_at INTEGER,
	result     TEXT    NOT NULL DEFAULT ''
);
INSERT INTO agent_commands_old (seq, action, workload, spec, created_at, applied_at, result)
	SELECT seq, action, workload, spec, created_at, applied_at, result FROM agent_commands WHERE action IN ('grant', 'release');
DROP TABLE agent_commands;
ALTER TABLE agent_commands_old RENAME TO agent_commands;
CREATE INDEX agent_commands_pending ON agent_commands (seq) WHERE applied_at IS NULL;
