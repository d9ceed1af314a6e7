//go:build fleetbench

package main

// The fleet benchmark's backend, only in a binary built with
// -tags fleetbench, which BenchmarkFleet builds for its record mode: a
// fleet of 10,000 workloads needs 10,000 supervisors of 3.5 MiB each
// (35 GiB) beside the agents, more than the benchmark's machine has. With
// $PROVIDER_AGENT_FLEET_RECORD set to a file, a workload whose command
// line does not hold fleetProcessMarker is not run: its start and stop are
// appended to that file ("<unix ms> start|stop <id> <epoch>") and it runs,
// as far as the agent can tell, until stopped or until the agent dies.
// The others (the durable counters, the workloads of the rack the
// benchmark kills; everything without the variable) run as processes under
// the process backend.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"provideragent/backend"
	"provideragent/config"
)

// fleetRecordEnv names the record file.
const fleetRecordEnv = "PROVIDER_AGENT_FLEET_RECORD"

// fleetProcessMarker in a command line makes the workload a process.
const fleetProcessMarker = ": fleet-process;"

func fleetBackend(cfg config.Config, logger *slog.Logger) (backend.Backend, bool, error) {
	path := os.Getenv(fleetRecordEnv)
	if path == "" {
		return nil, false, nil
	}
	proc, err := backend.NewProcess(cfg.ProcessConfig(), logger)
	if err != nil {
		return nil, true, fmt.Errorf("backend: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		_ = proc.Close(context.Background())
		return nil, true, fmt.Errorf("fleet record backend: %w", err)
	}
	r := &recordBackend{Process: proc, file: f, running: map[string]uint64{}, exits: make(chan backend.Exit, 1024)}
	r.wg.Go(func() {
		for e := range proc.Exits() {
			r.exits <- e
		}
	})
	logger.Warn("fleet benchmark build: workloads other than durable counters are recorded, not run", "record", path)
	return r, true, nil
}

// recordBackend records the starts and stops of the workloads it does not
// run and hands the rest to the process backend.
type recordBackend struct {
	*backend.Process
	file  *os.File
	exits chan backend.Exit
	wg    sync.WaitGroup

	mu      sync.Mutex
	running map[string]uint64 // recorded workloads running, by id: their epoch
	closed  bool
}

func recorded(spec backend.StartSpec) bool {
	return !strings.Contains(strings.Join(spec.Command, " "), fleetProcessMarker)
}

func (r *recordBackend) note(what, id string, epoch uint64) {
	fmt.Fprintf(r.file, "%d %s %s %d\n", time.Now().UnixMilli(), what, id, epoch)
}

func (r *recordBackend) Start(ctx context.Context, spec backend.StartSpec) error {
	if !recorded(spec) {
		return r.Process.Start(ctx, spec)
	}
	if err := spec.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return backend.ErrClosed
	}
	if _, ok := r.running[spec.WorkloadID]; ok {
		return nil
	}
	r.running[spec.WorkloadID] = spec.Epoch
	r.note("start", spec.WorkloadID, spec.Epoch)
	return nil
}

func (r *recordBackend) Stop(ctx context.Context, id, reason string) error {
	r.mu.Lock()
	epoch, ok := r.running[id]
	if ok {
		delete(r.running, id)
		r.note("stop", id, epoch)
	}
	r.mu.Unlock()
	if !ok {
		return r.Process.Stop(ctx, id, reason)
	}
	r.exits <- backend.Exit{WorkloadID: id, Epoch: epoch, Code: -1, Signal: "SIGTERM", Stopped: true, Reason: reason, At: time.Now()}
	return nil
}

func (r *recordBackend) Running(id string) bool {
	r.mu.Lock()
	_, ok := r.running[id]
	r.mu.Unlock()
	return ok || r.Process.Running(id)
}

func (r *recordBackend) Exits() <-chan backend.Exit { return r.exits }

func (r *recordBackend) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	for id, epoch := range r.running {
		r.note("stop", id, epoch)
	}
	clear(r.running)
	r.mu.Unlock()
	err := r.Process.Close(ctx)
	r.wg.Wait()
	close(r.exits)
	_ = r.file.Close()
	return err
}

// LogPath is "" for a recorded workload.
func (r *recordBackend) LogPath(id string) string {
	r.mu.Lock()
	_, ok := r.running[id]
	r.mu.Unlock()
	if ok {
		return ""
	}
	return r.Process.LogPath(id)
}

var _ backend.Checkpointer = (*recordBackend)(nil)
