//go:build !linux

package heartbeat

import "time"

// threadCPU falls back to wall time where thread CPU clocks are not wired up.
func threadCPU() time.Duration { return time.Duration(time.Now().UnixNano()) }
