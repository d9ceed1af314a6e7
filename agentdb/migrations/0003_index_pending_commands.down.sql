DROP INDEX agent_commands_pending;
