package driver_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"provideragent/driver"
	"provideragent/driver/drivertest"
	"provideragent/lease"
)

// printer is a Performer that prints each effect the driver hands over.
type printer struct{}

func (printer) Perform(e lease.Effect, _ time.Time) { fmt.Printf("  perform %T\n", e) }

// noEvents builds no outbox events (this example queues none).
type noEvents struct{}

func (noEvents) Build(jobs []driver.OutboxJob) []driver.OutboxResult[string] {
	return make([]driver.OutboxResult[string], len(jobs))
}

// atOnce performs process operations as soon as they are released.
type atOnce struct{ running map[string]bool }

func (p atOnce) Go(work func()) { work() }
func (p atOnce) Run(_ context.Context, op driver.Op) {
	p.running[op.Workload] = op.Kind != driver.OpStop
}
func (p atOnce) Running(id string) bool { return p.running[id] }

// A daemon's machine goroutine opens the driver over its store, wraps it
// in a Shell and runs every input through a turn: Feed, then Commit, which
// performs the stops and reports at once and the rest once the step is
// persisted. The agent and the simulator both run this loop.
func ExampleShell() {
	ctx := context.Background()
	alice := strings.Repeat("a", 64)
	cfg := lease.DefaultConfig()
	cfg.Relays = []string{"wss://r0.example", "wss://r1.example", "wss://r2.example"}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

	store := &drivertest.MemStore[string, struct{}]{}
	d, err := driver.Open(ctx, now, driver.Config{}, cfg, alice, driver.Deps[string, struct{}]{
		Store: store, Outbox: noEvents{}, Performer: printer{},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	procs := atOnce{running: map[string]bool{}}
	sh := driver.NewShell(d, now, driver.ShellConfig{}, driver.ShellDeps{Processes: procs})
	// Nothing leaves the outbox before Start performed the restored
	// machine's stops.
	fmt.Println("outbox open before Start:", sh.Release(""))
	if err := sh.Start(ctx, now); err != nil {
		fmt.Println(err)
		return
	}

	fmt.Println("a turn that feeds a grant:")
	t := sh.Begin(now)
	fed := t.Feed(driver.Input{Grant: &lease.Spec{
		ID: "web-1", Primary: alice, Epoch: 1, Replication: lease.ReplicationNone,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever}, CreatedAt: now,
	}})
	if fed.Err != nil {
		fmt.Println(fed.Err)
		return
	}
	if err := t.Commit(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("row committed:", store.State("web-1"))
	saved, err := sh.SaveIfDue(ctx, now.Add(driver.SaveEvery))
	fmt.Println("periodic save due after", driver.SaveEvery, saved, err)

	// The fence gate: a revocation of web-1 leaves the outbox only once
	// web-1 is fenced here (no process operation pending, no process).
	sh.Enqueue(ctx, driver.Op{Kind: driver.OpStart, Workload: "web-1", Epoch: 1})
	fmt.Println("revocation may leave while web-1 runs:", sh.Release("web-1"))
	sh.Enqueue(ctx, driver.Op{Kind: driver.OpStop, Workload: "web-1", Epoch: 1})
	fmt.Println("once stopped:", sh.Release("web-1"))
	// Output:
	// outbox open before Start: false
	// a turn that feeds a grant:
	//   perform lease.EnteredState
	//   perform lease.StartWorkload
	// row committed: provisioning
	// periodic save due after 5s true <nil>
	// revocation may leave while web-1 runs: false
	// once stopped: true
}
