DROP TABLE agent_kv;
DROP TABLE agent_relay_cursors;
DROP TABLE agent_workload_state;
