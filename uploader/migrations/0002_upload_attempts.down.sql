ALTER TABLE tiles DROP COLUMN upload_attempts;
