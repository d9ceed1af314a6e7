// Package agent is the provider-agent daemon: it wires the relay connections,
// the verifying ingest of heartbeat/, the pure lease machine, SQLite
// persistence, the process backend, the courier outbox and the checkpoint
// uploader, and serves /metrics, /healthz and /status. It is the only package
// with long-lived goroutines; build one with New and drive it with Run, which
// returns after a clean shutdown when its context ends.
package agent
