-- Per-tile count of rejected upload attempts. Only Store.IncrementUploadAttempts
-- changes it (UPDATE ... RETURNING); the retry decorator gives a tile up when
-- it reaches the per-tile budget.
ALTER TABLE tiles ADD COLUMN upload_attempts INTEGER NOT NULL DEFAULT 0;
