// Package conformance holds the protocol's conformance vectors for other
// implementations: the context a receiver judges an event in (Context:
// its clock, trusted issuers, lease state and limits), the one judge
// (Judge: the agent's own heartbeat.Ingestor under a signer policy built
// from the context) and the deterministic generator of the vector files
// (testdata/vectors/*.json) and of the example events of the NIP draft
// (docs/nip/XX.md), built with heartbeat's builders, fixed keys and fixed
// times. Regenerate both after a wire change with
//
//	go run ./internal/conformance/gen
//
// The tests check every vector and every NIP example against the code, and
// (node_test.go) that nostr-tools verifies the vectors' signatures and
// builds events from the NIP's text that the agent accepts.
// provider-agent check-event judges events with Judge.
package conformance

//go:generate go run ./gen
