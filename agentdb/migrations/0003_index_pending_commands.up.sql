-- The agent reads the pending commands in order (applied_at IS NULL ORDER
-- BY seq) every second and after every batch: without this index each read
-- scanned every command ever applied, which made 100,000 queued grants
-- quadratic.
CREATE INDEX agent_commands_pending ON agent_commands (seq) WHERE applied_at IS NULL;
