-- Every receipt names the kind of forwarder that may deliver it: 'http'
-- (POSTed by an HTTPForwarder) or 'nostr' (a signed Nostr event published
-- to relays). Flush and Replay hand a forwarder only the receipts of its
-- own kind, so a revocation can never be acknowledged by an HTTP sink.
-- Sends always name the destination; the default only fills existing rows
-- before the UPDATE below.
ALTER TABLE courier_receipts ADD COLUMN destination TEXT NOT NULL DEFAULT 'http'
	CHECK (destination IN ('http', 'nostr'));

-- Receipts stored before this migration: the agent's own (sender 'agent')
-- and every bundle that is a signed Nostr event (an object with a string
-- id, pubkey and sig and an integer kind) are Nostr receipts.
UPDATE courier_receipts SET destination = 'nostr'
	WHERE sender = 'agent' OR seq IN (
		SELECT seq FROM courier_bundles
		WHERE CASE WHEN json_valid(CAST(bundle AS TEXT)) THEN
			json_type(CAST(bundle AS TEXT), '$.id') = 'text'
			AND json_type(CAST(bundle AS TEXT), '$.pubkey') = 'text'
			AND json_type(CAST(bundle AS TEXT), '$.sig') = 'text'
			AND json_type(CAST(bundle AS TEXT), '$.kind') = 'integer'
		ELSE 0 END);

-- Flush claims the due receipts of one destination.
DROP INDEX courier_receipts_due;
CREATE INDEX courier_receipts_due ON courier_receipts (destination, next_attempt_at) WHERE state = 'pending';
