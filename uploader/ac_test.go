package uploader_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/internal/sqlitedb"
	"provideragent/uploader"
	"provideragent/uploader/uploadertest"
)

// retryFixture is a RetryUploader around a scriptedInner on a real store.
type retryFixture struct {
	store   *uploader.Store
	clock   *fakeClock
	inner   *scriptedInner
	logs    *logRecorder
	metrics *uploader.Metrics
	reg     *prometheus.Registry
	retry   *uploader.RetryUploader
	tiles   []uploader.Tile
}

func newRetryFixture(t *testing.T, cfg uploader.Config, nTiles int, reject func(call int, t uploader.Tile) bool) *retryFixture {
	t.Helper()
	f := &retryFixture{clock: newFakeClock(), logs: &logRecorder{}, reg: prometheus.NewRegistry()}
	f.store = newStore(t, f.clock)
	f.tiles = addTiles(t, f.store, "w1", nTiles, 64)
	f.inner = &scriptedInner{store: f.store, reject: reject}
	m, err := uploader.NewMetrics(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	f.metrics = m
	r, err := uploader.NewRetryUploader(f.inner, cfg, uploader.Deps{
		Store: f.store, Clock: f.clock, Logger: slog.New(f.logs), Metrics: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.retry = r
	return f
}

func idsOf(ts []uploader.Tile) []int64 {
	var out []int64
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

func TestAC01_SuccessPassesThrough(t *testing.T) {
	f := newRetryFixture(t, uploader.DefaultConfig(), 10, nil)
	ctx := context.Background()
	got, err := f.retry.UploadPending(ctx, uploader.Request{Workload: "w1"})
	if err != nil {
		t.Fatalf("UploadPending = %v, want nil error", err)
	}
	// The bare inner on a fresh copy of the same situation gives the report
	// the decorator must pass through unchanged.
	g := newRetryFixture(t, uploader.DefaultConfig(), 10, nil)
	want, err := g.inner.UploadPending(ctx, uploader.Request{Workload: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("UploadPending = %+v, want inner's report %+v", got, want)
	}
	if s := f.clock.Sleeps(); len(s) != 0 {
		t.Errorf("Clock.Sleep calls = %v, want none", s)
	}
	for _, tile := range f.tiles {
		if n := attempts(t, f.store, tile.ID); n != 0 {
			t.Errorf("upload_attempts(%d) = %d, want 0 (no increments)", tile.ID, n)
		}
	}
	if f.inner.Calls() != 1 {
		t.Errorf("inner calls = %d, want 1", f.inner.Calls())
	}
}

func TestAC02_PartialRetriesThenSucceeds(t *testing.T) {
	var rejected []int64
	f := newRetryFixture(t, uploader.DefaultConfig(), 10, func(call int, tile uploader.Tile) bool {
		return call == 1 && slices.Contains(rejected, tile.ID)
	})
	rejected = idsOf(f.tiles[2:5])
	rep, err := f.retry.UploadPending(context.Background(), uploader.Request{Workload: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome != uploader.OutcomeSuccess || rep.RetryCount != 1 {
		t.Errorf("UploadPending = outcome %s retry_count %d, want success 1", rep.Outcome, rep.RetryCount)
	}
	if rep.Accepted != 10 || rep.Rejected != 0 {
		t.Errorf("UploadPending accepted/rejected = %d/%d, want 10/0", rep.Accepted, rep.Rejected)
	}
	if s := f.clock.Sleeps(); !reflect.DeepEqual(s, []time.Duration{2 * time.Second}) {
		t.Errorf("Clock.Sleep calls = %v, want [2s]", s)
	}
	for _, tile := range f.tiles {
		want := 0
		if slices.Contains(rejected, tile.ID) {
			want = 1
		}
		if n := attempts(t, f.store, tile.ID); n != want {
			t.Errorf("upload_attempts(%d) = %d, want %d", tile.ID, n, want)
		}
	}
	if f.inner.Calls() != 2 || !reflect.DeepEqual(f.inner.sent[1], rejected) {
		t.Errorf("inner calls = %d, second sent %v, want 2 calls re-sending only %v", f.inner.Calls(), f.inner.sent, rejected)
	}
	if v := testutil.ToFloat64(f.metrics.Retries); v != 1 {
		t.Errorf("uploader_retries_total = %v, want 1", v)
	}
}

func TestAC03_PerTileBudgetGivesUp(t *testing.T) {
	ctx := context.Background()
	var poison, flaky int64
	f := newRetryFixture(t, uploader.DefaultConfig(), 4, func(call int, tile uploader.Tile) bool {
		return tile.ID == poison || (tile.ID == flaky && call == 1)
	})
	poison, flaky = f.tiles[0].ID, f.tiles[1].ID
	for range 4 { // earlier calls already used 4 of the 5 attempts
		if _, err := f.store.IncrementUploadAttempts(ctx, poison); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := f.retry.UploadPending(ctx, uploader.Request{Workload: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if st := status(t, f.store, poison); st != uploader.StatusUploadGiveup {
		t.Errorf("status(poison) = %s, want upload_giveup", st)
	}
	if n := attempts(t, f.store, poison); n != 5 {
		t.Errorf("upload_attempts(poison) = %d, want 5", n)
	}
	audit, err := f.store.Audit(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) != 1 || audit[0].Kind != uploader.AuditGiveup || audit[0].TileID != poison {
		t.Fatalf("Audit = %+v, want exactly one upload.giveup record for tile %d", audit, poison)
	}
	var detail struct {
		TileID   int64  `json:"tile_id"`
		Attempts int    `json:"attempts"`
		Reason   string `json:"last_rejection_reason"`
	}
	if err := json.Unmarshal([]byte(audit[0].Detail), &detail); err != nil {
		t.Fatal(err)
	}
	if detail.TileID != poison || detail.Attempts != 5 || detail.Reason != "scripted rejection" {
		t.Errorf("audit detail = %+v, want {tile %d, attempts 5, scripted rejection}", detail, poison)
	}
	if n := f.logs.countLevel(slog.LevelError); n != 1 {
		t.Errorf("ERROR log lines = %d, want 1", n)
	}
	if v := testutil.ToFloat64(f.metrics.Giveups); v != 1 {
		t.Errorf("uploader_giveups_total = %v, want 1", v)
	}
	for i, sent := range f.inner.sent[1:] {
		if slices.Contains(sent, poison) {
			t.Errorf("retry %d re-sent given-up tile %d: %v", i+1, poison, sent)
		}
	}
	if !reflect.DeepEqual(rep.GaveUp, []int64{poison}) || rep.Outcome != uploader.OutcomePartial {
		t.Errorf("report gave_up %v outcome %s, want [%d] partial", rep.GaveUp, rep.Outcome, poison)
	}
	// A later call neither sends the tile nor audits it again.
	if _, err := f.retry.UploadPending(ctx, uploader.Request{Workload: "w1"}); err != nil {
		t.Fatal(err)
	}
	if audit, _ := f.store.Audit(ctx, 0); len(audit) != 1 {
		t.Errorf("Audit after another call = %d records, want 1", len(audit))
	}
}

func TestAC04_InCallBudgetExhausted(t *testing.T) {
	cfg := uploader.DefaultConfig()
	cfg.MaxPerTileAttempts = 10
	var bad int64
	f := newRetryFixture(t, cfg, 3, func(call int, tile uploader.Tile) bool { return tile.ID == bad })
	bad = f.tiles[1].ID
	rep, err := f.retry.UploadPending(context.Background(), uploader.Request{Workload: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if f.inner.Calls() != 4 {
		t.Errorf("inner calls = %d, want 4 (1 + 3 retries)", f.inner.Calls())
	}
	if s := f.clock.Sleeps(); !reflect.DeepEqual(s, []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second}) {
		t.Errorf("Clock.Sleep calls = %v, want [2s 4s 8s]", s)
	}
	if rep.Outcome != uploader.OutcomePartial || rep.RetryCount != 3 {
		t.Errorf("report = outcome %s retry_count %d, want partial 3", rep.Outcome, rep.RetryCount)
	}
	if want := f.clock.Now().Add(cfg.BackoffCap); !rep.NextRetryAt.Equal(want) {
		t.Errorf("next_retry_at = %v, want now + backoff_cap = %v", rep.NextRetryAt, want)
	}
	if n := attempts(t, f.store, bad); n != 4 {
		t.Errorf("upload_attempts(bad) = %d, want 4", n)
	}
	if rep.Accepted != 2 || rep.Rejected != 1 {
		t.Errorf("report accepted/rejected = %d/%d, want 2/1", rep.Accepted, rep.Rejected)
	}
}

func TestAC05_BackoffCapHonoured(t *testing.T) {
	cfg := uploader.DefaultConfig()
	cfg.MaxInCallRetries = 10
	cfg.BackoffCap = 10 * time.Second
	cfg.MaxPerTileAttempts = 100
	f := newRetryFixture(t, cfg, 1, func(int, uploader.Tile) bool { return true })
	if _, err := f.retry.UploadPending(context.Background(), uploader.Request{}); err != nil {
		t.Fatal(err)
	}
	s := f.clock.Sleeps()
	if len(s) != 10 || s[5] != 10*time.Second {
		t.Fatalf("Clock.Sleep calls = %v, want 10 sleeps with the 6th = 10s", s)
	}
	for i, d := range s {
		if d > cfg.BackoffCap {
			t.Errorf("sleep %d = %v, want <= cap %v", i+1, d, cfg.BackoffCap)
		}
	}
	// The pure function behind it.
	for _, tc := range []struct {
		retry int
		want  time.Duration
	}{{1, 2 * time.Second}, {2, 4 * time.Second}, {3, 8 * time.Second}, {4, 10 * time.Second}, {6, 10 * time.Second}, {1000, 10 * time.Second}} {
		if got := cfg.Backoff().Delay(tc.retry-1, 0); got != tc.want {
			t.Errorf("Backoff(%d) = %v, want %v", tc.retry, got, tc.want)
		}
	}
}

func TestAC06_StatusUploadGiveupExposed(t *testing.T) {
	for _, st := range []uploader.Status{uploader.StatusPending, uploader.StatusTrusted, uploader.StatusRejected, uploader.StatusUploadGiveup, uploader.StatusUploaded} {
		if !st.Valid() || !slices.Contains(uploader.Statuses, st) {
			t.Errorf("Status(%q).Valid() = false or missing from Statuses, want present", st)
		}
	}
	if uploader.StatusUploadGiveup != "upload_giveup" {
		t.Errorf("StatusUploadGiveup = %q, want upload_giveup", uploader.StatusUploadGiveup)
	}
	ctx := context.Background()
	s := newStore(t, nil)
	tiles := addTiles(t, s, "w", 1, 8)
	for _, st := range uploader.Statuses {
		if err := s.UpdateStatus(ctx, tiles[0].ID, st); err != nil {
			t.Errorf("UpdateStatus(%s) = %v, want nil", st, err)
		}
	}
	if err := s.UpdateStatus(ctx, tiles[0].ID, "bogus"); !errors.Is(err, uploader.ErrBadStatus) {
		t.Errorf("UpdateStatus(bogus) = %v, want ErrBadStatus", err)
	}
}

func TestAC07_IncrementUploadAttemptsReturnsNewCount(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, nil)
	tiles := addTiles(t, s, "w", 1, 8)
	id := tiles[0].ID
	for range 2 {
		if _, err := s.IncrementUploadAttempts(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.IncrementUploadAttempts(ctx, id); n != 3 || err != nil {
		t.Errorf("IncrementUploadAttempts(at 2) = %d, %v, want 3, nil", n, err)
	}
	if n := attempts(t, s, id); n != 3 {
		t.Errorf("row upload_attempts = %d, want 3", n)
	}
	if _, err := s.IncrementUploadAttempts(ctx, 99999); !errors.Is(err, uploader.ErrNotFound) {
		t.Errorf("IncrementUploadAttempts(missing) = %v, want ErrNotFound", err)
	}
}

// Many goroutines, on two separate connections (as two processes would),
// increment different tiles: every count is exact and no call fails with
// SQLITE_BUSY.
func TestAC07_ConcurrentIncrementsOnDifferentTiles(t *testing.T) {
	ctx := context.Background()
	path := openDB(t)
	s1 := newStoreAt(t, path, nil)
	s2 := newStoreAt(t, path, nil)
	const tilesN, perTile = 40, 10
	tiles := addTiles(t, s1, "w", tilesN, 16)
	var wg sync.WaitGroup
	errs := make(chan error, tilesN*perTile)
	for i, tile := range tiles {
		st := s1
		if i%2 == 1 {
			st = s2
		}
		for range perTile {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := st.IncrementUploadAttempts(ctx, tile.ID); err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("IncrementUploadAttempts = %v, want nil (no SQLITE_BUSY)", err)
	}
	for _, tile := range tiles {
		if n := attempts(t, s1, tile.ID); n != perTile {
			t.Errorf("upload_attempts(%d) = %d, want %d", tile.ID, n, perTile)
		}
	}
}

func TestAC08_Migration0002AddsColumn(t *testing.T) {
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, openDB(t), sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	migs, err := uploader.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(migs) < 2 {
		t.Fatalf("Migrations() = %d migrations, want at least 2", len(migs))
	}
	if err := sqlitedb.Migrate(ctx, db, uploader.Component, migs, 1); err != nil {
		t.Fatal(err)
	}
	if hasColumn(t, db, "upload_attempts") {
		t.Fatal("0001 already has upload_attempts, want it added by 0002")
	}
	for i, sha := range []string{"aa", "bb", "cc"} {
		_, err := db.ExecContext(ctx, `INSERT INTO tiles (workload, sha256, size, content, created_at, updated_at) VALUES ('w', ?, 1, x'00', ?, ?)`,
			sha+strings.Repeat("0", 62), i, i)
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := sqlitedb.Migrate(ctx, db, uploader.Component, migs, 0); err != nil {
		t.Fatal(err)
	}
	var typ string
	var notnull int
	var dflt sql.NullString
	err = db.QueryRowContext(ctx, `SELECT type, "notnull", dflt_value FROM pragma_table_info('tiles') WHERE name = 'upload_attempts'`).Scan(&typ, &notnull, &dflt)
	if err != nil || typ != "INTEGER" || notnull != 1 || dflt.String != "0" {
		t.Fatalf("upload_attempts column = %s notnull=%d default=%v (%v), want INTEGER NOT NULL DEFAULT 0", typ, notnull, dflt, err)
	}
	var sum, n int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(SUM(upload_attempts), -1), COUNT(*) FROM tiles`).Scan(&sum, &n); err != nil || sum != 0 || n != 3 {
		t.Fatalf("after 0002: SUM(upload_attempts), COUNT = %d, %d (%v), want 0, 3", sum, n, err)
	}
	if err := sqlitedb.MigrateDown(ctx, db, uploader.Component, migs, 1); err != nil {
		t.Fatal(err)
	}
	if hasColumn(t, db, "upload_attempts") {
		t.Fatal("after rollback to 0001: upload_attempts still present")
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM tiles`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("after rollback: %d rows (%v), want 3", n, err)
	}
	if err := sqlitedb.MigrateDown(ctx, db, uploader.Component, migs, 0); err != nil {
		t.Fatal(err)
	}
	if err := sqlitedb.Migrate(ctx, db, uploader.Component, migs, 0); err != nil {
		t.Fatalf("re-apply after full rollback = %v, want nil", err)
	}
}

func hasColumn(t *testing.T, db *sql.DB, col string) bool {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM pragma_table_info('tiles') WHERE name = ?`, col).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func TestAC09_DropInForInterface(t *testing.T) {
	var _ uploader.Uploader = (*uploader.RetryUploader)(nil)
	f := newRetryFixture(t, uploader.DefaultConfig(), 1, nil)
	var x any = f.retry
	if _, ok := x.(uploader.Uploader); !ok {
		t.Error("RetryUploader does not implement Uploader")
	}
	var y any = f.retry.Inner()
	if _, ok := y.(uploader.Uploader); !ok {
		t.Error("inner does not implement Uploader")
	}
}

func TestAC10_DisableRetryBypass(t *testing.T) {
	srv := uploadertest.NewServer(t)
	for _, tc := range []struct {
		disable bool
		want    string
	}{{true, "*uploader.BlossomUploader"}, {false, "*uploader.RetryUploader"}} {
		logs := &logRecorder{}
		cfg := uploader.DefaultConfig()
		cfg.Servers = []string{srv.URL}
		cfg.DisableRetry = tc.disable
		u, err := uploader.BuildUploader(cfg, uploader.Deps{Store: newStore(t, nil), SecretKey: newKey(t), Logger: slog.New(logs)})
		if err != nil {
			t.Fatal(err)
		}
		if got := reflect.TypeOf(u).String(); got != tc.want {
			t.Errorf("BuildUploader(disable_retry=%v) = %s, want %s", tc.disable, got, tc.want)
		}
		if got, want := logs.count(slog.LevelInfo, "disabled"), map[bool]int{true: 1, false: 0}[tc.disable]; got != want {
			t.Errorf("BuildUploader(disable_retry=%v): %d INFO lines about the bypass, want %d", tc.disable, got, want)
		}
		if r, ok := u.(*uploader.RetryUploader); ok {
			if _, ok := r.Inner().(*uploader.BlossomUploader); !ok {
				t.Errorf("RetryUploader.Inner() = %T, want *BlossomUploader", r.Inner())
			}
		}
	}
}

func TestAC11_PassThroughMethods(t *testing.T) {
	f := newRetryFixture(t, uploader.DefaultConfig(), 2, nil)
	f.inner.enumerateResult = []uploader.Tile{{ID: 42, Workload: "sentinel"}}
	sentinel := errors.New("not ready")
	f.inner.confirmErr = sentinel
	got, err := f.retry.EnumeratePending(context.Background(), "w1")
	if err != nil || !reflect.DeepEqual(got, f.inner.enumerateResult) || f.inner.enumerateCalls != 1 {
		t.Errorf("EnumeratePending = %v, %v (%d inner calls), want inner's %v, nil (1 call)", got, err, f.inner.enumerateCalls, f.inner.enumerateResult)
	}
	if err := f.retry.ConfirmState(context.Background()); err != sentinel || f.inner.confirmCalls != 1 {
		t.Errorf("ConfirmState = %v (%d inner calls), want inner's error unchanged (1 call)", err, f.inner.confirmCalls)
	}
	if f.inner.Calls() != 0 || len(f.clock.Sleeps()) != 0 {
		t.Errorf("pass-through triggered %d uploads and %d sleeps, want none", f.inner.Calls(), len(f.clock.Sleeps()))
	}
}

func TestAC12_InnerErrorPropagatesWithoutRetry(t *testing.T) {
	for _, call := range []int{1, 2} {
		var first int64
		f := newRetryFixture(t, uploader.DefaultConfig(), 3, func(c int, tile uploader.Tile) bool { return tile.ID == first })
		first = f.tiles[0].ID
		wrapped := errors.Join(uploader.ErrServerUnreachable)
		f.inner.errs = map[int]error{call: wrapped}
		_, err := f.retry.UploadPending(context.Background(), uploader.Request{})
		if !errors.Is(err, uploader.ErrServerUnreachable) {
			t.Errorf("error on call %d: UploadPending = %v, want ErrServerUnreachable", call, err)
		}
		if f.inner.Calls() != call {
			t.Errorf("error on call %d: inner calls = %d, want %d (no retry after the error)", call, f.inner.Calls(), call)
		}
		if wantSleeps := call - 1; len(f.clock.Sleeps()) != wantSleeps {
			t.Errorf("error on call %d: sleeps = %v, want %d", call, f.clock.Sleeps(), wantSleeps)
		}
	}
	// Against a real server that went down: an error, not a partial, and no
	// sleeps or increments.
	srv := uploadertest.NewServer(t)
	store := newStore(t, nil)
	tiles := addTiles(t, store, "w", 3, 32)
	clock := newFakeClock()
	cfg := uploader.DefaultConfig()
	cfg.Servers = []string{srv.URL}
	u, err := uploader.BuildUploader(cfg, uploader.Deps{Store: store, SecretKey: newKey(t), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	srv.Down()
	rep, err := u.UploadPending(context.Background(), uploader.Request{})
	if !errors.Is(err, uploader.ErrServerUnreachable) || rep.Outcome == uploader.OutcomePartial && err == nil {
		t.Errorf("UploadPending(server down) = %s, %v, want ErrServerUnreachable", rep.Outcome, err)
	}
	if len(clock.Sleeps()) != 0 {
		t.Errorf("sleeps with server down = %v, want none", clock.Sleeps())
	}
	for _, tile := range tiles {
		if n := attempts(t, store, tile.ID); n != 0 || status(t, store, tile.ID) != uploader.StatusPending {
			t.Errorf("tile %d after server down: attempts %d status %s, want 0 pending", tile.ID, n, status(t, store, tile.ID))
		}
	}
}

// The C11-IT-05 scenario against a real Blossom server: 50 tiles, 20 rejected
// on the first call (no in-call retry); the operator's second call sends only
// those 20.
func TestAC13_ReinvocationResendsOnlyUnacked(t *testing.T) {
	ctx := context.Background()
	srv := uploadertest.NewServer(t)
	store := newStore(t, nil)
	tiles := addTiles(t, store, "w", 50, 128)
	rejected := map[string]bool{}
	for i, tile := range tiles {
		if i%5 < 2 { // 20 of 50
			rejected[tile.SHA256] = true
			srv.Reject(tile.SHA256, 1, 500, "ingest queue full")
		}
	}
	cfg := uploader.DefaultConfig()
	cfg.Servers = []string{srv.URL}
	cfg.MaxInCallRetries = 0
	clock := newFakeClock()
	u, err := uploader.BuildUploader(cfg, uploader.Deps{Store: store, SecretKey: newKey(t), Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := u.UploadPending(ctx, uploader.Request{Workload: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome != uploader.OutcomePartial || rep.Accepted != 30 || rep.Rejected != 20 {
		t.Fatalf("first call = %s %d/%d, want partial 30 accepted / 20 rejected", rep.Outcome, rep.Accepted, rep.Rejected)
	}
	pending, err := u.EnumeratePending(ctx, "w")
	if err != nil || len(pending) != 20 {
		t.Fatalf("pending after first call = %d (%v), want 20", len(pending), err)
	}
	for _, p := range pending {
		if !rejected[p.SHA256] {
			t.Errorf("pending tile %d was accepted on the first call", p.ID)
		}
	}
	clock.Sleep(ctx, 5*time.Minute) // the operator comes back later
	rep, err = u.UploadPending(ctx, uploader.Request{Workload: "w"})
	if err != nil || rep.Outcome != uploader.OutcomeSuccess || rep.Accepted != 20 {
		t.Fatalf("second call = %s %d accepted (%v), want success 20", rep.Outcome, rep.Accepted, err)
	}
	for _, tile := range tiles {
		want := 1
		if rejected[tile.SHA256] {
			want = 2
		}
		if got := srv.Puts(tile.SHA256); got != want {
			t.Errorf("PUTs of tile %d = %d, want %d", tile.ID, got, want)
		}
		if !srv.Has(tile.SHA256) {
			t.Errorf("server lacks tile %d", tile.ID)
		}
		if st := status(t, store, tile.ID); st != uploader.StatusUploaded {
			t.Errorf("status(%d) = %s, want uploaded", tile.ID, st)
		}
	}
}

// cancelClock's Sleep reports that the context ended (Ctrl-C during a
// backoff).
type cancelClock struct{ *fakeClock }

func (c *cancelClock) Sleep(ctx context.Context, d time.Duration) error {
	c.fakeClock.Sleep(ctx, d)
	return context.Canceled
}

func TestRetryStopsWhenSleepIsCancelled(t *testing.T) {
	clock := &cancelClock{fakeClock: newFakeClock()}
	store := newStore(t, clock)
	tiles := addTiles(t, store, "w", 2, 16)
	inner := &scriptedInner{store: store, reject: func(int, uploader.Tile) bool { return true }}
	r, err := uploader.NewRetryUploader(inner, uploader.DefaultConfig(), uploader.Deps{Store: store, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.UploadPending(context.Background(), uploader.Request{})
	if !errors.Is(err, context.Canceled) || inner.Calls() != 1 || rep.Rejected != 2 {
		t.Errorf("UploadPending(cancelled in sleep) = %+v, %v (%d calls), want context.Canceled after 1 call", rep, err, inner.Calls())
	}
	if n := attempts(t, store, tiles[0].ID); n != 1 {
		t.Errorf("upload_attempts = %d, want 1", n)
	}
}
