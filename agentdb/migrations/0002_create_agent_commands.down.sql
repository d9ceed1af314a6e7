DROP TABLE agent_commands;
