package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"provideragent/agentdb"
	"provideragent/driver"
	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/lease"
	"provideragent/relay"
)

// rowState is the persisted state of workload id ("" when no row).
func rowState(t *testing.T, a *Agent, id string) string {
	t.Helper()
	r, err := a.data.tables.Workload(context.Background(), id)
	if errors.Is(err, agentdb.ErrNotFound) {
		return ""
	}
	if err != nil {
		t.Fatalf("read row %s: %v", id, err)
	}
	return r.State
}

// claimInput is the decoded input of claimer's active claim of w at epoch,
// with a cursor token reserved and accepted as ingest does.
func claimInput(t *testing.T, a *Agent, now time.Time, claimer *identity.Keys, w string, epoch uint64) input {
	t.Helper()
	ev, err := heartbeat.BuildPromotion(claimer, heartbeat.PromotionParams{WorkloadID: w, At: now, Epoch: epoch, Status: heartbeat.ClaimActive})
	if err != nil {
		t.Fatal(err)
	}
	in, ok := a.decode(context.Background(), now, relay.Received{Relay: stepRelays[0], Event: ev})
	if !ok {
		t.Fatalf("decode(claim of %s at epoch %d) rejected it", w, epoch)
	}
	in.cursorTok, in.hasTok = a.data.cursor.Reserve(int64(ev.CreatedAt)), true
	a.data.cursor.Accept(in.cursorTok)
	return in
}

// TestFailedCommitStopsAndHoldsTheRest (on one agent's machine step):
// while every database write fails, a fencing stop is still
// performed, a start is not, and the inputs' cursor tokens stay open; once
// writes work again the held steps are persisted, the start of a workload
// that was fenced meanwhile never runs, the start of one still held runs,
// and the cursor moves.
func TestFailedCommitStopsAndHoldsTheRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := newStepAgent(t, stepOpts{})
	self := a.me.keys
	standby := newTestKeys(t)
	b := a.work.backend.(*memBackend)
	defer a.work.act.wait()
	t0 := time.Now()
	spec := func(id string) *lease.Spec {
		s := stepSpec(self.PublicKey(), standby.PublicKey())
		s.ID = id
		return &s
	}
	starts := func() int {
		n, _ := b.counts()
		return n
	}

	// w1 runs, persisted as provisioning.
	feedCommit(t, a, t0, input{grant: spec("w1")})
	waitFor(t, 10*time.Second, "w1 running", func() bool { return b.Running("w1") })

	refuseWrites(t, a, true)
	// w2 and w3 are granted (as if from the relays, with cursor tokens)
	// while the disk is full: their starts wait.
	for _, id := range []string{"w2", "w3"} {
		tok := a.data.cursor.Reserve(t0.Unix())
		a.data.cursor.Accept(tok)
		if err := commitInputs(ctx, a, t0, input{grant: spec(id), cursorTok: tok, hasTok: true}); err == nil {
			t.Fatalf("commit(grant %s) with writes failing = nil, want an error", id)
		}
	}
	// The standby's claim of epoch 2 fences w1 and w2 (rule 9).
	s := a.sh.Begin(t0)
	for _, id := range []string{"w1", "w2"} {
		a.feed(s, claimInput(t, a, t0, standby, id, 2))
	}
	if effs := s.Effects(); !hasEffect[lease.StopWorkload](effs) {
		t.Fatalf("feed(claims of epoch 2) = %v, want StopWorkload", effs)
	}
	if err := s.Commit(ctx); err == nil {
		t.Fatalf("commit(fence) with writes failing = nil, want an error")
	}
	waitFor(t, 10*time.Second, "w1 stopped although its step did not persist", func() bool { return !b.Running("w1") })
	if got := rowState(t, a, "w1"); got != string(lease.StateProvisioning) {
		t.Fatalf("persisted w1 = %q, want provisioning (the fencing step did not commit)", got)
	}
	if b.Running("w2") || b.Running("w3") || starts() != 1 {
		t.Fatalf("running w2 %v, w3 %v, starts %d: want no start while its step is not persisted",
			b.Running("w2"), b.Running("w3"), starts())
	}
	if n := a.data.cursor.InFlight(); n != 4 {
		t.Fatalf("cursor tokens in flight = %d, want 4 (their steps did not persist)", n)
	}
	if err := a.saveMachine(ctx); !errors.Is(err, driver.ErrUnpersisted) {
		t.Fatalf("saveMachine() with held steps and writes failing = %v, want ErrUnpersisted", err)
	}

	refuseWrites(t, a, false)
	if err := a.sh.Driver().Begin(t0.Add(2 * driver.DefaultConfig().RetryEvery)).Commit(ctx); err != nil {
		t.Fatalf("commit(retry) once writable = %v, want nil", err)
	}
	for id, want := range map[string]lease.State{"w1": lease.StateFenced, "w2": lease.StateFenced, "w3": lease.StateProvisioning} {
		if got := rowState(t, a, id); got != string(want) {
			t.Errorf("persisted %s = %q, want %s", id, got, want)
		}
	}
	waitFor(t, 10*time.Second, "w3 started once its grant persisted", func() bool { return b.Running("w3") })
	a.work.act.wait()
	if b.Running("w2") || starts() != 2 {
		t.Fatalf("running w2 %v, starts %d: want w2 (fenced while its start was held) never started, 2 starts (w1, w3)",
			b.Running("w2"), starts())
	}
	if n := a.data.cursor.InFlight(); n != 0 {
		t.Fatalf("cursor tokens in flight after the retry = %d, want 0", n)
	}
	if got := a.data.cursor.Cursor(); got < t0.Unix() {
		t.Fatalf("cursor after the retry = %d, want >= %d", got, t0.Unix())
	}
}

// TestFutureCursorHealedAtStart: a persisted cursor in the year 2100 (as a
// forged future-dated event could once leave it) is
// clamped to now when the agent starts, in memory and in the database, so
// the subscriptions ask for events again.
func TestFutureCursorHealedAtStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "poisoned.db")
	db, err := openTestDB(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	st, err := agentdb.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	const y2100 = 4102444800
	if _, err := st.SaveCursor(ctx, nil, cursorKey, y2100); err != nil {
		t.Fatal(err)
	}
	db.Close()

	a := newStepAgent(t, stepOpts{dbPath: dbPath})
	now := time.Now().Unix()
	if got := a.data.cursor.Cursor(); got > now {
		t.Fatalf("cursor after start = %d, want <= now %d", got, now)
	}
	if got := int64(a.since()); got > now {
		t.Fatalf("since() = %d, want <= now %d", got, now)
	}
	if got, err := a.data.tables.Cursor(ctx, cursorKey); err != nil || got > now {
		t.Fatalf("persisted cursor after start = %d, %v, want <= now %d", got, err, now)
	}
}

// TestShutdownCommitsTheBacklog: a step of more than commitBatch workloads
// whose first batch failed to commit (the context ended under it, or the
// disk was full) leaves a held step and a backlog. The shutdown save must
// retry the held step at once and commit the whole backlog; it used to
// return ErrUnpersisted because the held step's retry time lay ahead.
func TestShutdownCommitsTheBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := newStepAgent(t, stepOpts{})
	self := a.me.keys
	standby := newTestKeys(t)
	defer a.work.act.wait()
	t0 := time.Now()
	n := 2*commitBatch + 10
	var ins []input
	for i := range n {
		s := stepSpec(self.PublicKey(), standby.PublicKey())
		s.ID = fmt.Sprintf("w%04d", i)
		ins = append(ins, input{grant: &s})
	}
	refuseWrites(t, a, true)
	if err := commitInputs(ctx, a, t0, ins...); err == nil {
		t.Fatalf("commit(%d grants) with writes failing = nil, want an error", n)
	}
	if !a.sh.Driver().Backlogged() || !a.sh.Driver().Held() {
		t.Fatalf("backlog %v, held steps %v: want both", a.sh.Driver().Backlogged(), a.sh.Driver().Held())
	}
	refuseWrites(t, a, false)
	if err := a.sh.Driver().Close(ctx, a.now(), a.data.cursor.Cursor()); err != nil {
		t.Fatalf("shutdown save = %v, want nil (the held step retried and the backlog committed)", err)
	}
	if a.sh.Driver().Backlogged() || a.sh.Driver().Held() {
		t.Fatalf("after the shutdown save: backlog %d, held steps %v; want neither", a.sh.Driver().BacklogLen(), a.sh.Driver().Held())
	}
	for _, id := range []string{"w0000", fmt.Sprintf("w%04d", n-1)} {
		if got := rowState(t, a, id); got == "" {
			t.Errorf("persisted %s: no row, want one", id)
		}
	}
}
