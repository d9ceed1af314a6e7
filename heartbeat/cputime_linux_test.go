//go:build linux

package heartbeat

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU returns the CPU time consumed by the calling OS thread. Callers
// pin themselves with runtime.LockOSThread. Benchmarks use it so that load
// from other processes on a shared machine does not skew the comparison.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return time.Duration(time.Now().UnixNano())
	}
	return time.Duration(ts.Nano())
}
