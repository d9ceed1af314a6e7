// Package sim is a deterministic discrete-event simulator of providers
// talking through Nostr relays, used by the props/ property tests. It models N
// relays that store events (addressable replacement, per-minute heartbeat
// buckets), per-link partitions, bounded or unbounded delays, loss,
// duplicates, reordering, relay crash and restart with or without storage,
// provider crash-stop and crash-restart, pauses, and per-provider clocks with
// offset and drift. There are no goroutines and no real time: a single event
// queue ordered by (simulated instant, sequence number) drives everything, and
// every random choice comes from a seed, so a run is a pure function of its
// configuration and the fault schedule applied to it. A provider's protocol
// logic plugs in as a Node (a LeaseNode: the lease machine through the
// agent's own driver, package driver, over a simulated database; or a model
// of the anchor's rule); invariant checkers run after every event.
//
// Durable workloads (a lease with a checkpoint policy): a LeaseNode's copy
// is a counter that checkpoints to a file on the node's disk and, while its
// machine holds the workload Live, publishes checkpoint records (read by
// query, never subscribed to); a new epoch restores as checkpoint.Restorer
// does: the revocation's state_uri first when its author held an earlier
// epoch (with or without the records, which too few relays may answer),
// else the records through lease's SelectCheckpoints, or the checkpoint
// its holder's heartbeats named; Sim.Move is the operator's planned move. Nodes keep a
// CheckpointJournal that CheckpointLineage and MoveLosesNothing read.
package sim
