// Package relaytest runs internal/localrelay relays as child processes for
// tests: Start builds the localrelayd binary once per test process without
// -race (khatru races on its own listener slice), runs it on a free
// 127.0.0.1 port with fault flags, and waits until it accepts a websocket.
// Kill, Stop and Restart (same port) make relay outages real; Inject serves
// arbitrary (forged, stale, future-dated) events; Dial gives a raw protocol
// client for asserting on frames; NewStallProxy puts a TCP forwarder
// between clients and a relay that stalls silently on demand. StartKind
// runs any of Kinds the same way: khatru (localrelayd), strfry-emulated
// (localrelayd --strfry) or @nostr-relay/core 0.0.40 (nostr-relay/server.js
// under node, packages pinned by nostr-relay/package-lock.json and
// installed with npm ci; a machine without node fails those tests rather
// than skipping them).
package relaytest
