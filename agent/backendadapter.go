package agent

import (
	"context"
	"fmt"

	"provideragent/agent/backend"
)

// backendAdapter drives an agent/backend.Backend through the agent's
// Backend interface: it forwards the exits that were not caused by Stop
// (those are the machine's ProcessExited inputs).
type backendAdapter struct {
	b     backend.Backend
	exits chan Exit
	done  chan struct{}
}

// AdaptBackend wraps an agent/backend implementation (such as
// backend.Process). The adapter's forwarding goroutine ends when the inner
// backend closes its Exits channel (backend.Close).
func AdaptBackend(b backend.Backend) Backend {
	a := &backendAdapter{b: b, exits: make(chan Exit, 1024), done: make(chan struct{})}
	go a.forward()
	return a
}

func (a *backendAdapter) forward() {
	defer close(a.done)
	for ex := range a.b.Exits() {
		if ex.Stopped {
			continue
		}
		a.exits <- Exit{ID: ex.WorkloadID, Epoch: ex.Epoch, Reason: ex.String()}
	}
}

func (a *backendAdapter) Start(ctx context.Context, id string, epoch uint64, command []string) error {
	if len(command) == 0 {
		return fmt.Errorf("start %s: %w", id, ErrNoCommand)
	}
	return a.b.Start(ctx, backend.StartSpec{WorkloadID: id, Epoch: epoch, Command: command})
}

func (a *backendAdapter) Stop(ctx context.Context, id string) error {
	return a.b.Stop(ctx, id, "fenced by the lease machine")
}

func (a *backendAdapter) Running(id string) bool { return a.b.Running(id) }

// LogPath is the workload's log file when the inner backend keeps one
// (backend.Process with a LogDir), else "".
func (a *backendAdapter) LogPath(id string) string {
	if lp, ok := a.b.(interface{ LogPath(id string) string }); ok {
		return lp.LogPath(id)
	}
	return ""
}

func (a *backendAdapter) Exits() <-chan Exit { return a.exits }
