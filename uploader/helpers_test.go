package uploader_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/sqlitedb"
	"provideragent/uploader"
)

// fakeClock advances only when Sleep is called and records every sleep.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now().Truncate(time.Second)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// count returns how many records at level have a message containing sub.
func (h *logRecorder) count(level slog.Level, sub string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Level == level && bytes.Contains([]byte(r.Message), []byte(sub)) {
			n++
		}
	}
	return n
}

func (h *logRecorder) countLevel(level slog.Level) int { return h.count(level, "") }

func openDB(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "agent.db")
}

func newStore(t testing.TB, clock uploader.Clock) *uploader.Store {
	t.Helper()
	return newStoreAt(t, openDB(t), clock)
}

func newStoreAt(t testing.TB, path string, clock uploader.Clock) *uploader.Store {
	t.Helper()
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := uploader.NewStore(ctx, db, clock)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// addTiles stores n distinct tiles of tileSize bytes for workload and returns
// them in id order.
func addTiles(t testing.TB, s *uploader.Store, workload string, n, tileSize int) []uploader.Tile {
	t.Helper()
	data := make([]byte, n*tileSize)
	for i := range n {
		copy(data[i*tileSize:], []byte(workload+"/tile-"+string(rune('A'+i%26))+hex.EncodeToString([]byte{byte(i), byte(i >> 8)})))
	}
	if _, _, err := s.AddFile(context.Background(), workload, bytes.NewReader(data), tileSize); err != nil {
		t.Fatal(err)
	}
	tiles, err := s.List(context.Background(), uploader.Filter{Workload: workload})
	if err != nil {
		t.Fatal(err)
	}
	if len(tiles) != n {
		t.Fatalf("addTiles: stored %d tiles, want %d", len(tiles), n)
	}
	return tiles
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// scriptedInner is a fake inner Uploader working on a real Store: each call
// takes the pending tiles, rejects those reject(call, tile) picks, marks the
// rest uploaded, and reports partial when anything was rejected.
type scriptedInner struct {
	store  *uploader.Store
	reject func(call int, t uploader.Tile) bool
	errs   map[int]error // call number (1-based) -> error returned

	mu              sync.Mutex
	calls           int
	sent            [][]int64
	enumerateCalls  int
	confirmCalls    int
	enumerateResult []uploader.Tile
	confirmErr      error
}

func (f *scriptedInner) UploadPending(ctx context.Context, req uploader.Request) (uploader.Report, error) {
	f.mu.Lock()
	f.calls++
	call := f.calls
	f.mu.Unlock()
	if err := f.errs[call]; err != nil {
		f.mu.Lock()
		f.sent = append(f.sent, nil)
		f.mu.Unlock()
		return uploader.Report{}, err
	}
	pending, err := f.store.PendingUploads(ctx, req.Workload, req.Limit)
	if err != nil {
		return uploader.Report{}, err
	}
	rep := uploader.Report{Outcome: uploader.OutcomeSuccess, Tiles: []uploader.TileResult{}}
	var ids []int64
	for _, t := range pending {
		ids = append(ids, t.ID)
		r := uploader.TileResult{TileID: t.ID, SHA256: t.SHA256, Size: t.Size}
		if f.reject != nil && f.reject(call, t) {
			r.Verdict, r.Reason, r.Code = uploader.VerdictRejected, "scripted rejection", 422
			rep.Rejected++
			rep.Outcome = uploader.OutcomePartial
			if err := f.store.RecordRejection(ctx, t.ID, r.Reason); err != nil {
				return rep, err
			}
		} else {
			r.Verdict, r.Code = uploader.VerdictAccepted, 200
			rep.Accepted++
			rep.BytesUploaded += t.Size
			if err := f.store.MarkUploaded(ctx, t.ID); err != nil {
				return rep, err
			}
		}
		rep.Tiles = append(rep.Tiles, r)
	}
	f.mu.Lock()
	f.sent = append(f.sent, ids)
	f.mu.Unlock()
	return rep, nil
}

func (f *scriptedInner) EnumeratePending(ctx context.Context, workload string) ([]uploader.Tile, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.enumerateCalls++
	return f.enumerateResult, nil
}

func (f *scriptedInner) ConfirmState(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.confirmCalls++
	return f.confirmErr
}

func (f *scriptedInner) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func newKey(t testing.TB) string {
	t.Helper()
	return nostr.GeneratePrivateKey()
}

func attempts(t testing.TB, s *uploader.Store, id int64) int {
	t.Helper()
	tile, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tile.UploadAttempts
}

func status(t testing.TB, s *uploader.Store, id int64) uploader.Status {
	t.Helper()
	tile, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return tile.Status
}

func openRaw(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sqlitedb.Open(context.Background(), path, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
