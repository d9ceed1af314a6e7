// Package courier is a durable store-and-forward outbox with retry, backoff
// and a dead-letter queue, kept in the agent's SQLite file.
//
// Send (or SendTx inside a caller's transaction) stores a bundle and returns
// its receipt only once it is on disk; concurrent sends share one commit.
// Flush and Run hand due receipts to a Forwarder with bounded concurrency and
// record the outcome: acknowledged, rescheduled with full-jitter backoff or
// Retry-After, or dead-lettered after a client error or MaxAttempts failures.
// Operators list, show, resend, replay, drop and export dead receipts.
//
// Every receipt carries its Destination, the kind of forwarder that may
// deliver it (http or nostr, SendOptions.Destination); a Forwarder declares
// its own, and Flush, Run and Replay give it only receipts of that kind, so
// a Nostr revocation is never acknowledged by an HTTP endpoint. Run logs
// failed deliveries as one summary line per RetryLogInterval.
package courier
