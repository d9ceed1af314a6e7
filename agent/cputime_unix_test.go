//go:build unix

package agent

import (
	"syscall"
	"time"
)

// cpuTimeSupported reports whether processCPU works here.
func cpuTimeSupported() bool { return true }

// processCPU is the user and system CPU time this process used so far
// (getrusage RUSAGE_SELF: child processes such as the test relays are not
// counted).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
