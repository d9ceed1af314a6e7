// Package driver is the one synchronous driver of a lease.Machine: the
// agent runs it behind its goroutines, and the simulator in props/ runs it
// in every simulated provider, so a property proven on the simulator holds
// for the code the agent runs, ordering, held steps and restore included.
//
// It follows the etcd-io/raft RawNode pattern. A caller begins a step at a
// time it supplies (Begin), feeds it inputs (heartbeats, claims,
// revocations, grants, process exits, claim-step feedback, relay syncs,
// ticks) and commits it (Step.Commit). Committing performs the step the way
// lease/doc.go prescribes, with the agent's one departure:
//
//  1. the stops and the reports (lease.BeforeCommit) are performed at once,
//     before any database access, so that fencing never waits for it;
//  2. the workloads the step concerns (their current snapshots), the
//     outbox rows of its outbox effects and the created_at of its claim
//     events are committed in one transaction (Store.Commit), in batches of
//     Config.CommitBatch workloads for a big step (the rest waits in a
//     backlog, DrainBacklog);
//  3. only then are the effects that need their state persisted performed
//     (lease.AfterCommit), and the cursor tokens of the step's inputs
//     finished (Deps.Finished).
//
// A step whose commit fails is held: the next commit that succeeds writes
// it too, and the effects it still asks for are then re-derived from the
// machine's state (lease.Machine.AfterHeld) rather than replayed. Retries of
// held steps wait only Config.ProbeWait for the database, at most once per
// Config.RetryEvery, so that no database that stays unavailable keeps the
// caller from its inputs and ticks.
//
// The driver reads no clock, starts no goroutine and does I/O only through
// the small interfaces its caller gives it: Store (the database), Outbox
// (building the events the outbox sends), Performer (starting and stopping
// processes, publishing claims, logging) and Events (what an operator is
// told). The seam is typed: a Driver[P, X] hands its Store outbox rows
// carrying a P (the agent's signed Nostr event as JSON, the simulator's
// event) and a step's own rows of type X (the agent's operator commands,
// marked applied in the step's transaction). Open restores it from the
// Store: every workload row the database holds comes back, with the
// machine's metadata when it was saved, with empty relay tables when it
// was not.
//
// Shell (shell.go, fence.go) is the machine goroutine's shell around the
// Driver, as etcd's raft has node.go over rawnode.go: a turn (a step fed in
// the one way every input is fed, relay-stream marks included), the
// periodic save every SaveEvery, the release of process operations in order
// per workload, and the fence gate that holds every outbox row until the
// restored machine's stops were performed and a revocation until its
// workload is fenced here (rule 7). The agent's machine loop and the
// simulator's node both create one, so the properties check the gate the
// agent's outbox asks.
package driver
