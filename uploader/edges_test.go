package uploader_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/internal/sqlitedb"
	"provideragent/uploader"
	"provideragent/uploader/uploadertest"
)

// TestBlossomOutcomeIsFailureOnlyWhenEveryTileIsRefused: 401, 402 and 403
// refuse the uploader itself (failure: retrying is pointless); a batch
// where any tile was rejected for another reason, or accepted, is partial.
func TestBlossomOutcomeIsFailureOnlyWhenEveryTileIsRefused(t *testing.T) {
	tests := []struct {
		name  string
		codes []int // one per tile; 0 accepted
		want  uploader.Outcome
	}{
		{"401", []int{401, 401}, uploader.OutcomeFailure},
		{"402", []int{402, 402}, uploader.OutcomeFailure},
		{"403", []int{403, 403}, uploader.OutcomeFailure},
		{"a refusal and a bad tile", []int{403, 400}, uploader.OutcomePartial},
		{"a bad tile and a refusal", []int{400, 403}, uploader.OutcomePartial},
		{"a refusal and an acceptance", []int{403, 0}, uploader.OutcomePartial},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := uploadertest.NewServer(t)
			f := newBlossomFixture(t, []string{srv.URL}, func(c *uploader.Config) { c.DisableRetry = true; c.Concurrency = 1 })
			tiles := addTiles(t, f.store, "w", len(tt.codes), 100)
			for i, code := range tt.codes {
				if code != 0 {
					srv.Reject(tiles[i].SHA256, -1, code, "no")
				}
			}
			rep, err := f.up.UploadPending(context.Background(), uploader.Request{})
			if err != nil || rep.Outcome != tt.want {
				t.Errorf("UploadPending(%v) = %s, %v, want %s", tt.codes, rep.Outcome, err, tt.want)
			}
		})
	}
}

// TestBlossomChecksLocalContent: a tile whose stored content no longer
// matches its sha256 (same size, bytes changed on disk) is rejected without
// being sent anywhere.
func TestBlossomChecksLocalContent(t *testing.T) {
	srv := uploadertest.NewServer(t)
	path := openDB(t)
	f := newBlossomFixtureAt(t, path, []string{srv.URL}, func(c *uploader.Config) { c.DisableRetry = true })
	tiles := addTiles(t, f.store, "w", 2, 100)
	raw := openRaw(t, path)
	if _, err := raw.Exec(`UPDATE tiles SET content = ? WHERE tile_id = ?`, bytes.Repeat([]byte("x"), 100), tiles[0].ID); err != nil {
		t.Fatal(err)
	}
	rep, err := f.up.UploadPending(context.Background(), uploader.Request{})
	if err != nil || rep.Accepted != 1 || rep.Rejected != 1 {
		t.Fatalf("UploadPending(one tile damaged locally) = %+v, %v, want 1 accepted, 1 rejected", rep, err)
	}
	if n := srv.Puts(tiles[0].SHA256); n != 0 {
		t.Errorf("server got %d PUTs of the damaged tile, want 0", n)
	}
	if r := rep.Tiles[0]; r.TileID != tiles[0].ID || !strings.Contains(r.Reason, "does not match") {
		t.Errorf("damaged tile's result = %+v, want a rejection naming the mismatch", r)
	}
}

// TestBlossomSkipsDownServersForLaterTiles: once a server is found
// unreachable, the batch's later tiles go to the other servers.
func TestBlossomSkipsDownServersForLaterTiles(t *testing.T) {
	a, b := uploadertest.NewServer(t), uploadertest.NewServer(t)
	f := newBlossomFixture(t, []string{a.URL, b.URL}, func(c *uploader.Config) { c.DisableRetry = true; c.Concurrency = 1 })
	addTiles(t, f.store, "w", 3, 50)
	a.Down()
	rep, err := f.up.UploadPending(context.Background(), uploader.Request{})
	if err != nil || rep.Accepted != 3 || b.Blobs() != 3 {
		t.Fatalf("UploadPending(first of two servers down) = %+v, %v, b has %d blobs, want 3 accepted on b", rep, err, b.Blobs())
	}
}

// TestBlossomAccepts2xx: any 2xx with a descriptor confirming the tile is
// an acceptance; 300 is not.
func TestBlossomAccepts2xx(t *testing.T) {
	for _, tt := range []struct {
		code   int
		wantOK bool
	}{{200, true}, {201, true}, {299, true}, {300, false}} {
		t.Run(fmt.Sprint(tt.code), func(t *testing.T) {
			var tileSHA atomic.Value
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.WriteHeader(tt.code)
				fmt.Fprintf(w, `{"sha256":%q,"size":100}`, tileSHA.Load())
			}))
			defer srv.Close()
			f := newBlossomFixture(t, []string{srv.URL}, func(c *uploader.Config) { c.DisableRetry = true })
			tiles := addTiles(t, f.store, "w", 1, 100)
			tileSHA.Store(tiles[0].SHA256)
			rep, err := f.up.UploadPending(context.Background(), uploader.Request{})
			if err != nil || (rep.Accepted == 1) != tt.wantOK {
				t.Errorf("UploadPending(server answers %d) = %+v, %v, want accepted = %v", tt.code, rep, err, tt.wantOK)
			}
		})
	}
}

// TestBlossomStoreFailureIsAnError: when the store cannot record a tile's
// verdict (accepted or rejected), UploadPending returns an error, so the
// caller does not take the database for up to date.
func TestBlossomStoreFailureIsAnError(t *testing.T) {
	tests := []struct {
		name    string
		trigger string
		reject  bool
	}{
		{"marking uploaded", `CREATE TRIGGER no_mark BEFORE UPDATE OF status ON tiles WHEN NEW.status = 'uploaded'
			BEGIN SELECT RAISE(ABORT, 'disk says no'); END`, false},
		{"recording a rejection", `CREATE TRIGGER no_reject BEFORE UPDATE OF last_rejection_reason ON tiles WHEN NEW.last_rejection_reason != ''
			BEGIN SELECT RAISE(ABORT, 'disk says no'); END`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := uploadertest.NewServer(t)
			path := openDB(t)
			f := newBlossomFixtureAt(t, path, []string{srv.URL}, func(c *uploader.Config) { c.DisableRetry = true })
			tiles := addTiles(t, f.store, "w", 1, 100)
			if tt.reject {
				srv.Reject(tiles[0].SHA256, -1, 400, "bad")
			}
			if _, err := openRaw(t, path).Exec(tt.trigger); err != nil {
				t.Fatal(err)
			}
			if _, err := f.up.UploadPending(context.Background(), uploader.Request{}); err == nil {
				t.Errorf("UploadPending(store fails %s) = nil error, want one", tt.name)
			}
		})
	}
}

// TestBuildUploaderCountsInTheGivenMetrics: the Metrics passed in Deps are
// the ones the uploader counts in.
func TestBuildUploaderCountsInTheGivenMetrics(t *testing.T) {
	srv := uploadertest.NewServer(t)
	f := newBlossomFixture(t, []string{srv.URL}, nil)
	addTiles(t, f.store, "w", 2, 100)
	if _, err := f.up.UploadPending(context.Background(), uploader.Request{}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(f.metrics.BytesUploaded); got != 200 {
		t.Errorf("BytesUploaded = %v, want 200", got)
	}
}

// TestParseDescriptorSize: a descriptor's size may be 0 (unknown) but not
// negative.
func TestParseDescriptorSize(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	for _, tt := range []struct {
		size   int64
		wantOK bool
	}{{0, true}, {1, true}, {-1, false}} {
		_, err := uploader.ParseDescriptor([]byte(fmt.Sprintf(`{"sha256":%q,"size":%d}`, sha, tt.size)))
		if (err == nil) != tt.wantOK {
			t.Errorf("ParseDescriptor(size %d) = %v, want ok = %v", tt.size, err, tt.wantOK)
		}
	}
}

// TestNewRetryUploaderNeedsInnerAndStore: both are required.
func TestNewRetryUploaderNeedsInnerAndStore(t *testing.T) {
	s := newStore(t, newFakeClock())
	inner := &scriptedInner{store: s}
	if _, err := uploader.NewRetryUploader(nil, uploader.DefaultConfig(), uploader.Deps{Store: s}); err == nil {
		t.Error("NewRetryUploader(nil inner) = nil error, want one")
	}
	if _, err := uploader.NewRetryUploader(inner, uploader.DefaultConfig(), uploader.Deps{}); err == nil {
		t.Error("NewRetryUploader(nil store) = nil error, want one")
	}
}

// fixedInner returns the same report on every call.
type fixedInner struct {
	uploader.Uploader
	rep uploader.Report
}

func (f fixedInner) UploadPending(context.Context, uploader.Request) (uploader.Report, error) {
	return f.rep, nil
}

// TestRetryPassesSuccessThroughUnchanged: a first call that is not partial
// comes back exactly as the inner uploader reported it.
func TestRetryPassesSuccessThroughUnchanged(t *testing.T) {
	s := newStore(t, newFakeClock())
	want := uploader.Report{Outcome: uploader.OutcomeSuccess, Accepted: 2, BytesUploaded: 7, Tiles: []uploader.TileResult{
		{TileID: 9, Verdict: uploader.VerdictAccepted}, {TileID: 3, Verdict: uploader.VerdictAccepted},
	}}
	r, err := uploader.NewRetryUploader(fixedInner{rep: want}, uploader.DefaultConfig(), uploader.Deps{Store: s})
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.UploadPending(context.Background(), uploader.Request{})
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("UploadPending = %+v, %v, want the inner report unchanged %+v", got, err, want)
	}
}

// TestRetryReportSumsTheCalls: after retries the report sums the bytes of
// every call, lists each tile once (its last verdict) in tile id order, and
// gives no retry hint when nothing is left pending.
func TestRetryReportSumsTheCalls(t *testing.T) {
	clock := newFakeClock()
	s := newStore(t, clock)
	tiles := addTiles(t, s, "w", 4, 100)
	// Call 1 rejects tiles 0 and 2, call 2 rejects tile 2, call 3 takes it.
	inner := &scriptedInner{store: s, reject: func(call int, tile uploader.Tile) bool {
		return (call == 1 && (tile.ID == tiles[0].ID || tile.ID == tiles[2].ID)) || (call == 2 && tile.ID == tiles[2].ID)
	}}
	cfg := uploader.DefaultConfig()
	cfg.MaxInCallRetries = 5
	r, err := uploader.NewRetryUploader(inner, cfg, uploader.Deps{Store: s, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.UploadPending(context.Background(), uploader.Request{Workload: "w"})
	if err != nil || rep.Outcome != uploader.OutcomeSuccess || rep.RetryCount != 2 {
		t.Fatalf("UploadPending = %s after %d retries, %v, want success after 2", rep.Outcome, rep.RetryCount, err)
	}
	if rep.BytesUploaded != 400 {
		t.Errorf("BytesUploaded = %d, want 400 (2 + 1 + 1 tiles of 100 bytes over three calls)", rep.BytesUploaded)
	}
	var ids []int64
	for _, tr := range rep.Tiles {
		ids = append(ids, tr.TileID)
	}
	want := []int64{tiles[0].ID, tiles[1].ID, tiles[2].ID, tiles[3].ID}
	if !reflect.DeepEqual(ids, want) || rep.Accepted != 4 {
		t.Errorf("tiles %v (%d accepted), want %v, all accepted", ids, rep.Accepted, want)
	}
	if !rep.NextRetryAt.IsZero() {
		t.Errorf("NextRetryAt = %v with nothing pending, want zero", rep.NextRetryAt)
	}
}

// TestRetryGivesNoHintWhenAllRemainingGaveUp: the in-call loop ends with no
// tile pending once the rejected ones are given up: no retry hint then.
func TestRetryGivesNoHintWhenAllRemainingGaveUp(t *testing.T) {
	clock := newFakeClock()
	s := newStore(t, clock)
	addTiles(t, s, "w", 2, 100)
	inner := &scriptedInner{store: s, reject: func(int, uploader.Tile) bool { return true }}
	cfg := uploader.DefaultConfig()
	cfg.MaxPerTileAttempts = 1
	r, err := uploader.NewRetryUploader(inner, cfg, uploader.Deps{Store: s, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := r.UploadPending(context.Background(), uploader.Request{Workload: "w"})
	if err != nil || len(rep.GaveUp) != 2 || !rep.NextRetryAt.IsZero() {
		t.Errorf("UploadPending = gave up %v, next retry %v, %v; want both given up and no hint", rep.GaveUp, rep.NextRetryAt, err)
	}
}

// TestTileSizeLimits: tile sizes run from 1 to MaxTileSize, in Split and in
// a manifest; a manifest lists at most MaxManifestTiles tiles.
func TestTileSizeLimits(t *testing.T) {
	for _, tt := range []struct {
		size   int
		wantOK bool
	}{{0, false}, {1, true}, {uploader.MaxTileSize, true}, {uploader.MaxTileSize + 1, false}} {
		_, err := uploader.Split(strings.NewReader("abc"), "w", tt.size, func([]byte, string) error { return nil })
		if (err == nil) != tt.wantOK {
			t.Errorf("Split(tile size %d) = %v, want ok = %v", tt.size, err, tt.wantOK)
		}
		if !tt.wantOK && !errors.Is(err, uploader.ErrBadTileSize) {
			t.Errorf("Split(tile size %d) = %v, want ErrBadTileSize", tt.size, err)
		}
		m := uploader.Manifest{Version: uploader.ManifestVersion, Workload: "w", Size: 1, SHA256: strings.Repeat("ab", 32),
			TileSize: tt.size, Tiles: []uploader.ManifestTile{{SHA256: strings.Repeat("cd", 32), Size: 1}}}
		if err := m.Validate(); (err == nil) != tt.wantOK {
			t.Errorf("Manifest{TileSize: %d}.Validate() = %v, want ok = %v", tt.size, err, tt.wantOK)
		}
	}
	// An empty file has no tiles, and still a tile size from 1 up.
	for _, tt := range []struct {
		size   int
		wantOK bool
	}{{0, false}, {1, true}} {
		m := uploader.Manifest{Version: uploader.ManifestVersion, Workload: "w", SHA256: strings.Repeat("ab", 32), TileSize: tt.size, Tiles: []uploader.ManifestTile{}}
		if err := m.Validate(); (err == nil) != tt.wantOK {
			t.Errorf("empty Manifest{TileSize: %d}.Validate() = %v, want ok = %v", tt.size, err, tt.wantOK)
		}
	}
	tile := uploader.ManifestTile{SHA256: strings.Repeat("cd", 32), Size: 1}
	for _, tt := range []struct {
		tiles  int
		wantOK bool
	}{{uploader.MaxManifestTiles, true}, {uploader.MaxManifestTiles + 1, false}} {
		m := uploader.Manifest{Version: uploader.ManifestVersion, Workload: "w", Size: int64(tt.tiles), SHA256: strings.Repeat("ab", 32),
			TileSize: 1, Tiles: make([]uploader.ManifestTile, tt.tiles)}
		for i := range m.Tiles {
			m.Tiles[i] = tile
		}
		if err := m.Validate(); (err == nil) != tt.wantOK {
			t.Errorf("Manifest with %d tiles: Validate() = %v, want ok = %v", tt.tiles, err, tt.wantOK)
		}
	}
}

// TestTruncate: a string of at most n bytes is kept as is; a longer one is
// cut to n bytes and marked.
func TestTruncate(t *testing.T) {
	for _, tt := range []struct {
		s    string
		n    int
		want string
	}{{"abc", 4, "abc"}, {"abc", 3, "abc"}, {"abcd", 3, "abc..."}} {
		if got := uploader.Truncate(tt.s, tt.n); got != tt.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}

// failingReader yields n bytes (no two 1 MiB tiles alike), then an error.
type failingReader struct{ n, off int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errors.New("disk read error")
	}
	k := min(len(p), r.n)
	for i := range p[:k] {
		p[i] = byte((r.off + i) >> 20)
	}
	r.n -= k
	r.off += k
	return k, nil
}

// TestAddFileCommitsEvery8MiB: AddFile commits about every 8 MiB of tiles,
// so when reading the file fails partway the tiles committed before stay
// stored, and AddFile says how many.
func TestAddFileCommitsEvery8MiB(t *testing.T) {
	const tile = 1 << 20
	s := newStore(t, newFakeClock())
	_, added, err := s.AddFile(context.Background(), "w", &failingReader{n: 9 * tile}, tile)
	if err == nil {
		t.Fatal("AddFile(read fails after 9 MiB) = nil error, want one")
	}
	pending, cerr := s.CountPending(context.Background(), "w")
	if added != 8 || cerr != nil || pending != 8 {
		t.Errorf("AddFile(read fails after 9 MiB) added %d, %d pending (%v), want the first 8 MiB: 8 and 8", added, pending, cerr)
	}
}

// TestRestoreAsksOneServerPerTile: each tile is fetched from the first
// server that has it; the others are not asked.
func TestRestoreAsksOneServerPerTile(t *testing.T) {
	ctx := context.Background()
	a := uploadertest.NewServer(t)
	f := newBlossomFixture(t, []string{a.URL}, nil)
	data := randomBytes(t, 1000)
	m, _, err := f.store.AddFile(ctx, "w", bytes.NewReader(data), 300)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.up.UploadPending(ctx, uploader.Request{}); err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	spare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.NotFound(w, r)
	}))
	defer spare.Close()
	var out bytes.Buffer
	if err := uploader.Restore(ctx, nil, m, []string{a.URL, spare.URL}, &out); err != nil || !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("Restore = %v, identical = %v, want nil, true", err, bytes.Equal(out.Bytes(), data))
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the second server was asked %d times, want 0 (the first has every tile)", n)
	}
}

// newBlossomFixtureAt is newBlossomFixture on the database file at path.
func newBlossomFixtureAt(t *testing.T, path string, servers []string, edit func(*uploader.Config)) *blossomFixture {
	t.Helper()
	f := &blossomFixture{clock: newFakeClock()}
	f.store = newStoreAt(t, path, f.clock)
	m, err := uploader.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	f.metrics = m
	f.cfg = uploader.DefaultConfig()
	f.cfg.Servers = servers
	if edit != nil {
		edit(&f.cfg)
	}
	f.up, err = uploader.BuildUploader(f.cfg, uploader.Deps{Store: f.store, SecretKey: newKey(t), Clock: f.clock, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestPlacementWriteFailureFailsTheUpload: a placement the database
// refuses to record is the upload's error, not a silent success whose
// checkpoint would later count servers it never wrote down.
func TestPlacementWriteFailureFailsTheUpload(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "up.db")
	srv := uploadertest.NewServer(t)
	f := newBlossomFixtureAt(t, path, []string{srv.URL}, func(c *uploader.Config) { c.DisableRetry = true })
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TRIGGER refuse_placements BEFORE INSERT ON blob_placements
		BEGIN SELECT RAISE(ABORT, 'placement refused by the test'); END`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.store.AddFile(ctx, "job-7", bytes.NewReader(randomBytes(t, 500)), 1000); err != nil {
		t.Fatal(err)
	}
	rep, err := f.up.UploadPending(ctx, uploader.Request{Workload: "job-7"})
	if err == nil || !strings.Contains(err.Error(), "placement refused by the test") {
		t.Fatalf("UploadPending with placements refused = %+v, %v, want the placement error", rep, err)
	}
}
