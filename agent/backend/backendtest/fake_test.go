package backendtest

import (
	"context"
	"testing"
	"time"

	"provideragent/agent/backend"
)

func next(t *testing.T, f *Fake) backend.Exit {
	t.Helper()
	select {
	case e := <-f.Exits():
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no exit")
	}
	return backend.Exit{}
}

func TestFake(t *testing.T) {
	ctx := context.Background()
	f := New()
	spec := backend.StartSpec{WorkloadID: "w", Epoch: 3, Command: []string{"x"}}
	if err := f.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := f.Start(ctx, spec); err != nil || len(f.Starts()) != 1 {
		t.Fatalf("second Start = %v with %d starts, want nil and 1", err, len(f.Starts()))
	}
	if !f.Crash("w", 3) || f.Running("w") {
		t.Fatal("Crash(w) did not end the workload")
	}
	if e := next(t, f); e.WorkloadID != "w" || e.Epoch != 3 || e.Code != 3 || e.Stopped {
		t.Errorf("exit = %+v, want crash code 3", e)
	}
	f.Start(ctx, spec)
	f.Stop(ctx, "w", "fenced")
	if e := next(t, f); !e.Stopped || e.Reason != "fenced" {
		t.Errorf("exit = %+v, want stopped/fenced", e)
	}
	if f.Crash("w", 1) {
		t.Error("Crash(not running) = true, want false")
	}
	f.Start(ctx, backend.StartSpec{WorkloadID: "z", Command: []string{"x"}})
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for range f.Exits() {
	}
	if err := f.Start(ctx, spec); err == nil {
		t.Error("Start after Close = nil, want ErrClosed")
	}
}
