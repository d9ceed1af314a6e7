//go:build !unix

package agent

import "time"

// cpuTimeSupported reports whether processCPU works here.
func cpuTimeSupported() bool { return false }

// processCPU is not wired up on this platform.
func processCPU() time.Duration { return 0 }
