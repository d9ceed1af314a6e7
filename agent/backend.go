package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Backend runs workload processes. agent/backend provides the production
// implementation; ProcessBackend here is the small built-in one.
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

// ProcessBackend runs each workload as a child process in its own process
// group, so that stopping it also stops its children.
type ProcessBackend struct {
	Grace  time.Duration // SIGTERM to SIGKILL; default 5 s
	Logger *slog.Logger

	mu    sync.Mutex
	procs map[string]*proc
	exits chan Exit
	wg    sync.WaitGroup
}

type proc struct {
	cmd      *exec.Cmd
	epoch    uint64
	done     chan struct{}
	stopping bool
}

var _ Backend = (*ProcessBackend)(nil)

// NewProcessBackend returns a ProcessBackend.
func NewProcessBackend(grace time.Duration, logger *slog.Logger) *ProcessBackend {
	if grace <= 0 {
		grace = 5 * time.Second
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &ProcessBackend{Grace: grace, Logger: logger, procs: map[string]*proc{}, exits: make(chan Exit, 1024)}
}

// Start implements Backend.
func (b *ProcessBackend) Start(_ context.Context, id string, epoch uint64, command []string) error {
	if len(command) == 0 {
		return fmt.Errorf("start %s: %w", id, ErrNoCommand)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.procs[id]; ok {
		select {
		case <-p.done:
		default:
			p.epoch = epoch
			return nil
		}
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
	cmd.Env = append(os.Environ(), "PROVIDER_AGENT_WORKLOAD="+id, fmt.Sprintf("PROVIDER_AGENT_EPOCH=%d", epoch))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	p := &proc{cmd: cmd, epoch: epoch, done: make(chan struct{})}
	b.procs[id] = p
	b.wg.Add(1)
	go b.wait(id, p)
	b.Logger.Info("workload process started", "workload", id, "epoch", epoch, "pid", cmd.Process.Pid)
	return nil
}

func (b *ProcessBackend) wait(id string, p *proc) {
	defer b.wg.Done()
	err := p.cmd.Wait()
	b.mu.Lock()
	close(p.done)
	stopping := p.stopping
	if b.procs[id] == p {
		delete(b.procs, id)
	}
	epoch := p.epoch
	b.mu.Unlock()
	if stopping {
		return
	}
	reason := "exited"
	if err != nil {
		reason = err.Error()
	}
	select {
	case b.exits <- Exit{ID: id, Epoch: epoch, Reason: reason}:
	default:
		b.Logger.Error("workload exit dropped: exit queue full", "workload", id, "reason", reason)
	}
}

// Stop implements Backend.
func (b *ProcessBackend) Stop(ctx context.Context, id string) error {
	b.mu.Lock()
	p, ok := b.procs[id]
	if ok {
		p.stopping = true
	}
	b.mu.Unlock()
	if !ok {
		return nil
	}
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	t := time.NewTimer(b.Grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
	case <-ctx.Done():
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
	}
	// Children that ignored SIGTERM go with the group.
	_ = syscall.Kill(pgid, syscall.SIGKILL)
	b.Logger.Info("workload process stopped", "workload", id)
	return nil
}

// Running implements Backend.
func (b *ProcessBackend) Running(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.procs[id]
	if !ok {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Exits implements Backend.
func (b *ProcessBackend) Exits() <-chan Exit { return b.exits }

// StopAll stops every process (agent shutdown with stop-on-exit, tests).
func (b *ProcessBackend) StopAll(ctx context.Context) {
	b.mu.Lock()
	ids := make([]string, 0, len(b.procs))
	for id := range b.procs {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	for _, id := range ids {
		_ = b.Stop(ctx, id)
	}
}
