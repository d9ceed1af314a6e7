// Package backend runs workloads for the agent. Backend is the interface the
// daemon drives (start, stop, running, exit notifications, close); Process is
// the production implementation: it runs a lease's command under a
// supervisor (the agent's own binary re-executed, see RunShimIfRequested,
// which every main and TestMain that starts a Process must call first) that
// kills the command's whole process tree when the agent dies, logs its
// output to one file per workload, and stops it with SIGTERM and then
// SIGKILL after a grace period. The kernel holds each tree together
// (Containment, chosen by ContainMode): the supervisor is the init of the
// workload's PID namespace, and each workload has a cgroup, so no process
// of a workload outlives its supervisor, whatever it does to its
// environment or session. KillLeftovers kills what a killed agent's
// supervisors could not.
//
// Each workload is isolated from the agent and from the other workloads
// (Isolation, chosen by IsolationMode): it runs as a uid of its own, with
// a clean environment and a private directory holding its checkpoint
// directory (PROVIDER_AGENT_CHECKPOINT_DIR). Podman, the container
// backend, runs the OCI image a lease names (internal/imagespec) with
// podman, inside the PID namespace of such a supervisor, so that a
// container dies with the agent as a process tree does;
// KillPodmanLeftovers removes what a killed agent left.
//
// Exits caused by Stop or Close are reported with Stopped set, so the lease
// machine does not count them as crashes.
package backend
