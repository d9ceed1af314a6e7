// Package agent is the provider-agent daemon: it wires the relay connections,
// the verifying ingest of heartbeat/, the pure lease machine, SQLite
// persistence, the process backend, the courier outbox and the checkpoint
// uploader, and serves /metrics, /healthz and /status. It is the only package
// with long-lived goroutines; build one with New and drive it with Run, which
// returns after a clean shutdown when its context ends.
//
// # Driving the lease machine
//
// The machine loop is the driver of lease/doc.go. One goroutine owns the
// machine; ingest goroutines verify relay events and hand them over as
// inputs. Each step (a batch of inputs, or a tick) is persisted and
// performed by commitStep, which departs from the driver protocol in one
// way, so that fencing never waits on the database:
//
//   - StopWorkload and the reporting effects (EnteredState, Failed,
//     QuorumReport) are performed first, before any database access.
//     Stopping is always safe: a crash before the commit restores the older
//     state, and workloads die with the agent.
//   - The workloads the step concerns, the outbox rows of its revocations
//     and its claims' created_at are committed in one transaction that
//     waits at most Config.CommitWait for the database; a step concerning
//     more than commitBatch workloads is committed one batch of whole
//     workloads per loop turn (backlog.go).
//   - Then StartWorkload, AttemptRespawn, the claim step (PublishClaim,
//     WithdrawClaim, ReadClaims) and the revocations' accounting run, in
//     order, and the cursor tokens of the step's inputs are finished. A
//     start that the same step stops afterwards is dropped.
//   - A step whose commit fails is held (unpersisted) and written by the
//     next commit that succeeds (retried every second, and with every later
//     step). Its held starts and claim-step requests are then re-derived
//     from the machine's state at that moment (running holders are started,
//     Outstanding's requests re-issued), never replayed blindly; its
//     revocations are queued; its inputs' cursor tokens finish only then,
//     and saveMeta saves nothing while steps are held. The agent does not
//     exit while the database refuses writes: it keeps fencing and reports
//     the failure (/healthz, agent_step_errors_total, the log).
//
// The subscription cursor (docs/protocol.md, "Relay connections") reserves
// an event's point before the event is verified and accepts it only once it
// passed every check, so a rejected event never moves the cursor; since is
// clamped to the clock when used and saved, and healed at start.
package agent
