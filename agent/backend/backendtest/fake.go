package backendtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"provideragent/agent/backend"
)

// Fake is an in-memory backend.Backend. The zero value is not usable; use
// New.
type Fake struct {
	mu      sync.Mutex
	running map[string]backend.StartSpec
	starts  []backend.StartSpec
	closed  bool
	queue   []backend.Exit
	notify  chan struct{}
	exits   chan backend.Exit
	quit    chan struct{}
	done    chan struct{}
	once    sync.Once
	// StartErr, when set, is returned by Start (and nothing starts).
	StartErr error
}

var _ backend.Backend = (*Fake)(nil)

// New returns a Fake whose Exits channel is fed by one goroutine that Close
// ends.
func New() *Fake {
	f := &Fake{
		running: map[string]backend.StartSpec{},
		notify:  make(chan struct{}, 1),
		exits:   make(chan backend.Exit),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go f.dispatch()
	return f
}

// Start implements backend.Backend.
func (f *Fake) Start(ctx context.Context, spec backend.StartSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
		return fmt.Errorf("start %s: %w", spec.WorkloadID, backend.ErrClosed)
	case f.StartErr != nil:
		return fmt.Errorf("start %s: %w", spec.WorkloadID, f.StartErr)
	}
	if _, ok := f.running[spec.WorkloadID]; ok {
		return nil
	}
	f.running[spec.WorkloadID] = spec
	f.starts = append(f.starts, spec)
	return nil
}

// Stop implements backend.Backend: a running workload ends at once with a
// Stopped exit.
func (f *Fake) Stop(ctx context.Context, id, reason string) error {
	f.end(id, backend.Exit{Code: -1, Signal: "SIGTERM", Stopped: true, Reason: reason})
	return nil
}

// Crash ends a running workload on its own with the given exit code; it
// reports whether the workload was running.
func (f *Fake) Crash(id string, code int) bool {
	return f.end(id, backend.Exit{Code: code})
}

func (f *Fake) end(id string, e backend.Exit) bool {
	f.mu.Lock()
	spec, ok := f.running[id]
	if ok {
		delete(f.running, id)
		e.WorkloadID, e.Epoch, e.At = id, spec.Epoch, time.Now()
		f.queue = append(f.queue, e)
	}
	f.mu.Unlock()
	if ok {
		select {
		case f.notify <- struct{}{}:
		default:
		}
	}
	return ok
}

// Running implements backend.Backend.
func (f *Fake) Running(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.running[id]
	return ok
}

// Starts returns every spec started so far, in order.
func (f *Fake) Starts() []backend.StartSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]backend.StartSpec(nil), f.starts...)
}

// Exits implements backend.Backend.
func (f *Fake) Exits() <-chan backend.Exit { return f.exits }

// Close implements backend.Backend.
func (f *Fake) Close(ctx context.Context) error {
	f.mu.Lock()
	f.closed = true
	ids := make([]string, 0, len(f.running))
	for id := range f.running {
		ids = append(ids, id)
	}
	f.mu.Unlock()
	for _, id := range ids {
		f.Stop(ctx, id, "backend closed")
	}
	f.once.Do(func() { close(f.quit); <-f.done })
	return nil
}

func (f *Fake) dispatch() {
	defer close(f.done)
	defer close(f.exits)
	for {
		f.mu.Lock()
		var e backend.Exit
		ok := len(f.queue) > 0
		if ok {
			e, f.queue = f.queue[0], f.queue[1:]
		}
		f.mu.Unlock()
		if !ok {
			select {
			case <-f.notify:
				continue
			case <-f.quit:
				return
			}
		}
		select {
		case f.exits <- e:
		case <-f.quit:
			return
		}
	}
}
