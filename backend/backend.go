package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors of Start; the daemon classifies with errors.Is.
var (
	// ErrNoCommand means the spec has an empty command.
	ErrNoCommand = errors.New("workload has no command")
	// ErrBadSpec means the spec is malformed (empty or oversized workload
	// ID, bad environment entry).
	ErrBadSpec = errors.New("bad start spec")
	// ErrStopping means Start was called while an earlier Stop of the same
	// workload has not finished yet; retry after that Stop returns.
	ErrStopping = errors.New("workload is still stopping")
	// ErrClosed means the backend was closed.
	ErrClosed = errors.New("backend closed")
)

// Backend runs workloads. Implementations are safe for concurrent use.
type Backend interface {
	// Start starts the workload. Starting a workload that already runs is
	// not an error (effects may be replayed after a restart); the running
	// process is kept. An error means nothing was started and no Exit will
	// follow.
	Start(ctx context.Context, spec StartSpec) error
	// Stop stops the workload and returns once it has exited: SIGTERM to
	// its process group, SIGKILL after the grace period. Stopping a
	// workload that does not run is not an error. If ctx ends first, Stop
	// returns ctx's error and the stop completes in the background. The
	// resulting Exit has Stopped set and carries reason.
	Stop(ctx context.Context, workloadID, reason string) error
	// Running reports whether the workload's process runs.
	Running(workloadID string) bool
	// Exits delivers one Exit per started process, in the order the
	// processes ended. It is closed by Close.
	Exits() <-chan Exit
	// Close stops every workload the backend started and waits for them,
	// then closes Exits; exits not yet received by then are dropped.
	Close(ctx context.Context) error
	// Containment and Isolation say how workloads are contained and as
	// whom they run (for the start-up log and /status).
	Containment() Containment
	Isolation() Isolation
	// LogPath is the file workload's output goes to ("" when none), where
	// its exit reason is read from.
	LogPath(workloadID string) string
}

// StartSpec says what to run.
type StartSpec struct {
	// WorkloadID names the workload (at most MaxWorkloadIDLen bytes).
	WorkloadID string
	// Epoch is the lease epoch the workload runs at; it is passed to the
	// process as PROVIDER_AGENT_EPOCH and echoed in its Exit.
	Epoch uint64
	// Command is the argv to execute (Command[0] is looked up in PATH). Use
	// ShellCommand to run a shell command line.
	Command []string
	// Env entries ("KEY=value") are added to the base environment (PATH
	// and HOME for an isolated workload, else the agent's, unless the
	// backend is configured otherwise), after PROVIDER_AGENT_WORKLOAD_ID,
	// PROVIDER_AGENT_EPOCH and PROVIDER_AGENT_CHECKPOINT_DIR.
	Env []string
	// Dir is the working directory; "" means the workload's own (its
	// directory's home/).
	Dir string
}

// CheckpointDirEnv names the workload's checkpoint directory in its
// environment: a directory private to the workload and its epoch, which
// only the workload's user may enter (a container has it bind-mounted).
const CheckpointDirEnv = "PROVIDER_AGENT_CHECKPOINT_DIR"

// MaxWorkloadIDLen bounds StartSpec.WorkloadID.
const MaxWorkloadIDLen = 256

// ShellCommand returns the argv that runs line with /bin/sh -c.
func ShellCommand(line string) []string { return []string{"/bin/sh", "-c", line} }

// Validate checks the spec.
func (s StartSpec) Validate() error {
	if s.WorkloadID == "" || len(s.WorkloadID) > MaxWorkloadIDLen {
		return fmt.Errorf("workload id of %d bytes, want 1 to %d: %w", len(s.WorkloadID), MaxWorkloadIDLen, ErrBadSpec)
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		return fmt.Errorf("start %s: %w", s.WorkloadID, ErrNoCommand)
	}
	for i, kv := range s.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("start %s: env[%d] is not KEY=value: %w", s.WorkloadID, i, ErrBadSpec)
		}
	}
	return nil
}

// Exit reports that a workload process ended.
type Exit struct {
	WorkloadID string
	Epoch      uint64
	// Code is the exit status, or -1 when the process was killed by a
	// signal.
	Code int
	// Signal names the signal that killed the process ("SIGKILL"), or "".
	Signal string
	// Stopped is true when the process ended because of Stop or Close: the
	// machine must not count it as a crash.
	Stopped bool
	// Reason is the reason given to Stop (Stopped exits only).
	Reason string
	// Err is set when waiting for the process failed for another reason
	// than a non-zero status (rare).
	Err error
	// At is when the exit was observed.
	At time.Time
}

// String describes the exit for logs: "exit 3", "signal SIGKILL (stopped:
// fenced)".
func (e Exit) String() string {
	var s string
	switch {
	case e.Err != nil:
		s = "wait error: " + e.Err.Error()
	case e.Signal != "":
		s = "signal " + e.Signal
	default:
		s = fmt.Sprintf("exit %d", e.Code)
	}
	if e.Stopped {
		s += " (stopped: " + e.Reason + ")"
	}
	return s
}
