DROP INDEX courier_receipts_due;
CREATE INDEX courier_receipts_due ON courier_receipts (next_attempt_at) WHERE state = 'pending';
ALTER TABLE courier_receipts DROP COLUMN destination;
