package agent

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/backend"
	"provideragent/internal/relaytest"
	"provideragent/lease"
)

// memBackend is an in-memory backend.Backend for tests about the agent itself (the
// process backend has its own tests).
type memBackend struct {
	mu      sync.Mutex
	running map[string]uint64
	starts  int // Start calls
	stops   int // Stop calls
	exits   chan backend.Exit
	// startGate, when set, holds every Start until it is closed: a start
	// in flight.
	startGate chan struct{}
	// stopErr, when set, fails every Stop (the process keeps running).
	stopErr error
	// reasons are the reasons Stop was given, in order.
	reasons []string
}

func newMemBackend() *memBackend {
	return &memBackend{running: map[string]uint64{}, exits: make(chan backend.Exit, 16)}
}

func (b *memBackend) Start(_ context.Context, spec backend.StartSpec) error {
	if b.startGate != nil {
		<-b.startGate
	}
	b.mu.Lock()
	b.running[spec.WorkloadID] = spec.Epoch
	b.starts++
	b.mu.Unlock()
	return nil
}

func (b *memBackend) Stop(_ context.Context, id, reason string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stops++
	b.reasons = append(b.reasons, reason)
	if b.stopErr != nil {
		return b.stopErr
	}
	delete(b.running, id)
	return nil
}

func (b *memBackend) Running(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.running[id]
	return ok
}

func (b *memBackend) Exits() <-chan backend.Exit { return b.exits }

func (b *memBackend) Containment() backend.Containment { return backend.Containment{} }
func (b *memBackend) Isolation() backend.Isolation     { return backend.Isolation{} }
func (b *memBackend) LogPath(string) string            { return "" }

// Close forgets every workload; the exits channel stays open (the tests
// that share a memBackend between agent restarts reuse it).
func (b *memBackend) Close(context.Context) error {
	b.mu.Lock()
	clear(b.running)
	b.mu.Unlock()
	return nil
}

// counts returns how many times Start and Stop were called.
func (b *memBackend) counts() (starts, stops int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.starts, b.stops
}

func (b *memBackend) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.running)
}

// startBulkAgent runs one agent that is primary of n workloads with an
// in-memory backend.
func startBulkAgent(tb testing.TB, n int, lcfg lease.Config, dbPath string) (*Agent, *memBackend, func()) {
	tb.Helper()
	return startBulkAgentLogging(tb, n, lcfg, dbPath, nil)
}

// startBulkAgentLogging is startBulkAgent with the agent's logs going to
// logger (nil: discarded).
func startBulkAgentLogging(tb testing.TB, n int, lcfg lease.Config, dbPath string, logger *slog.Logger) (*Agent, *memBackend, func()) {
	tb.Helper()
	key := nostr.GeneratePrivateKey()
	pub, _ := nostr.GetPublicKey(key)
	ctx, cancel := context.WithCancel(context.Background())
	db, err := openTestDB(ctx, dbPath)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Lease = lcfg
	cfg.SecretKey = key
	cfg.Listen = ""
	cfg.Name = "bulk"
	be := newMemBackend()
	a, err := New(ctx, cfg, Deps{DB: db, Backend: be, Logger: logger})
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for i := range n {
		a.Track(ctx, lease.Spec{
			ID: fmt.Sprintf("w-%05d", i), Primary: pub, Replication: lease.ReplicationNone, Epoch: 1,
			RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever}, Command: []string{"true"},
		})
	}
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("Run() = %v, want nil", err)
		}
		db.Close()
	}
	return a, be, stop
}

func liveCount(a *Agent) int {
	n := 0
	for _, w := range a.Status().Workloads {
		if w.State == string(lease.StateLive) {
			n++
		}
	}
	return n
}

// TestSoakThousandWorkloads: 1,000 workloads over 3 relays for a bounded
// time; the goroutine count and the heap stay flat once Live.
func TestSoakThousandWorkloads(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test")
	}
	// Not parallel: it counts the process's goroutines, and other tests
	// starting and stopping agents meanwhile made it flaky (318 -> 372 in
	// one of 9 -race runs). Sequential tests run alone.
	_, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	a, be, stop := startBulkAgent(t, 1000, lcfg, t.TempDir()+"/soak.db")
	defer stop()
	waitFor(t, 30*time.Second, "1000 workloads Live", func() bool { return liveCount(a) == 1000 })
	if got := be.count(); got != 1000 {
		t.Fatalf("running workloads = %d, want 1000", got)
	}
	sample := func() (int, uint64) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapAlloc
	}
	time.Sleep(2 * time.Second) // let the first saves and status refreshes settle
	g0, h0 := sample()
	time.Sleep(8 * time.Second) // 8 heartbeat rounds, 32 ticks, a meta save
	g1, h1 := sample()
	t.Logf("goroutines %d -> %d, heap %.1f MiB -> %.1f MiB", g0, g1, float64(h0)/(1<<20), float64(h1)/(1<<20))
	// Allow the relay pool's and the runtime's churn, not growth per
	// workload.
	if g1 > g0+50 {
		t.Fatalf("goroutines grew from %d to %d, want flat", g0, g1)
	}
	if h1 > 2*h0+(16<<20) {
		t.Fatalf("heap grew from %d to %d bytes, want steady", h0, h1)
	}
	if got := liveCount(a); got != 1000 {
		t.Fatalf("Live workloads after soak = %d, want 1000", got)
	}
}
