// Package checkpoint carries a durable workload's state across a failover:
// it reads the checkpoint a workload wrote (Open: the exact file name and
// the checks a root agent needs before it reads a file a workload
// controls), notices new ones (Watcher), and, with the uploader and the
// relays, publishes them and restores the newest usable one before a new
// epoch starts.
//
// The workload's side of the contract: its checkpoint directory is
// $PROVIDER_AGENT_CHECKPOINT_DIR (private to the workload and its epoch);
// the checkpoint is the regular file FileName ("checkpoint") in it. To
// checkpoint, write the whole state to another name in the same directory,
// fsync it, and rename it onto FileName; never write into FileName in
// place. At start the file holds the restored checkpoint, if any.
package checkpoint
