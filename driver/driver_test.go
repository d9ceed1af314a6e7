package driver_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"provideragent/driver"
	"provideragent/driver/drivertest"
	"provideragent/lease"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The tests' seam types: an outbox row carries its event's created_at, and
// a step's own rows are a string.
type (
	testDriver = driver.Driver[time.Time, string]
	batch      = driver.Batch[time.Time, string]
	memStore   = drivertest.MemStore[time.Time, string]
)

func key(name string) string { return fmt.Sprintf("%064x", name) }

var (
	self  = key("self")
	other = key("other")
)

func leaseConfig() lease.Config {
	c := lease.DefaultConfig()
	c.Relays = []string{"wss://r1.test", "wss://r2.test", "wss://r3.test"}
	return c
}

// spec is a warm-standby lease of id held by primary, with standby.
func spec(id, primary, standby string) lease.Spec {
	return lease.Spec{ID: id, Primary: primary, Standbys: []string{standby}, Replication: lease.ReplicationWarmStandby,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever}, Epoch: 1, CreatedAt: t0}
}

// log records, in order, what the driver did: performed effects and
// commits ("commit" for one that wrote, "refused" for one that did not).
type log struct{ lines []string }

func (l *log) add(s string) { l.lines = append(l.lines, s) }

func (l *log) String() string { return strings.Join(l.lines, "\n") }

func (l *log) index(prefix string) int {
	for i, s := range l.lines {
		if strings.HasPrefix(s, prefix) {
			return i
		}
	}
	return -1
}

type recPerformer struct{ log *log }

func (p recPerformer) Perform(e lease.Effect, at time.Time) {
	switch e := e.(type) {
	case lease.StartWorkload:
		p.log.add("start " + e.ID)
	case lease.StopWorkload:
		p.log.add("stop " + e.ID)
	case lease.PublishClaim:
		p.log.add(fmt.Sprintf("claim %s at %d", e.ID, at.Unix()))
	case lease.PublishRevocation, lease.WithdrawClaim, lease.AnnouncePromotion:
		p.log.add("queued " + e.String())
	}
}

type recOutbox struct{}

func (recOutbox) Build(jobs []driver.OutboxJob) []driver.OutboxResult[time.Time] {
	out := make([]driver.OutboxResult[time.Time], len(jobs))
	for i, j := range jobs {
		out[i].Row = driver.OutboxRow[time.Time]{Key: fmt.Sprintf("%T:%s:%d", j.Effect, j.Effect.Workload(), j.At.Unix()), Payload: j.At}
	}
	return out
}

type world struct {
	t     *testing.T
	log   *log
	store *memStore
	d     *testDriver
	done  []driver.Token
}

func newWorld(t *testing.T, store *memStore) *world {
	t.Helper()
	w := &world{t: t, log: &log{}, store: store}
	if store == nil {
		w.store = &memStore{}
	}
	w.store.Wrote = func(*batch) { w.log.add("commit") }
	w.open()
	return w
}

func (w *world) open() {
	w.t.Helper()
	d, err := driver.Open(context.Background(), t0, driver.Config{CommitBatch: 4}, leaseConfig(), self, driver.Deps[time.Time, string]{
		Store: w.store, Outbox: recOutbox{}, Performer: recPerformer{w.log},
		Finished: func(toks []driver.Token) { w.done = append(w.done, toks...) },
	})
	if err != nil {
		w.t.Fatalf("driver.Open() = %v", err)
	}
	w.d = d
}

// refuse makes every commit fail (and records the refusal) while on.
func (w *world) refuse(on bool) {
	if !on {
		w.store.Refuse = nil
		return
	}
	w.store.Refuse = func(*batch, time.Duration) error {
		w.log.add("refused")
		return errors.New("disk full")
	}
}

func (w *world) grant(at time.Duration, s lease.Spec, toks ...driver.Token) error {
	w.t.Helper()
	st := w.d.Begin(t0.Add(at))
	if err := st.Grant(s); err != nil {
		w.t.Fatalf("Grant(%s) = %v", s.ID, err)
	}
	for _, tok := range toks {
		st.Token(tok)
	}
	return st.Commit(context.Background())
}

// claim is other's active claim of id at epoch 2: it fences a copy held
// here (rule 9).
func claim(id string) lease.PromotionClaim {
	return lease.PromotionClaim{Workload: id, Claimer: other, Epoch: 2, Active: true, CreatedAt: t0}
}

// TestStopsBeforeTheCommit: a step's stops are performed before its commit
// begins (fencing never waits for the database, and a commit that stalls or
// fails does not delay it), its starts only after the commit wrote.
func TestStopsBeforeTheCommit(t *testing.T) {
	w := newWorld(t, nil)
	if err := w.grant(0, spec("w1", self, other)); err != nil {
		t.Fatal(err)
	}
	if got := w.log.String(); got != "commit\nstart w1" {
		t.Fatalf("grant: %q, want the commit, then the start", got)
	}
	w.log.lines = nil
	stopped := false
	w.store.Refuse = func(*batch, time.Duration) error {
		// Observed while the commit is under way.
		stopped = w.log.index("stop w1") >= 0
		return nil
	}
	st := w.d.Begin(t0.Add(time.Second))
	st.Claim(claim("w1"))
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !stopped {
		t.Fatalf("the fence's stop was not performed when its commit began: %q", w.log)
	}

	// A commit that fails: the stop still happens, the start does not.
	w.log.lines = nil
	w.refuse(true)
	if err := w.grant(2*time.Second, spec("w2", self, other)); err == nil {
		t.Fatal("commit with writes refused = nil, want an error")
	}
	st = w.d.Begin(t0.Add(3 * time.Second))
	st.Claim(claim("w2"))
	_ = st.Commit(context.Background())
	if i := w.log.index("stop w2"); i < 0 || w.log.index("start w2") >= 0 {
		t.Fatalf("with writes refused: %q, want w2 stopped and never started", w.log)
	}
}

// TestHeldStepsAreRederived: steps whose commit failed are held; once a
// commit succeeds they are persisted and what they still ask for is
// performed from the machine's state then: the start of a workload fenced
// meanwhile never runs, the start of one still held does, and the inputs'
// tokens finish only then.
func TestHeldStepsAreRederived(t *testing.T) {
	w := newWorld(t, nil)
	w.refuse(true)
	if err := w.grant(0, spec("w1", self, other), 1); !errors.Is(err, driver.ErrUnpersisted) && err == nil {
		t.Fatalf("grant with writes refused = %v, want an error", err)
	}
	if err := w.grant(time.Second, spec("w2", self, other), 2); err == nil {
		t.Fatalf("grant with writes refused = nil, want an error")
	}
	st := w.d.Begin(t0.Add(2 * time.Second))
	st.Claim(claim("w1"))
	_ = st.Commit(context.Background())
	if !w.d.Held() || len(w.done) != 0 || w.log.index("start") >= 0 {
		t.Fatalf("held %v, tokens done %v, log %q: want held, none done, nothing started", w.d.Held(), w.done, w.log)
	}
	if err := w.d.Save(context.Background(), t0.Add(3*time.Second), 0); !errors.Is(err, driver.ErrUnpersisted) {
		t.Fatalf("Save() with held steps and writes refused = %v, want ErrUnpersisted", err)
	}
	w.refuse(false)
	w.log.lines = nil
	if err := w.d.Begin(t0.Add(4 * time.Second)).Commit(context.Background()); err != nil {
		t.Fatalf("retry once writable = %v, want nil", err)
	}
	if got := w.log.String(); got != "commit\nstart w2" {
		t.Fatalf("after the retry: %q, want one commit, then only w2's start (w1 was fenced meanwhile)", got)
	}
	if w.store.State("w1") != lease.StateFenced || w.store.State("w2") != lease.StateProvisioning {
		t.Fatalf("rows w1 %q, w2 %q, want fenced and provisioning", w.store.State("w1"), w.store.State("w2"))
	}
	if len(w.done) != 2 || w.d.Held() {
		t.Fatalf("tokens done %v, held %v: want 2 done, nothing held", w.done, w.d.Held())
	}
}

// TestRetriesNeverStall: a retry of held steps waits only ProbeWait for the
// database, and is attempted at most once per RetryEvery by steps without
// new effects, so a database that stays busy costs the caller almost
// nothing per turn.
func TestRetriesNeverStall(t *testing.T) {
	w := newWorld(t, nil)
	cfg := driver.DefaultConfig()
	var waits []time.Duration
	w.store.Refuse = func(_ *batch, wait time.Duration) error {
		waits = append(waits, wait)
		return errors.New("database is locked")
	}
	_ = w.grant(0, spec("w1", self, other))
	for i := 1; i <= 20; i++ { // a turn every 100 ms for 2 s
		_ = w.d.Begin(t0.Add(time.Duration(i) * 100 * time.Millisecond)).Commit(context.Background())
	}
	if len(waits) < 2 || waits[0] != cfg.CommitWait {
		t.Fatalf("commit waits %v, want the first at CommitWait %v and retries", waits, cfg.CommitWait)
	}
	for _, wait := range waits[1:] {
		if wait != cfg.ProbeWait {
			t.Fatalf("retry waits %v, want ProbeWait %v", waits[1:], cfg.ProbeWait)
		}
	}
	if len(waits) > 3 {
		t.Fatalf("%d commit attempts in 2 s of turns, want at most one a second (RetryEvery %v)", len(waits), cfg.RetryEvery)
	}
}

// TestBigStepsAreCommittedInPieces: a step concerning more than
// CommitBatch workloads commits the first batch at once and the rest one
// batch per DrainBacklog; its token finishes with its last piece.
func TestBigStepsAreCommittedInPieces(t *testing.T) {
	w := newWorld(t, nil) // CommitBatch 4
	st := w.d.Begin(t0)
	for i := range 10 {
		if err := st.Grant(spec(fmt.Sprintf("w%d", i), self, other)); err != nil {
			t.Fatal(err)
		}
	}
	st.Token(7)
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w.d.BacklogLen() != 6 || len(w.store.Rows) != 4 || len(w.done) != 0 {
		t.Fatalf("after the step: backlog %d, rows %d, tokens %v; want 6, 4, none", w.d.BacklogLen(), len(w.store.Rows), w.done)
	}
	for w.d.Backlogged() {
		if err := w.d.DrainBacklog(context.Background(), t0); err != nil {
			t.Fatal(err)
		}
	}
	if len(w.store.Rows) != 10 || len(w.done) != 1 || w.log.index("start w9") < 0 {
		t.Fatalf("after the backlog: rows %d, tokens %v, log %q; want 10 rows, token 7, w9 started", len(w.store.Rows), w.done, w.log)
	}
}

// TestEveryCommittedWorkloadIsRestored: the first commit writes the
// machine's metadata with the rows, so that a crash at any instant after
// it restores every workload the database holds; rows found without
// metadata (an older agent's database) are restored with empty relay
// tables, never dropped.
func TestEveryCommittedWorkloadIsRestored(t *testing.T) {
	w := newWorld(t, nil)
	var metas int
	w.store.Wrote = func(b *batch) {
		if b.Meta != nil {
			metas++
		}
	}
	if err := w.grant(0, spec("w1", self, other)); err != nil {
		t.Fatal(err)
	}
	if err := w.grant(time.Second, spec("w2", self, other)); err != nil {
		t.Fatal(err)
	}
	if metas != 1 {
		t.Fatalf("commits that wrote the metadata = %d, want exactly the first", metas)
	}
	// A crash now: the next agent opens what was committed.
	restored := newWorld(t, w.store.Clone())
	if restored.d.Machine().Len() != 2 {
		t.Fatalf("restored %d workloads, want 2", restored.d.Machine().Len())
	}
	// Rows without metadata.
	noMeta := w.store.Clone()
	noMeta.Meta = nil
	restored = newWorld(t, noMeta)
	if got := restored.d.Machine().IDs(); len(got) != 2 || restored.d.MetaSaved() {
		t.Fatalf("restored from rows without metadata: %v (metadata %v), want w1 and w2, metadata not yet saved", got, restored.d.MetaSaved())
	}
	if st, _ := restored.d.Machine().State("w1"); st != lease.StateProvisioning {
		t.Fatalf("restored w1 = %s, want provisioning", st)
	}
}

// TestSaveWritesChangedRowsOnce: the periodic save writes the rows that
// inputs changed without an effect (a claim adding a rival), once however
// many sets name them, and only after its commit counts them saved: a save
// that failed leaves them for the next.
func TestSaveWritesChangedRowsOnce(t *testing.T) {
	w := newWorld(t, nil)
	third := key("third")
	s := spec("w1", other, self)
	s.Standbys = append(s.Standbys, third)
	if err := w.grant(0, s); err != nil {
		t.Fatal(err)
	}
	st := w.d.Begin(t0.Add(time.Second))
	st.Claim(lease.PromotionClaim{Workload: "w1", Claimer: third, Epoch: 2, Active: true, CreatedAt: t0})
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rows []int
	w.store.Wrote = func(b *batch) { rows = append(rows, len(b.Workloads)) }
	w.refuse(true)
	if err := w.d.Save(context.Background(), t0.Add(2*time.Second), 0); err == nil {
		t.Fatal("Save() with writes refused = nil, want an error")
	}
	w.refuse(false)
	w.store.Wrote = func(b *batch) { rows = append(rows, len(b.Workloads)) }
	if err := w.d.Save(context.Background(), t0.Add(3*time.Second), 42); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0] != 1 || w.store.Cursor != 42 {
		t.Fatalf("saves wrote rows %v, cursor %d; want one save of one row (after the failed one), cursor 42", rows, w.store.Cursor)
	}
	if snap := w.store.Rows["w1"]; len(snap.Rivals) != 1 {
		t.Fatalf("saved w1 rivals = %v, want the third standby's claim", snap.Rivals)
	}
}

// TestClaimTimesIncrease: every claim event of a workload gets a created_at
// strictly above the last (a withdrawn marker made in its claim's second
// must replace it), committed with its step, so the order holds across a
// restart.
func TestClaimTimesIncrease(t *testing.T) {
	w := newWorld(t, nil)
	if err := w.grant(0, spec("w1", other, self)); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Minute)
	st := w.d.Begin(at)
	st.Revocation(lease.Revocation{Workload: "w1", Signer: other, Epoch: 1, Successor: self, QuorumAt: at})
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	st = w.d.Begin(at.Add(200 * time.Millisecond))
	st.ClaimPublished(lease.ClaimAck{Workload: "w1", Epoch: 2}) // none accepted: withdraw
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := w.store.ClaimTimes["w1"]; got != at.Unix()+1 {
		t.Fatalf("committed claim time of w1 = %d, want %d (the claim at %d, the marker one second later)", got, at.Unix()+1, at.Unix())
	}
	last := w.store.Outbox[len(w.store.Outbox)-1]
	if got := last.Payload.Unix(); got != at.Unix()+1 {
		t.Fatalf("withdrawn marker created at %d, want %d", got, at.Unix()+1)
	}
	// A restarted driver continues above it.
	restarted := newWorld(t, w.store.Clone())
	backoff := 200*time.Millisecond + leaseConfig().ClaimBackoff(1, 0)
	st = restarted.d.Begin(at.Add(backoff))
	st.Tick() // the backoff ended: publish the claim again
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("claim w1 at %d", max(at.Unix()+2, at.Add(backoff).Unix()))
	if restarted.log.index(want) < 0 {
		t.Fatalf("restarted driver: %q, want %q", restarted.log, want)
	}
}

// TestReleaseForgetsAfterTheCommit: a release stops the workload at once,
// deletes its row with the step's commit and forgets it only then; a
// failed commit keeps it tracked.
func TestReleaseForgetsAfterTheCommit(t *testing.T) {
	w := newWorld(t, nil)
	if err := w.grant(0, spec("w1", self, other)); err != nil {
		t.Fatal(err)
	}
	w.refuse(true)
	st := w.d.Begin(t0.Add(time.Second))
	if !st.Release("w1") {
		t.Fatal("Release(w1) = false")
	}
	if err := st.Commit(context.Background()); err == nil {
		t.Fatal("release with writes refused = nil error")
	}
	if _, ok := w.d.Machine().State("w1"); !ok || w.log.index("stop w1") < 0 {
		t.Fatalf("after a failed release: tracked %v, log %q; want still tracked, stopped", ok, w.log)
	}
	w.refuse(false)
	st = w.d.Begin(t0.Add(3 * time.Second))
	st.Release("w1")
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.d.Machine().State("w1"); ok || w.store.State("w1") != "" {
		t.Fatalf("after the release: tracked %v, row %q; want neither", ok, w.store.State("w1"))
	}
}

// TestCloseWaitsForTheDatabase: held steps (their commit found the
// database busy) are committed by Close with CloseWait for the database,
// not ProbeWait: at shutdown a connection held a moment elsewhere must not
// leave the last steps unpersisted.
func TestCloseWaitsForTheDatabase(t *testing.T) {
	w := newWorld(t, nil)
	cfg := driver.DefaultConfig()
	busy := true
	var closeWaits []time.Duration
	closing := false
	w.store.Refuse = func(_ *batch, wait time.Duration) error {
		if closing {
			closeWaits = append(closeWaits, wait)
		}
		if busy && wait < cfg.CloseWait {
			return errors.New("wait for the database connection: context deadline exceeded")
		}
		return nil
	}
	_ = w.grant(0, spec("w1", self, other))
	if !w.d.Held() {
		t.Fatalf("steps not held after a refused commit")
	}
	closing = true
	if err := w.d.Close(context.Background(), t0.Add(time.Second), 0); err != nil {
		t.Fatalf("Close() with the database busy for less than CloseWait = %v, want nil", err)
	}
	if len(closeWaits) == 0 || closeWaits[0] != cfg.CloseWait || w.d.Held() {
		t.Fatalf("Close's commit waits %v, held %v; want CloseWait %v and nothing held", closeWaits, w.d.Held(), cfg.CloseWait)
	}
}
