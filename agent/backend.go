package agent

import (
	"context"
	"errors"
)

// Backend runs workload processes, as the agent needs them. agent/backend's
// Process is the production implementation (wrap it with AdaptBackend).
type Backend interface {
	// Start runs the workload's command for epoch; starting a workload that
	// already runs is not an error.
	Start(ctx context.Context, id string, epoch uint64, command []string) error
	// Stop stops the workload (SIGTERM, then SIGKILL after the grace period)
	// and returns once it has exited; stopping one that does not run is not
	// an error.
	Stop(ctx context.Context, id string) error
	// Running reports whether the workload's process runs.
	Running(id string) bool
	// Exits delivers one Exit per process that ended on its own (not by Stop).
	Exits() <-chan Exit
}

// Exit reports that a workload process ended without being asked to.
type Exit struct {
	ID     string
	Epoch  uint64
	Reason string
}

// ErrNoCommand is returned by Start when the lease has no command.
var ErrNoCommand = errors.New("workload has no command")
