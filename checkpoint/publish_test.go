package checkpoint_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/checkpoint"
	"provideragent/heartbeat"
	"provideragent/internal/devblossom"
	"provideragent/internal/devblossom/devblossomtest"
	"provideragent/internal/sqlitedb"
	"provideragent/relay"
	"provideragent/uploader"
)

// poolPublisher is the agent's RelayPool.PublishQuorum over relay.Pool.
type poolPublisher struct{ p *relay.Pool }

func (q poolPublisher) PublishQuorum(ctx context.Context, ev *nostr.Event, need int) relay.PublishResult {
	return q.p.PublishQuorum(ctx, *ev, need)
}

// devServer starts a dev-blossom server keeping blobs in memory.
func devServer(t *testing.T) *devblossom.Server {
	t.Helper()
	return devblossomtest.Start(t, devblossom.Options{})
}

// publisher is a's Publisher over the world's relays (M = 2 of 3) and a
// real tile store; holds says whether a still holds the workload.
func (w *world) publisher(holds *atomic.Bool) *checkpoint.Publisher {
	w.t.Helper()
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, filepath.Join(w.t.TempDir(), "tiles.db"), sqlitedb.Options{})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { db.Close() })
	store, err := uploader.NewStore(ctx, db, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	secret := w.aSecret
	return &checkpoint.Publisher{
		Store: store, Relays: poolPublisher{w.pool}, Keys: w.a, Quorum: 2, TileSize: 16,
		Uploader: func(servers []string, k int) (uploader.Uploader, error) {
			cfg := uploader.DefaultConfig()
			cfg.Servers, cfg.MinReplicas, cfg.DisableRetry = servers, k, true
			cfg.RequestTimeout = 2 * time.Second
			return uploader.BuildUploader(cfg, uploader.Deps{Store: store, SecretKey: secret})
		},
		Holds: func(string, uint64) bool { return holds.Load() },
	}
}

// holderPublisher is a's Publisher while a holds every workload.
func (w *world) holderPublisher() *checkpoint.Publisher {
	var holds atomic.Bool
	holds.Store(true)
	return w.publisher(&holds)
}

// write puts a checkpoint into dir as the contract says.
func write(t *testing.T, dir, content string) {
	t.Helper()
	tmp := filepath.Join(dir, "checkpoint.tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, checkpoint.FileName)); err != nil {
		t.Fatal(err)
	}
}

// records reads the checkpoint records of workload from the relays.
func (w *world) records(workload string, epoch uint64) []*heartbeat.CheckpointRecord {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*heartbeat.CheckpointRecord
	seen := map[string]bool{}
	for _, r := range w.pool.Query(ctx, checkpoint.RecordsFilter(workload, epoch, nil, []string{w.a.PublicKey()})) {
		for i := range r.Events {
			ev := &r.Events[i]
			if seen[ev.ID] {
				continue
			}
			seen[ev.ID] = true
			rec, err := heartbeat.DecodeCheckpointRecord(ev)
			if err != nil {
				w.t.Fatalf("a record on %s does not decode: %v", r.Relay, err)
			}
			out = append(out, rec)
		}
	}
	return out
}

// TestPublishThenRestore: a's workload writes two checkpoints at epoch 1;
// each is tiled, stored on both dev-blossom servers (K = 2) and its signed
// record accepted by the relays; the second's seq and created_at rise and
// its parent is the first. b, restoring for epoch 2, gets the second.
func TestPublishThenRestore(t *testing.T) {
	needRoot(t)
	w := newWorld(t)
	s1, s2 := devServer(t), devServer(t)
	var holds atomic.Bool
	holds.Store(true)
	p := w.publisher(&holds)
	dir := t.TempDir()
	job := checkpoint.PublishJob{Workload: "wl-pub", Epoch: 1, Dir: checkpoint.Dir{Path: dir, UID: os.Getuid()},
		Servers: []string{s1.URL(), s2.URL()}, GrantAt: w.grantAt}
	ctx := context.Background()

	write(t, dir, "counter=100 and the rest of the state")
	first, err := p.Publish(ctx, job)
	if err != nil {
		t.Fatalf("Publish = %v", err)
	}
	write(t, dir, "counter=200 and the rest of the state, grown")
	second, err := p.Publish(ctx, job)
	if err != nil {
		t.Fatalf("second Publish = %v", err)
	}
	t.Logf("published %+v", second)
	if second.Seq != first.Seq+1 || !second.CreatedAt.After(first.CreatedAt) || len(second.Servers) != 2 || len(second.Relays) < 2 {
		t.Errorf("second = %+v after %+v, want seq+1, a later created_at, 2 servers, >= 2 relays", second, first)
	}
	// Relays keep one record per epoch: the second (a relay beyond the M
	// that answered may still serve the first for a moment).
	var rec *heartbeat.CheckpointRecord
	for _, r := range w.records("wl-pub", 1) {
		switch r.EventID {
		case second.EventID:
			rec = r
		case first.EventID:
		default:
			t.Errorf("unexpected record %+v", r)
		}
	}
	if rec == nil || rec.Parent != first.EventID || rec.StateURI != second.StateURI {
		t.Fatalf("the second record on the relays = %+v, want it with parent the first", rec)
	}
	if n, err := p.Store.Placed(ctx, "wl-pub", second.Blobs, []string{s1.URL(), s2.URL()}); err != nil || n != 2 {
		t.Errorf("the second checkpoint's blobs are on %d servers (%v), want 2", n, err)
	}
	if ref, err := uploader.ParseBlossomURI(second.StateURI); err != nil || ref.SHA256 != second.Manifest || len(ref.Servers) != 2 || ref.Authors[0] != w.a.PublicKey() {
		t.Errorf("state_uri %q (%v): want the manifest on both servers, by a", second.StateURI, err)
	}
	if last, ok := p.Last("wl-pub"); !ok || last.EventID != second.EventID {
		t.Errorf("Last = %+v, %v; want the second", last, ok)
	}
	// A third checkpoint: the first one's local tiles are pruned, the
	// second's and the third's kept.
	write(t, dir, "counter=300 and something else entirely")
	third, err := p.Publish(ctx, job)
	if err != nil {
		t.Fatalf("third Publish = %v", err)
	}
	tiles, err := p.Store.List(ctx, uploader.Filter{Workload: "wl-pub"})
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for _, sha := range append(append([]string(nil), second.Blobs...), third.Blobs...) {
		kept[sha] = true
	}
	for _, tl := range tiles {
		if !kept[tl.SHA256] {
			t.Errorf("tile %s of an older checkpoint is still stored", tl.SHA256)
		}
	}
	for sha := range kept {
		found := false
		for _, tl := range tiles {
			found = found || tl.SHA256 == sha
		}
		if !found {
			t.Errorf("tile %s of the last two checkpoints was pruned", sha)
		}
	}

	// b's claim for epoch 2 wins now; it restores the second checkpoint
	// from the server still up.
	s1.Shutdown(context.Background())
	w.claimAt = time.Now()
	req := w.request("wl-pub")
	out := restore(t, w.restorer(), req)
	if !out.Result.OK || out.Record == nil || out.Record.EventID != third.EventID {
		t.Fatalf("Restore = %+v, want the third checkpoint", out.Result)
	}
	got, _ := os.ReadFile(filepath.Join(req.Dir.Path, checkpoint.FileName))
	if string(got) != "counter=300 and something else entirely" {
		t.Errorf("restored %q", got)
	}
}

// TestPublishOnlyWhileHolding: a checkpoint written after the holder was
// fenced is stored but never announced (ErrNotHolder, no record); one
// that reaches fewer than K servers is not announced either.
func TestPublishOnlyWhileHolding(t *testing.T) {
	w := newWorld(t)
	up := devServer(t)
	down := devServer(t)
	downURL := down.URL()
	down.Shutdown(context.Background())
	var holds atomic.Bool
	p := w.publisher(&holds)
	dir := t.TempDir()
	write(t, dir, "state after the fence")
	ctx := context.Background()
	job := checkpoint.PublishJob{Workload: "wl-fenced", Epoch: 1, Dir: checkpoint.Dir{Path: dir, UID: -1},
		Servers: []string{up.URL()}, GrantAt: w.grantAt}
	if _, err := p.Publish(ctx, job); !errors.Is(err, checkpoint.ErrNotHolder) {
		t.Fatalf("Publish while not holding = %v, want ErrNotHolder", err)
	}
	holds.Store(true)
	job.Workload = "wl-short"
	job.Servers = []string{up.URL(), downURL}
	if _, err := p.Publish(ctx, job); err == nil {
		t.Fatalf("Publish with K = 2 and one server down = nil, want an error")
	} else {
		t.Logf("K=2, one server down: %v", err)
	}
	job.MinServers = 1
	pub, err := p.Publish(ctx, job)
	if err != nil || len(pub.Servers) != 1 || pub.Servers[0] != up.URL() {
		t.Fatalf("Publish with K = 1 = %+v, %v; want it published naming only the server that holds it", pub, err)
	}
	// A publisher that remembers it (an agent restarted on its ledger)
	// continues the seq and names it as parent.
	again := w.publisher(&holds)
	again.Remember(pub)
	write(t, dir, "state after the restart")
	next, err := again.Publish(ctx, job)
	if err != nil || next.Seq != pub.Seq+1 || !next.CreatedAt.After(pub.CreatedAt) {
		t.Fatalf("Publish after Remember = %+v, %v; want seq %d after %v", next, err, pub.Seq+1, pub.CreatedAt)
	}
	// (PublishQuorum returns once M = 2 relays took it: the third may
	// still serve the one before.)
	found := false
	for _, r := range w.records("wl-short", 1) {
		if r.EventID == next.EventID {
			found = true
			if r.Parent != pub.EventID {
				t.Errorf("record after the restart has parent %s, want %s", r.Parent, pub.EventID)
			}
		}
	}
	if !found {
		t.Errorf("the record published after the restart is on no relay")
	}
	for _, id := range []string{"wl-fenced"} {
		if recs := w.records(id, 1); len(recs) != 0 {
			t.Errorf("records of %s on the relays: %+v, want none", id, recs)
		}
	}
}

// TestRecordsNeverDatedAfterTheClock: checkpoints published back to back
// within one second get rising created_at without running ahead of the
// clock: each publish waits for the second its record is dated (the
// clock here moves only by those waits); a move's final one waits for
// nothing and is at most a second ahead.
func TestRecordsNeverDatedAfterTheClock(t *testing.T) {
	w := newWorld(t)
	srv := devServer(t)
	p := w.holderPublisher()
	clock := waitClock{now: time.Now().Truncate(time.Second).Add(100 * time.Millisecond)}
	clock.drive(p)
	dir := t.TempDir()
	job := checkpoint.PublishJob{Workload: "wl-fast", Epoch: 1, Dir: checkpoint.Dir{Path: dir, UID: -1},
		Servers: []string{srv.URL()}, GrantAt: w.grantAt}
	var prev checkpoint.Published
	for i := range 5 {
		write(t, dir, fmt.Sprintf("state %d", i))
		pub, err := p.Publish(context.Background(), job)
		if err != nil {
			t.Fatalf("Publish #%d = %v", i, err)
		}
		if pub.CreatedAt.After(clock.now) || (i > 0 && !pub.CreatedAt.After(prev.CreatedAt)) {
			t.Errorf("record #%d dated %v with the clock at %v after %v: want rising and never after the clock",
				i, pub.CreatedAt.Format(time.StampMilli), clock.now.Format(time.StampMilli), prev.CreatedAt.Format(time.StampMilli))
		}
		prev = pub
	}
	if want := 4*time.Second - 100*time.Millisecond; clock.slept != want {
		t.Errorf("the publishes waited %v for the clock, want %v (each record in a second of its own)", clock.slept, want)
	}
	// A planned move's final checkpoint does not wait: its record may be
	// dated up to a second ahead.
	job.Final = true
	write(t, dir, "the final state")
	slept := clock.slept
	final, err := p.Publish(context.Background(), job)
	if err != nil || clock.slept != slept || !final.CreatedAt.After(prev.CreatedAt) || final.CreatedAt.After(clock.now.Add(time.Second)) {
		t.Errorf("final Publish = dated %v with the clock at %v, waited %v, %v; want no wait, after the previous record and at most a second ahead",
			final.CreatedAt.Format(time.StampMilli), clock.now.Format(time.StampMilli), clock.slept-slept, err)
	}
}

// waitClock is a Publisher's clock that only its waits for a record's
// second move on: records a second apart without sleeping.
type waitClock struct {
	now   time.Time
	slept time.Duration
}

// drive makes c p's clock.
func (c *waitClock) drive(p *checkpoint.Publisher) {
	p.Now = func() time.Time { return c.now }
	p.Sleep = func(_ context.Context, d time.Duration) error { c.now, c.slept = c.now.Add(d), c.slept+d; return nil }
}
