// Package localrelay runs a Nostr relay on 127.0.0.1, built on khatru with a
// mutex-guarded in-memory store, for the demo, the dev-relay subcommand and
// tests. Options switch on faults (rejected writes, held OKs, slow answers
// to stored queries, CLOSED subscriptions, stale, replayed, future-dated and forged events, NIP-42 auth)
// so that the agent's relay layer can be exercised against a misbehaving relay;
// Options.Strfry puts a front end before it that behaves as strfry with its
// default limits and exact messages (strfry itself is not packaged here).
// Every client connection writes through its own bounded queue (outbound.go),
// so a client that stops reading is dropped and never holds up another, which
// khatru alone does not guarantee.
// Create one with New, call Start, and Shutdown when done. khatru races on its
// own listener slice, so tests built with -race run it as a child process
// (see localrelayd and internal/relaytest) rather than in-process.
package localrelay
