package driver_test

import (
	"context"
	"testing"
	"time"

	"provideragent/driver"
	"provideragent/lease"
)

// procs is a driver.Processes whose workers run only when the test says:
// Go keeps the work, Run records the operation and sets the process
// running (a start, a respawn) or not (a stop).
type procs struct {
	works   []func()
	ran     []driver.Op
	running map[string]bool
	during  func(op driver.Op) // called inside Run, before it returns
}

func newProcs() *procs { return &procs{running: map[string]bool{}} }

func (p *procs) Go(work func()) { p.works = append(p.works, work) }

func (p *procs) Run(_ context.Context, op driver.Op) {
	if p.during != nil {
		p.during(op)
	}
	p.ran = append(p.ran, op)
	p.running[op.Workload] = op.Kind != driver.OpStop
}

func (p *procs) Running(id string) bool { return p.running[id] }

// work runs the workers Go was given so far.
func (p *procs) work() {
	ws := p.works
	p.works = nil
	for _, w := range ws {
		w()
	}
}

func (w *world) shell(p driver.Processes, cfg driver.ShellConfig, cursor func() int64) *driver.Shell[time.Time, string] {
	return driver.NewShell(w.d, t0, cfg, driver.ShellDeps{Processes: p, Cursor: cursor})
}

// TestShellStartOpensTheOutbox: nothing leaves the outbox before Start has
// performed the restored machine's stops; the outbox opens even when that
// commit fails (the stops were performed, the rest is held).
func TestShellStartOpensTheOutbox(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	if err := w.grant(0, spec("w1", other, self)); err != nil {
		t.Fatal(err)
	}
	w.open() // a restart: w1, held by another provider, is stopped here first
	w.refuse(true)
	w.log.lines = nil
	sh := w.shell(newProcs(), driver.ShellConfig{}, nil)
	if sh.Release("") {
		t.Fatalf("Release(\"\") before Start = true, want false")
	}
	select {
	case <-sh.Started():
		t.Fatalf("Started closed before Start")
	default:
	}
	if err := sh.Start(ctx, t0.Add(time.Second)); err == nil {
		t.Fatalf("Start with every commit refused = nil, want the commit's error")
	}
	if w.log.index("stop w1") < 0 {
		t.Errorf("Start performed %q, want the restored stop of w1", w.log)
	}
	select {
	case <-sh.Started():
	default:
		t.Fatalf("Started not closed after Start")
	}
	if !sh.Release("") {
		t.Errorf("Release(\"\") after Start = false, want true")
	}
}

// TestShellFenceGate: a revocation of a workload leaves only once no
// operation of it is queued or under way and its process does not run;
// other rows, and other workloads' revocations, are not held back.
func TestShellFenceGate(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	p := newProcs()
	sh := w.shell(p, driver.ShellConfig{}, nil)
	if err := sh.Start(ctx, t0); err != nil {
		t.Fatal(err)
	}
	if got := sh.FenceRecheck(); got != driver.DefaultFenceRecheck {
		t.Errorf("FenceRecheck() = %v, want the default %v", got, driver.DefaultFenceRecheck)
	}
	check := func(when string, pending, fenced bool) {
		t.Helper()
		if got := sh.Pending("w1"); got != pending {
			t.Errorf("%s: Pending(w1) = %v, want %v", when, got, pending)
		}
		if got := sh.Fenced("w1"); got != fenced {
			t.Errorf("%s: Fenced(w1) = %v, want %v", when, got, fenced)
		}
		if got := sh.Release("w1"); got != fenced {
			t.Errorf("%s: Release(w1) = %v, want %v", when, got, fenced)
		}
		if !sh.Release("") || !sh.Release("w2") {
			t.Errorf("%s: Release of another row = false, want true", when)
		}
	}
	check("nothing queued", false, true)
	sh.Enqueue(ctx, driver.Op{Kind: driver.OpStart, Workload: "w1", Epoch: 1})
	check("start queued", true, false)
	p.during = func(driver.Op) { check("start under way", true, false) }
	p.work()
	p.during = nil
	check("running", false, false)
	sh.Enqueue(ctx, driver.Op{Kind: driver.OpStop, Workload: "w1", Epoch: 1})
	check("stop queued", true, false)
	p.work()
	check("stopped", false, true)

	sh = driver.NewShell(w.d, t0, driver.ShellConfig{FenceRecheck: time.Second}, driver.ShellDeps{Processes: p})
	if got := sh.FenceRecheck(); got != time.Second {
		t.Errorf("FenceRecheck() = %v, want the configured 1s", got)
	}
}

// TestShellEnqueueInOrder: a workload's operations are performed in the
// order queued, one at a time, by one worker per busy workload; another
// workload's get a worker of their own, and a workload whose queue ran dry
// gets a new one.
func TestShellEnqueueInOrder(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	p := newProcs()
	sh := w.shell(p, driver.ShellConfig{}, nil)
	sh.Enqueue(ctx, driver.Op{Kind: driver.OpStart, Workload: "w1", Epoch: 1})
	sh.Enqueue(ctx, driver.Op{Kind: driver.OpStop, Workload: "w1", Epoch: 1})
	sh.Enqueue(ctx, driver.Op{Kind: driver.OpRespawn, Workload: "w1", Epoch: 1, Attempt: 2})
	if len(p.works) != 1 {
		t.Fatalf("workers for one workload's 3 operations = %d, want 1", len(p.works))
	}
	sh.Enqueue(ctx, driver.Op{Kind: driver.OpStart, Workload: "w2", Epoch: 1})
	if len(p.works) != 2 {
		t.Fatalf("workers after another workload's operation = %d, want 2", len(p.works))
	}
	p.during = func(op driver.Op) {
		if op.Workload == "w1" && op.Kind == driver.OpStop && op.Epoch == 1 {
			// Queued behind the stop while it runs: performed after it
			// by the same worker.
			sh.Enqueue(ctx, driver.Op{Kind: driver.OpStop, Workload: "w1", Epoch: 2})
		}
	}
	p.work()
	var got []string
	for _, op := range p.ran {
		got = append(got, op.Workload+":"+opName(op))
	}
	want := []string{"w1:start/1", "w1:stop/1", "w1:respawn/1", "w1:stop/2", "w2:start/1"}
	if len(got) != len(want) {
		t.Fatalf("operations performed = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("operations performed = %v, want %v", got, want)
		}
	}
	if len(p.works) != 0 {
		t.Fatalf("workers started while one ran = %d, want 0", len(p.works))
	}
	if sh.Pending("w1") || sh.Pending("w2") {
		t.Errorf("Pending after every operation ran = true, want false")
	}
	sh.Enqueue(ctx, driver.Op{Kind: driver.OpStart, Workload: "w1", Epoch: 3})
	if len(p.works) != 1 {
		t.Errorf("workers for an idle workload's new operation = %d, want 1", len(p.works))
	}
}

func opName(op driver.Op) string {
	names := map[driver.OpKind]string{driver.OpStart: "start", driver.OpStop: "stop", driver.OpRespawn: "respawn"}
	return names[op.Kind] + "/" + string(rune('0'+op.Epoch))
}

// TestShellSaveCadence: the periodic save is due SaveEvery after the shell
// was made and after each save, and writes the world's cursor; Close
// writes it too.
func TestShellSaveCadence(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	cursor := int64(41)
	sh := w.shell(newProcs(), driver.ShellConfig{}, func() int64 { return cursor })
	if saved, err := sh.SaveIfDue(ctx, t0.Add(driver.SaveEvery-time.Nanosecond)); saved || err != nil {
		t.Fatalf("SaveIfDue just before SaveEvery = %v, %v; want no save", saved, err)
	}
	if w.store.Cursor != 0 {
		t.Fatalf("cursor saved early: %d", w.store.Cursor)
	}
	if saved, err := sh.SaveIfDue(ctx, t0.Add(driver.SaveEvery)); !saved || err != nil {
		t.Fatalf("SaveIfDue at SaveEvery = %v, %v; want a save", saved, err)
	}
	if w.store.Cursor != 41 {
		t.Errorf("cursor saved = %d, want 41", w.store.Cursor)
	}
	cursor = 42
	if saved, _ := sh.SaveIfDue(ctx, t0.Add(2*driver.SaveEvery-time.Nanosecond)); saved {
		t.Errorf("SaveIfDue before SaveEvery after the last save: saved, want not")
	}
	if err := sh.Save(ctx, t0.Add(2*driver.SaveEvery+time.Second)); err != nil {
		t.Fatal(err)
	}
	if w.store.Cursor != 42 {
		t.Errorf("cursor saved = %d, want 42", w.store.Cursor)
	}
	if saved, _ := sh.SaveIfDue(ctx, t0.Add(3*driver.SaveEvery)); saved {
		t.Errorf("SaveIfDue less than SaveEvery after Save: saved, want not")
	}
	cursor = 43
	if err := sh.Close(ctx, t0.Add(3*driver.SaveEvery)); err != nil {
		t.Fatal(err)
	}
	if w.store.Cursor != 43 {
		t.Errorf("cursor at Close = %d, want 43", w.store.Cursor)
	}

	w2 := newWorld(t, nil)
	w2.store.Cursor = 7
	sh = w2.shell(newProcs(), driver.ShellConfig{}, nil)
	if err := sh.Save(ctx, t0); err != nil || w2.store.Cursor != 0 {
		t.Errorf("Save without a cursor = %v, cursor %d; want 0 saved", err, w2.store.Cursor)
	}
}

// TestTurnFeed: each input reaches the machine through Feed, its token is
// finished with the turn's commit, a claim read reports the competing
// claims, and claims alone are fed one by one.
func TestTurnFeed(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	sh := w.shell(newProcs(), driver.ShellConfig{}, nil)
	s := spec("w1", self, other)

	tr := sh.Begin(t0)
	tok := driver.Token(7)
	if fed := tr.Feed(driver.Input{Token: &tok, Grant: &s}); fed.Err != nil || fed.Competing != 0 {
		t.Fatalf("Feed(grant) = %+v, want no error", fed)
	}
	bad := s
	bad.ID = ""
	if fed := tr.Feed(driver.Input{Grant: &bad}); fed.Err == nil {
		t.Errorf("Feed(a grant without an id) = no error, want Track's")
	}
	if err := tr.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if st, ok := w.d.Machine().State("w1"); !ok || st != lease.StateProvisioning {
		t.Fatalf("w1 after the granting turn = %v, %v; want provisioning", st, ok)
	}
	if len(w.done) != 1 || w.done[0] != tok {
		t.Errorf("tokens finished = %v, want [7]", w.done)
	}

	// The holder's own heartbeats on M relays make it Live; its process's
	// exit (restart policy never) fails the workload.
	tr = sh.Begin(t0.Add(time.Second))
	for _, r := range []string{"wss://r1.test", "wss://r2.test"} {
		tr.Feed(driver.Input{Heartbeat: &lease.Heartbeat{Provider: self, Relay: r, CreatedAt: t0.Add(time.Second), Listed: true,
			Workloads: []lease.WorkloadEpoch{{ID: "w1", Epoch: 1}}}})
	}
	tr.Tick()
	if err := tr.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := w.d.Machine().State("w1"); st != lease.StateLive {
		t.Fatalf("w1 after its holder's heartbeats on 2 relays = %v, want live", st)
	}
	tr = sh.Begin(t0.Add(2 * time.Second))
	tr.Feed(driver.Input{Exit: &lease.ProcessExit{Workload: "w1", Epoch: 1, Reason: "exit status 1"}})
	// Outcomes of operations of a workload the machine does not track
	// change nothing.
	tr.Feed(driver.Input{Respawn: &lease.RespawnResult{Workload: "w9", Attempt: 1}})
	tr.Feed(driver.Input{Restored: &lease.RestoreResult{Workload: "w9", Epoch: 1, Attempt: 1}})
	if err := tr.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := w.d.Machine().State("w1"); st != lease.StateFailed {
		t.Fatalf("w1 after its process exited (restart never) = %v, want failed", st)
	}

	// A standby's turn: a token alone, then claims with and without a read.
	w2 := newWorld(t, nil)
	sh2 := w2.shell(newProcs(), driver.ShellConfig{}, nil)
	s2 := spec("w2", other, self)
	tr = sh2.Begin(t0)
	tr.Feed(driver.Input{Grant: &s2})
	tr.Feed(driver.Input{Token: &tok})
	third := key("third")
	claims := []lease.PromotionClaim{
		{Workload: "w2", Claimer: third, Epoch: 2, Active: true, Relay: "wss://r1.test", CreatedAt: t0},
		{Workload: "w2", Claimer: third, Epoch: 2, Active: true, Relay: "wss://r2.test", CreatedAt: t0},
		{Workload: "w2", Claimer: key("fourth"), Epoch: 3, Active: true, Relay: "wss://r2.test", CreatedAt: t0},
		// Not competing: withdrawn, our own, below the epoch read, of
		// another workload.
		{Workload: "w2", Claimer: key("fifth"), Epoch: 2, Relay: "wss://r1.test", CreatedAt: t0},
		{Workload: "w2", Claimer: self, Epoch: 2, Active: true, Relay: "wss://r1.test", CreatedAt: t0},
		{Workload: "w2", Claimer: key("sixth"), Epoch: 1, Active: true, Relay: "wss://r1.test", CreatedAt: t0},
		{Workload: "w3", Claimer: key("seventh"), Epoch: 2, Active: true, Relay: "wss://r1.test", CreatedAt: t0},
	}
	if fed := tr.Feed(driver.Input{Claims: claims}); fed.Competing != 0 || fed.Err != nil {
		t.Errorf("Feed(claims alone) = %+v, want nothing to report", fed)
	}
	fed := tr.Feed(driver.Input{Claims: claims, ClaimRead: &lease.ClaimRead{Workload: "w2", Epoch: 2}})
	if fed.Competing != 2 {
		t.Errorf("Feed(claim read of 2 rivals' active claims at or above its epoch) Competing = %d, want 2", fed.Competing)
	}
	if err := tr.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if len(w2.done) != 1 {
		t.Errorf("tokens finished = %v, want one", w2.done)
	}

	// A revocation and a claim's acknowledgement reach the machine too
	// (here they change nothing: the standby has not heard its holder).
	tr = sh2.Begin(t0.Add(time.Second))
	tr.Feed(driver.Input{Revocation: &lease.Revocation{Workload: "w2", Signer: other, Epoch: 1, Successor: self,
		Standbys: []string{self}, CreatedAt: t0.Add(time.Second)}})
	tr.Feed(driver.Input{ClaimAck: &lease.ClaimAck{Workload: "w2", Epoch: 2, Accepted: 3}})
	if err := tr.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTurnMarkEndsTheSync: after a restart the machine awaits relay sync;
// the MarkSynced that completes it reports it once, and other marks never
// do.
func TestTurnMarkEndsTheSync(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	if err := w.grant(0, spec("w1", self, other)); err != nil {
		t.Fatal(err)
	}
	if err := w.d.Save(ctx, t0, 0); err != nil {
		t.Fatal(err)
	}
	w.open()
	sh := w.shell(newProcs(), driver.ShellConfig{}, nil)
	if err := sh.Start(ctx, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if !w.d.Machine().AwaitingSync() {
		t.Fatalf("a restored machine does not await relay sync")
	}
	now := t0.Add(2 * time.Second)
	tr := sh.Begin(now)
	if tr.Mark(driver.Mark{Kind: driver.MarkGap, Relay: "wss://r1.test"}) {
		t.Errorf("Mark(gap) = synced, want not")
	}
	if tr.Mark(driver.Mark{Kind: driver.MarkOwnBeat, Relay: "wss://r1.test", Created: now, Received: now}) {
		t.Errorf("Mark(own beat) = synced, want not")
	}
	var synced []bool
	for _, r := range []string{"wss://r1.test", "wss://r2.test", "wss://r3.test"} {
		synced = append(synced, tr.Mark(driver.Mark{Kind: driver.MarkSynced, Relay: r}))
	}
	want := []bool{false, true, false} // M = 2
	for i := range want {
		if synced[i] != want[i] {
			t.Fatalf("Mark(synced) on r1, r2, r3 = %v, want %v", synced, want)
		}
	}
}
