DROP TRIGGER IF EXISTS tile_audit_no_delete;
DROP TRIGGER IF EXISTS tile_audit_no_update;
DROP TABLE IF EXISTS tile_audit;
DROP INDEX IF EXISTS tiles_status_workload;
DROP TABLE IF EXISTS tiles;
