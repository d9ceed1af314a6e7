// Package relay keeps the agent connected to its Nostr relays. A Pool runs
// one supervisor per relay URL that connects, subscribes with the caller's
// filters (since taken from the caller's persisted cursor on every
// (re)subscription), reconnects with jittered exponential backoff,
// resubscribes after a transient CLOSED, answers NIP-42 AUTH and honours
// NIP-11 limits. Received events come out on one channel, in arrival order
// per relay, tagged with the relay and the local receive time; Publish counts
// a relay as accepting only when its OK true arrived, and Query reads stored
// events from every relay until EOSE. It owns its websockets (coder/websocket
// with go-nostr envelopes) instead of go-nostr's Relay, whose lifecycle races.
package relay
