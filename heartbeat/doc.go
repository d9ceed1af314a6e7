// Package heartbeat is the provider-agent wire protocol: the Nostr event kinds
// (heartbeats 38384/20384/38389, revocations 38385, promotion claims 38386,
// checkpoint records 38387 and lease grants 38388, with their checkpoint
// policy), their builders, decoders and the ingest pipeline that verifies
// each event once however many relays deliver it. It is compatible with
// Paygress v1 and knows nothing of sockets or SQL: the agent hands it events
// and gets typed, signer-checked values (and lease machine inputs) back.
package heartbeat
