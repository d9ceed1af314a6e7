package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/agent/relay"
	"provideragent/agent/store"
	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/lease"
)

// rowState is the persisted state of workload id ("" when no row).
func rowState(t *testing.T, a *Agent, id string) string {
	t.Helper()
	r, err := a.st.Workload(context.Background(), id)
	if errors.Is(err, store.ErrNotFound) {
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
	in.cursorTok, in.hasTok = a.cursor.Reserve(int64(ev.CreatedAt)), true
	a.cursor.Accept(in.cursorTok)
	return in
}

// TestFailedCommitStopsAndHoldsTheRest (issue 16 item 2, on one agent's
// machine step): while every database write fails, a fencing stop is still
// performed, a start is not, and the inputs' cursor tokens stay open; once
// writes work again the held steps are persisted, the start of a workload
// that was fenced meanwhile never runs, the start of one still held runs,
// and the cursor moves.
func TestFailedCommitStopsAndHoldsTheRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := newStepAgent(t, stepOpts{})
	self := a.keys
	standby := newTestKeys(t)
	b := a.backend.(*memBackend)
	defer a.act.wait()
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
	if err := a.commit(ctx, t0, feedInput(a, t0, input{grant: spec("w1")}), nil); err != nil {
		t.Fatalf("commit(grant w1) = %v, want nil", err)
	}
	waitFor(t, 10*time.Second, "w1 running", func() bool { return b.Running("w1") })

	refuseWrites(t, a, true)
	// w2 and w3 are granted (as if from the relays, with cursor tokens)
	// while the disk is full: their starts wait.
	for _, id := range []string{"w2", "w3"} {
		tok := a.cursor.Reserve(t0.Unix())
		a.cursor.Accept(tok)
		effs, toks := a.feed(t0, input{grant: spec(id), cursorTok: tok, hasTok: true}, nil, nil)
		if err := a.commitStep(ctx, t0, effs, toks, nil, true); err == nil {
			t.Fatalf("commitStep(grant %s) with writes failing = nil, want an error", id)
		}
	}
	// The standby's claim of epoch 2 fences w1 and w2 (rule 9).
	var toks []store.Token
	var effs []lease.Effect
	for _, id := range []string{"w1", "w2"} {
		effs, toks = a.feed(t0, claimInput(t, a, t0, standby, id, 2), effs, toks)
	}
	if !hasEffect[lease.StopWorkload](effs) {
		t.Fatalf("feed(claims of epoch 2) = %v, want StopWorkload", effs)
	}
	if err := a.commitStep(ctx, t0, effs, toks, nil, true); err == nil {
		t.Fatalf("commitStep(fence) with writes failing = nil, want an error")
	}
	waitFor(t, 10*time.Second, "w1 stopped although its step did not persist", func() bool { return !b.Running("w1") })
	if got := rowState(t, a, "w1"); got != string(lease.StateProvisioning) {
		t.Fatalf("persisted w1 = %q, want provisioning (the fencing step did not commit)", got)
	}
	if b.Running("w2") || b.Running("w3") || starts() != 1 {
		t.Fatalf("running w2 %v, w3 %v, starts %d: want no start while its step is not persisted",
			b.Running("w2"), b.Running("w3"), starts())
	}
	if n := a.cursor.InFlight(); n != 4 {
		t.Fatalf("cursor tokens in flight = %d, want 4 (their steps did not persist)", n)
	}
	if err := a.saveMeta(ctx); !errors.Is(err, ErrUnpersisted) {
		t.Fatalf("saveMeta() with held steps and writes failing = %v, want ErrUnpersisted", err)
	}

	refuseWrites(t, a, false)
	if err := a.commitStep(ctx, t0.Add(2*commitRetryEvery), nil, nil, nil, true); err != nil {
		t.Fatalf("commitStep(retry) once writable = %v, want nil", err)
	}
	for id, want := range map[string]lease.State{"w1": lease.StateFenced, "w2": lease.StateFenced, "w3": lease.StateProvisioning} {
		if got := rowState(t, a, id); got != string(want) {
			t.Errorf("persisted %s = %q, want %s", id, got, want)
		}
	}
	waitFor(t, 10*time.Second, "w3 started once its grant persisted", func() bool { return b.Running("w3") })
	a.act.wait()
	if b.Running("w2") || starts() != 2 {
		t.Fatalf("running w2 %v, starts %d: want w2 (fenced while its start was held) never started, 2 starts (w1, w3)",
			b.Running("w2"), starts())
	}
	if n := a.cursor.InFlight(); n != 0 {
		t.Fatalf("cursor tokens in flight after the retry = %d, want 0", n)
	}
	if got := a.cursor.Cursor(); got < t0.Unix() {
		t.Fatalf("cursor after the retry = %d, want >= %d", got, t0.Unix())
	}
}

// TestSaveMetaMarksRowsSavedAfterCommit: a workload row whose save failed is
// written by the next save that succeeds (issue 16 item 2: saveMeta marked
// rows saved before its commit, so a failed save lost them for good).
func TestSaveMetaMarksRowsSavedAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := newStepAgent(t, stepOpts{})
	self := a.keys
	spec := stepSpec(self.PublicKey(), newTestKeys(t).PublicKey())
	if _, err := a.m.Track(time.Now(), spec); err != nil { // in memory only
		t.Fatal(err)
	}
	// The grant changed w1 as an input without effects would: saveMeta
	// writes what inputs marked, not the whole table (issue 10 item 5).
	a.commits.dirty.add(spec.ID)
	refuseWrites(t, a, true)
	if err := a.saveMeta(ctx); err == nil {
		t.Fatalf("saveMeta() with writes failing = nil, want an error")
	}
	refuseWrites(t, a, false)
	if err := a.saveMeta(ctx); err != nil {
		t.Fatalf("saveMeta() = %v, want nil", err)
	}
	if got := rowState(t, a, "w1"); got != string(lease.StateProvisioning) {
		t.Fatalf("persisted w1 after a failed then a good save = %q, want provisioning", got)
	}
}

// TestFutureCursorHealedAtStart: a persisted cursor in the year 2100 (set
// by a forged future-dated event before issue 16 item 3 was fixed) is
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
	st, err := store.Open(ctx, db)
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
	if got := a.cursor.Cursor(); got > now {
		t.Fatalf("cursor after start = %d, want <= now %d", got, now)
	}
	if got := int64(a.since()); got > now {
		t.Fatalf("since() = %d, want <= now %d", got, now)
	}
	if got, err := a.st.Cursor(ctx, cursorKey); err != nil || got > now {
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
	self := a.keys
	standby := newTestKeys(t)
	defer a.act.wait()
	t0 := time.Now()
	n := 2*commitBatch + 10
	var effs []lease.Effect
	for i := range n {
		s := stepSpec(self.PublicKey(), standby.PublicKey())
		s.ID = fmt.Sprintf("w%04d", i)
		effs, _ = a.feed(t0, input{grant: &s}, effs, nil)
	}
	refuseWrites(t, a, true)
	if err := a.commitStep(ctx, t0, effs, nil, nil, true); err == nil {
		t.Fatalf("commitStep(%d grants) with writes failing = nil, want an error", n)
	}
	if a.commits.bl.empty() || a.commits.pend.empty() {
		t.Fatalf("backlog empty %v, held steps empty %v: want both non-empty", a.commits.bl.empty(), a.commits.pend.empty())
	}
	refuseWrites(t, a, false)
	if err := a.saveMetaRun(ctx, false); err != nil {
		t.Fatalf("shutdown save = %v, want nil (the held step retried and the backlog committed)", err)
	}
	if !a.commits.bl.empty() || !a.commits.pend.empty() {
		t.Fatalf("after the shutdown save: backlog %d, held steps empty %v; want both empty", a.commits.bl.len(), a.commits.pend.empty())
	}
	for _, id := range []string{"w0000", fmt.Sprintf("w%04d", n-1)} {
		if got := rowState(t, a, id); got == "" {
			t.Errorf("persisted %s: no row, want one", id)
		}
	}
}

// A workload both changed (dirty) and watched for rivals is written once by
// the periodic save, and counted once.
func TestSaveMetaWritesARowOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := newStepAgent(t, stepOpts{})
	self := a.keys
	standby := newTestKeys(t)
	defer a.act.wait()
	primary := newTestKeys(t)
	s := stepSpec(primary.PublicKey(), self.PublicKey())
	s.Standbys = append(s.Standbys, standby.PublicKey())
	now := time.Now()
	if err := a.commit(ctx, now, feedInput(a, now, input{grant: &s}), nil); err != nil {
		t.Fatalf("commit(grant) = %v, want nil", err)
	}
	// The other standby's claim: a rival this agent watches.
	if err := a.commit(ctx, now, feedInput(a, now, claimInput(t, a, now, standby, s.ID, 2)), nil); err != nil {
		t.Fatalf("commit(claim) = %v, want nil", err)
	}
	if w, _ := a.m.Workload(s.ID); len(w.Rivals) == 0 {
		t.Fatalf("workload %s has no rivals after another standby's claim: the test needs one", s.ID)
	}
	a.commits.saved[s.ID] = 0 // as if its row changed since
	a.commits.dirty.add(s.ID)
	a.commits.rivalWatch.add(s.ID)
	before := testutil.ToFloat64(a.met.savedRows)
	if err := a.saveMeta(ctx); err != nil {
		t.Fatalf("saveMeta() = %v, want nil", err)
	}
	if got := testutil.ToFloat64(a.met.savedRows) - before; got != 1 {
		t.Fatalf("agent_saved_rows_total grew by %v, want 1 (one row, written once)", got)
	}
}
