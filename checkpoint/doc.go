// Package checkpoint carries a durable workload's state across a failover:
// it reads the checkpoint a workload wrote (Open: the exact file name and
// the checks a root agent needs before it reads a file a workload
// controls), notices new ones (Watcher), publishes them (Publisher: tiles
// on K Blossom servers, then a signed kind 38387 record on M relays, only
// while this provider holds the workload at that epoch) and restores the
// newest usable one into a new run's directory before it starts
// (Restorer: the lease's selection rules, every hash verified, the file
// placed atomically for the workload's user). A grant's checkpoints are
// sealed with its checkpoint Key (XChaCha20-Poly1305; NewGrantKey makes
// one and seals it to the lease's members with NIP-44, OpenGrantKey opens
// a member's), so the servers hold nothing readable. Pacer paces a
// workload's publishes (one a second, the newest file wins). It never
// imports the agent: relays, the verifying ingest and Blossom are
// interfaces.
//
// The workload's side of the contract: its checkpoint directory is
// $PROVIDER_AGENT_CHECKPOINT_DIR (private to the workload and its epoch);
// the checkpoint is the regular file FileName ("checkpoint") in it. To
// checkpoint, write the whole state to another name in the same directory,
// fsync it, and rename it onto FileName; never write into FileName in
// place. At start the file holds the restored checkpoint, if any.
package checkpoint
