package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/driver"
	"provideragent/internal/logcapture"
	"provideragent/lease"
)

// TestEffectsFollowDriverProtocol checks lease/doc.go's driver protocol as
// the agent performs effects: AttemptRespawn restarts the process at once
// (never waiting for At) and reports RespawnDone's input; a StopWorkload for
// a workload that neither runs nor has work queued is a no-op, however often
// it is repeated (Restore re-issues one per workload not held here), logged
// at debug level only and without a FENCE timeline line; one for a running
// workload stops it.
func TestEffectsFollowDriverProtocol(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := newStepAgent(t, stepOpts{})
	var logs strings.Builder
	var logMu sync.Mutex
	a.logger = slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var fences []string
	a.me.onEvent = func(e Event) {
		if e.Kind == "stop" {
			fences = append(fences, e.Workload) // perform runs on this goroutine
		}
	}
	b := a.work.backend.(*memBackend)
	defer a.work.act.wait()
	defer cancel()
	now := time.Now()

	// Due in an hour by its schedule, performed now all the same.
	a.m.perf.ctx = ctx
	a.m.perf.Perform(lease.AttemptRespawn{ID: "w1", Epoch: 1, Attempt: 1, At: now.Add(time.Hour)}, time.Time{})
	select {
	case in := <-a.in.inputs:
		if in.respawn == nil || !in.respawn.OK || in.respawn.Attempt != 1 {
			t.Fatalf("input after AttemptRespawn = %+v, want RespawnDone attempt 1 OK", in)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("AttemptRespawn{At: +1h}: no RespawnDone input within 10 s, want the restart at once")
	}
	if !b.Running("w1") {
		t.Fatalf("Running(w1) after AttemptRespawn = false, want true")
	}

	tests := []struct {
		name       string
		id         string
		wantStops  int // Stop calls after the effect
		wantFences int // FENCE timeline lines after the effect
	}{
		{"stop of a workload never started here", "other", 0, 0},
		{"repeated stop of it", "other", 0, 0},
		{"stop of the running workload", "w1", 1, 1},
		{"repeated stop once stopped", "w1", 1, 1},
	}
	for _, tt := range tests {
		a.m.perf.Perform(lease.StopWorkload{ID: tt.id, Epoch: 1, Reason: "restart: not held here (standby)"}, time.Time{})
		if len(fences) != tt.wantFences {
			t.Errorf("%s: FENCE timeline lines = %v, want %d", tt.name, fences, tt.wantFences)
		}
		waitFor(t, 10*time.Second, tt.name+": actuator idle", func() bool { return a.sh.Fenced(tt.id) })
		if _, stops := b.counts(); stops != tt.wantStops {
			t.Errorf("%s: backend Stop calls = %d, want %d", tt.name, stops, tt.wantStops)
		}
	}
	logMu.Lock()
	defer logMu.Unlock()
	if strings.Contains(logs.String(), "stop") {
		t.Errorf("logs at info and above = %q, want no line about stops", logs.String())
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestFenceWithAStartPending: a StopWorkload that arrives while the
// workload's start is still in flight (the backend has not started the
// process yet) or queued behind other work is never skipped as "not
// running here": the stop is queued after the start, and once the backend
// is done the workload does not run.
func TestFenceWithAStartPending(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := newStepAgent(t, stepOpts{})
	b := a.work.backend.(*memBackend)
	gate := make(chan struct{})
	b.startGate = gate
	defer a.work.act.wait()
	defer cancel()
	a.m.perf.ctx = ctx
	fence := lease.StopWorkload{ID: "w1", Epoch: 1, Reason: "relay quorum lost"}

	// The start of epoch 1 is in flight: the backend holds it.
	a.m.perf.Perform(lease.StartWorkload{ID: "w1", Epoch: 1}, time.Time{})
	waitFor(t, 10*time.Second, "the start in flight", func() bool {
		return a.sh.Pending("w1")
	})
	a.m.perf.Perform(fence, time.Time{})
	// A start of epoch 2 queued behind that stop, and a fence of it while
	// it is queued.
	a.m.perf.Perform(lease.StartWorkload{ID: "w1", Epoch: 2}, time.Time{})
	a.m.perf.Perform(lease.StopWorkload{ID: "w1", Epoch: 2, Reason: "relay quorum lost"}, time.Time{})
	if b.Running("w1") {
		t.Fatalf("w1 runs before the backend let any start through")
	}
	close(gate)
	waitFor(t, 10*time.Second, "actuator idle", func() bool { return a.sh.Fenced("w1") })
	starts, stops := b.counts()
	if b.Running("w1") || starts != 2 || stops != 2 {
		t.Errorf("after start, fence, start, fence with the starts pending: running %v, starts %d, stops %d; want not running, 2 starts, 2 stops",
			b.Running("w1"), starts, stops)
	}
}

// TestEffectsRebuildSubscriptionsForNewAndEndedWorkloads: a workload that
// appears or ends changes what the agent subscribes to; a transition
// between live states does not.
func TestEffectsRebuildSubscriptionsForNewAndEndedWorkloads(t *testing.T) {
	a := newStepAgent(t, stepOpts{})
	for _, tt := range []struct {
		from, to lease.State
		rebuild  bool
	}{
		{"", lease.StateStandby, true},
		{lease.StateStandby, lease.StatePromoting, false},
		{lease.StateLive, lease.StateFailed, true},
		{lease.StateStandby, lease.StateExpired, true},
	} {
		a.m.subs.dirty = false
		a.m.perf.Record(lease.EnteredState{ID: "w1", From: tt.from, To: tt.to, Epoch: 1})
		if a.m.subs.dirty != tt.rebuild {
			t.Errorf("entered %q -> %q: subscriptions marked for rebuilding %v, want %v", tt.from, tt.to, a.m.subs.dirty, tt.rebuild)
		}
	}
}

// TestEffectsCountFailedCommitsOnly: the step-error counter counts commits
// that failed, not those that wrote.
func TestEffectsCountFailedCommitsOnly(t *testing.T) {
	a := newStepAgent(t, stepOpts{})
	ev := commitEvents{a}
	before := testutil.ToFloat64(a.obs.met.stepErrors)
	ev.Attempted(nil)
	ev.Attempted(nil)
	ev.Attempted(errors.New("disk full"))
	if got := testutil.ToFloat64(a.obs.met.stepErrors) - before; got != 1 {
		t.Fatalf("step errors after two commits that wrote and one that failed: +%v, want +1", got)
	}
}

// TestEffectsClaimIOTimeoutFitsTheRound: a claim publish or read waits at
// most half the lease's claim timeout (its report must reach the machine
// before the round times out), and never longer than PublishTimeout.
func TestEffectsClaimIOTimeoutFitsTheRound(t *testing.T) {
	a := newStepAgent(t, stepOpts{})
	a.cfg.Lease.ClaimTimeout = 30 * time.Second
	a.cfg.PublishTimeout = time.Minute
	if got := a.claimIOTimeout(); got != 15*time.Second {
		t.Fatalf("claimIOTimeout() with claim timeout 30 s, publish timeout 1 min = %v, want 15s", got)
	}
	a.cfg.PublishTimeout = 5 * time.Second
	if got := a.claimIOTimeout(); got != 5*time.Second {
		t.Fatalf("claimIOTimeout() with publish timeout 5 s = %v, want 5s", got)
	}
}

// TestEffectsTransitionsLabelANewWorkload: agent_transitions_total's from
// label is "new" for a workload's first state (docs/operations.md), and the
// state left otherwise.
func TestEffectsTransitionsLabelANewWorkload(t *testing.T) {
	a := newStepAgent(t, stepOpts{})
	a.m.perf.Record(lease.EnteredState{ID: "w1", To: lease.StateStandby, Epoch: 1})
	a.m.perf.Record(lease.EnteredState{ID: "w1", From: lease.StateStandby, To: lease.StatePromoting, Epoch: 1})
	if got := testutil.ToFloat64(a.obs.met.transitions.WithLabelValues("new", "standby")); got != 1 {
		t.Errorf(`transitions{from="new",to="standby"} = %v, want 1`, got)
	}
	if got := testutil.ToFloat64(a.obs.met.transitions.WithLabelValues("standby", "promoting")); got != 1 {
		t.Errorf(`transitions{from="standby",to="promoting"} = %v, want 1`, got)
	}
}

// TestEffectsFailedStopIsLogged: a stop the backend refuses is an error
// in the log that names the workload and the backend's error, and the
// workload is not fenced (its revocation keeps waiting); a stop that works
// logs nothing at error level.
func TestEffectsFailedStopIsLogged(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := newStepAgent(t, stepOpts{})
	logs := logcapture.New(slog.LevelError)
	a.logger = slog.New(logs)
	a.work.act.logger = a.logger
	b := a.work.backend.(*memBackend)
	defer a.work.act.wait()
	defer cancel()
	a.m.perf.ctx = ctx

	a.m.perf.Perform(lease.StartWorkload{ID: "w1", Epoch: 1}, time.Time{})
	a.m.perf.Perform(lease.StartWorkload{ID: "w2", Epoch: 1}, time.Time{})
	waitFor(t, 10*time.Second, "both started", func() bool { return b.Running("w1") && b.Running("w2") })

	a.m.perf.Perform(lease.StopWorkload{ID: "w1", Epoch: 1, Reason: "relay quorum lost"}, time.Time{})
	waitFor(t, 10*time.Second, "w1 stopped", func() bool { return a.sh.Fenced("w1") })
	if got := logs.Find("stop workload"); len(got) != 0 {
		t.Fatalf("a stop that worked logged %d errors: %+v", len(got), got)
	}

	b.mu.Lock()
	b.stopErr = errors.New("podman: container w2 is stuck")
	b.mu.Unlock()
	a.m.perf.Perform(lease.StopWorkload{ID: "w2", Epoch: 1, Reason: "relay quorum lost"}, time.Time{})
	waitFor(t, 10*time.Second, "w2's stop attempted", func() bool { _, stops := b.counts(); return stops == 2 })
	waitFor(t, 10*time.Second, "the failed stop logged", func() bool { return len(logs.Find("stop workload")) == 1 })
	r := logs.Find("stop workload")[0]
	if r.String("workload") != "w2" || !strings.Contains(r.String("err"), "container w2 is stuck") {
		t.Errorf("failed stop logged as %+v, want workload w2 and the backend's error", r)
	}
	if a.sh.Fenced("w2") {
		t.Errorf("Fenced(w2) after its stop failed = true, want false (it still runs)")
	}
}

// TestEffectsFenceWordingReadOncePerInstant: the fence wording (a read of
// every relay's refusals) is made once per step time when a step's
// revocations are built and at most once a second when stops are
// performed, so a mass eviction does not read the relay pool once per
// workload; it is made afresh at another step time, after a second, and
// after the clock went back.
func TestEffectsFenceWordingReadOncePerInstant(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	var made []time.Time
	build := func(at time.Time) func(string) string {
		made = append(made, at)
		n := len(made)
		return func(r string) string { return fmt.Sprintf("%s (wording %d)", r, n) }
	}
	steps := []struct {
		name   string
		now    time.Time
		maxAge time.Duration
		want   string // the wording's number
	}{
		{"first use", t0, 0, "1"},
		{"same step time", t0, 0, "1"},
		{"another step time", t0.Add(time.Nanosecond), 0, "2"},
		{"within the second", t0.Add(time.Second), time.Second, "2"},
		{"a second after it was made", t0.Add(time.Second + time.Nanosecond), time.Second, "2"},
		{"over a second after it was made", t0.Add(time.Second + 2*time.Nanosecond), time.Second, "3"},
		{"clock went back", t0, time.Second, "4"},
	}
	var c wordingCache
	for _, s := range steps {
		got := c.get(s.now, s.maxAge, build)("quorum lost")
		if want := "quorum lost (wording " + s.want + ")"; got != want {
			t.Fatalf("%s: wording %q, want %q (made at %v)", s.name, got, want, made)
		}
	}
}

// TestEffectsStopReasonReachesBackend: the backend is told why a workload
// stops (it ends up in the workload's log and Exit): a fence says so, and
// a stop queued with its own reason (a planned move's) keeps it.
func TestEffectsStopReasonReachesBackend(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := newStepAgent(t, stepOpts{})
	b := a.work.backend.(*memBackend)
	defer a.work.act.wait()
	defer cancel()
	a.m.perf.ctx = ctx

	a.m.perf.Perform(lease.StartWorkload{ID: "w1", Epoch: 1}, time.Time{})
	a.m.perf.Perform(lease.StopWorkload{ID: "w1", Epoch: 1, Reason: "relay quorum lost"}, time.Time{})
	a.sh.Enqueue(ctx, driver.Op{Kind: driver.OpStart, Workload: "w2", Epoch: 1})
	a.sh.Enqueue(ctx, driver.Op{Kind: driver.OpStop, Workload: "w2", Epoch: 1, Reason: stopReasonMove})
	waitFor(t, 10*time.Second, "both stopped", func() bool { return a.sh.Fenced("w1") && a.sh.Fenced("w2") })
	b.mu.Lock()
	defer b.mu.Unlock()
	if want := []string{stopReasonFenced, stopReasonMove}; !slices.Equal(b.reasons, want) && !slices.Equal(b.reasons, []string{want[1], want[0]}) {
		t.Errorf("stop reasons given to the backend = %q, want %q (in either order)", b.reasons, want)
	}
}
