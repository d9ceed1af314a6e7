// Package agent is the provider-agent daemon: it wires the relay connections,
// the verifying ingest of heartbeat/, the pure lease machine, SQLite
// persistence, the process backend, the courier outbox and the checkpoint
// uploader, and serves /metrics, /healthz and /status. It is the only package
// with long-lived goroutines; build one with New and drive it with Run, which
// returns after a clean shutdown when its context ends.
//
// # Driving the lease machine
//
// The machine loop (loop.go) runs the one driver of lease/doc.go, package
// driver, through its driver.Shell, the same the simulator in props/ runs.
// One goroutine owns the machine; ingest goroutines verify relay events and
// hand them over as inputs. Each turn (a batch of inputs, a tick, a batch
// of the backlog or of operator commands) is one step, persisted and
// performed by the driver, which departs from the driver protocol in one
// way, so that fencing never waits on the database: the stops and the
// reporting effects are performed first, before any database access; the
// workloads the step concerns, its outbox rows and its claims' created_at
// are committed in one transaction that waits at most Config.CommitWait;
// only then do starts, respawns and the claim step run. A step whose
// commit fails is held and written by the next commit that succeeds (see
// package driver). The agent does not exit while the database refuses
// writes: it keeps fencing and reports the failure (/healthz,
// agent_step_errors_total, the log).
//
// What the agent adds around the Shell is its world: the Store over the
// SQLite file (dbstore.go), the Outbox that signs events (perform.go), the
// Performer, the actuator that runs the process operations the Shell
// releases against the backend (actuator.go), and the Nostr forwarder whose
// fence gate is the Shell's (forwarder.go).
//
// # Who owns what
//
// The Agent type says which goroutine may touch each field: its first
// fields are set by New and only read after it; onMachine (Agent.m) is the
// machine goroutine's alone, unlocked; state any goroutine reads sits in a
// guarded[T], reachable only under its lock through with, or in atomics,
// channels, and collaborators that lock behind their own methods. The
// durable-workload cluster (restores, checkpoint publishing, moves'
// bookkeeping) is its own type, durables, which reaches the agent only
// through durableEnv; the machine goroutine hands it the workload it reads.
//
// The subscription cursor (docs/protocol.md, "Relay connections") reserves
// an event's point before the event is verified and accepts it only once it
// passed every check, so a rejected event never moves the cursor; since is
// clamped to the clock when used and saved, and healed at start.
package agent
