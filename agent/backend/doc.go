// Package backend runs workloads for the agent. Backend is the interface the
// daemon drives (start, stop, running, exit notifications, close); Process is
// the production implementation that runs a lease's command as a child
// process in its own process group, logs its output to one file per
// workload, and stops it with SIGTERM and then SIGKILL after a grace period.
//
// Exits caused by Stop or Close are reported with Stopped set, so the lease
// machine does not count them as crashes. The package backendtest holds an
// in-memory Fake for the daemon's tests.
package backend
