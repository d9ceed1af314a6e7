package uploader_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/uploader"
	"provideragent/uploader/uploadertest"
)

type blossomFixture struct {
	store   *uploader.Store
	clock   *fakeClock
	metrics *uploader.Metrics
	up      uploader.Uploader
	cfg     uploader.Config
}

func newBlossomFixture(t *testing.T, servers []string, edit func(*uploader.Config)) *blossomFixture {
	t.Helper()
	f := &blossomFixture{clock: newFakeClock()}
	f.store = newStore(t, f.clock)
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

func randomBytes(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundTripFileTilesUploadRestore(t *testing.T) {
	ctx := context.Background()
	srv := uploadertest.NewServer(t)
	f := newBlossomFixture(t, []string{srv.URL}, nil)
	const tileSize = 4096
	// Random data, two identical zero tiles and a short last tile.
	data := append(randomBytes(t, 3*tileSize), make([]byte, 2*tileSize)...)
	data = append(data, randomBytes(t, 1234)...)
	m, added, err := f.store.AddFile(ctx, "job-7", bytes.NewReader(data), tileSize)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Tiles) != 6 || added != 5 || m.Size != int64(len(data)) || m.SHA256 != sha(data) {
		t.Fatalf("AddFile = %d tiles, %d added, size %d, want 6 tiles, 5 added (one duplicate), size %d", len(m.Tiles), added, m.Size, len(data))
	}
	rep, err := f.up.UploadPending(ctx, uploader.Request{Workload: "job-7"})
	if err != nil || rep.Outcome != uploader.OutcomeSuccess || rep.Accepted != 5 {
		t.Fatalf("UploadPending = %s %d accepted (%v), want success 5", rep.Outcome, rep.Accepted, err)
	}
	if rep.BytesUploaded != int64(len(data)-tileSize) {
		t.Errorf("bytes uploaded = %d, want %d", rep.BytesUploaded, len(data)-tileSize)
	}
	if v := testutil.ToFloat64(f.metrics.BytesUploaded); v != float64(rep.BytesUploaded) {
		t.Errorf("uploader_bytes_uploaded_total = %v, want %d", v, rep.BytesUploaded)
	}
	if v := testutil.ToFloat64(f.metrics.Uploads.WithLabelValues("success")); v != 1 {
		t.Errorf(`uploader_uploads_total{outcome="success"} = %v, want 1`, v)
	}
	// The manifest goes through its JSON form, as it would via state_uri.
	var mj bytes.Buffer
	if err := writeJSON(&mj, m); err != nil {
		t.Fatal(err)
	}
	m2, err := uploader.ParseManifest(mj.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := uploader.Restore(ctx, nil, m2, []string{srv.URL}, &out); err != nil {
		t.Fatalf("Restore = %v, want nil", err)
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("restored %d bytes differ from the original %d bytes", out.Len(), len(data))
	}
	// Nothing left to upload: a second call sends nothing.
	before := srv.TotalPuts()
	if rep, err := f.up.UploadPending(ctx, uploader.Request{}); err != nil || rep.Outcome != uploader.OutcomeSuccess || len(rep.Tiles) != 0 {
		t.Errorf("UploadPending(nothing pending) = %+v, %v, want empty success", rep, err)
	}
	if srv.TotalPuts() != before {
		t.Errorf("PUTs after nothing-pending call = %d, want %d", srv.TotalPuts(), before)
	}
}

func TestBlossomRejectionCarriesServerReason(t *testing.T) {
	ctx := context.Background()
	srv := uploadertest.NewServer(t)
	f := newBlossomFixture(t, []string{srv.URL}, func(c *uploader.Config) { c.DisableRetry = true })
	tiles := addTiles(t, f.store, "w", 4, 100)
	srv.Reject(tiles[2].SHA256, -1, http.StatusUnsupportedMediaType, "blob type not allowed")
	rep, err := f.up.UploadPending(ctx, uploader.Request{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcome != uploader.OutcomePartial || rep.Accepted != 3 || rep.Rejected != 1 {
		t.Fatalf("UploadPending = %s %d/%d, want partial 3/1", rep.Outcome, rep.Accepted, rep.Rejected)
	}
	var got uploader.TileResult
	for _, r := range rep.Tiles {
		if r.TileID == tiles[2].ID {
			got = r
		}
	}
	if got.Verdict != uploader.VerdictRejected || got.Code != 415 || !strings.Contains(got.Reason, "blob type not allowed") {
		t.Errorf("tile result = %+v, want rejected 415 with the X-Reason", got)
	}
	stored, _ := f.store.Get(ctx, tiles[2].ID)
	if !strings.Contains(stored.LastRejectionReason, "blob type not allowed") || stored.Status != uploader.StatusPending {
		t.Errorf("stored tile = %+v, want pending with the reason recorded", stored)
	}
	if v := testutil.ToFloat64(f.metrics.TileRejections); v != 1 {
		t.Errorf("uploader_tile_rejections_total = %v, want 1", v)
	}
}

func TestBlossomTransientFailureRetried(t *testing.T) {
	ctx := context.Background()
	srv := uploadertest.NewServer(t)
	f := newBlossomFixture(t, []string{srv.URL}, func(c *uploader.Config) { c.Concurrency = 1 })
	addTiles(t, f.store, "w", 5, 100)
	srv.FailNext(2)
	rep, err := f.up.UploadPending(ctx, uploader.Request{})
	if err != nil || rep.Outcome != uploader.OutcomeSuccess || rep.RetryCount != 1 || rep.Accepted != 5 {
		t.Fatalf("UploadPending = %s retry %d accepted %d (%v), want success after 1 retry", rep.Outcome, rep.RetryCount, rep.Accepted, err)
	}
	if s := f.clock.Sleeps(); len(s) != 1 {
		t.Errorf("sleeps = %v, want one", s)
	}
	if v := testutil.ToFloat64(f.metrics.Uploads.WithLabelValues("partial")); v != 1 {
		t.Errorf(`uploader_uploads_total{outcome="partial"} = %v, want 1`, v)
	}
}

func TestBlossomConcurrencyIsBounded(t *testing.T) {
	// The server counts PUT /upload requests in flight. HoldPuts makes the
	// first ones wait for each other (so a bounded-but-parallel uploader must
	// reach its bound), and SlowPuts keeps each PUT open a little, so an
	// uploader sending more than Concurrency at once would be seen doing so.
	tests := []struct {
		name        string
		concurrency int
		tiles       int
		wantMax     int // MaxPutsInFlight must be <= this
	}{
		{"serial", 1, 6, 1},
		{"two", 2, 12, 2},
		{"four", 4, 16, 4},
		{"fewer tiles than workers", 8, 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := uploadertest.NewServer(t)
			f := newBlossomFixture(t, []string{srv.URL}, func(c *uploader.Config) { c.Concurrency = tt.concurrency })
			addTiles(t, f.store, "w", tt.tiles, 64)
			srv.SlowPuts(5 * time.Millisecond)
			if tt.wantMax > 1 {
				srv.HoldPuts(tt.wantMax, 10*time.Second)
			}
			rep, err := f.up.UploadPending(context.Background(), uploader.Request{})
			if err != nil || rep.Accepted != tt.tiles {
				t.Fatalf("UploadPending = %s accepted %d (%v), want all %d accepted", rep.Outcome, rep.Accepted, err, tt.tiles)
			}
			got := srv.MaxPutsInFlight()
			if got > tt.wantMax {
				t.Errorf("MaxPutsInFlight(concurrency %d, %d tiles) = %d, want <= %d", tt.concurrency, tt.tiles, got, tt.wantMax)
			}
			if tt.wantMax > 1 && got < 2 {
				t.Errorf("MaxPutsInFlight(concurrency %d, %d tiles) = %d, want > 1 (uploads not parallel)", tt.concurrency, tt.tiles, got)
			}
		})
	}
}

func TestBlossomRefusedEverywhereIsFailure(t *testing.T) {
	ctx := context.Background()
	srv := uploadertest.NewServer(t)
	f := newBlossomFixture(t, []string{srv.URL}, nil)
	tiles := addTiles(t, f.store, "w", 3, 100)
	for _, tile := range tiles {
		srv.Reject(tile.SHA256, -1, http.StatusPaymentRequired, "payment required")
	}
	rep, err := f.up.UploadPending(ctx, uploader.Request{})
	if err != nil || rep.Outcome != uploader.OutcomeFailure {
		t.Fatalf("UploadPending = %s (%v), want failure", rep.Outcome, err)
	}
	if len(f.clock.Sleeps()) != 0 {
		t.Errorf("sleeps = %v, want none (failure is not retried)", f.clock.Sleeps())
	}
	for _, tile := range tiles {
		if n := attempts(t, f.store, tile.ID); n != 0 {
			t.Errorf("upload_attempts(%d) = %d, want 0", tile.ID, n)
		}
	}
}

func TestBlossomDescriptorMustConfirmHash(t *testing.T) {
	for name, body := range map[string]string{
		"wrong hash": `{"url":"x","sha256":"` + strings.Repeat("ab", 32) + `","size":100}`,
		"not json":   `<html>ok</html>`,
		"wrong size": "", // filled below
	} {
		t.Run(name, func(t *testing.T) {
			var tileSHA string
			liar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b := body
				if name == "wrong size" {
					b = `{"sha256":"` + tileSHA + `","size":7}`
				}
				w.Write([]byte(b))
			}))
			defer liar.Close()
			f := newBlossomFixture(t, []string{liar.URL}, func(c *uploader.Config) { c.DisableRetry = true })
			tiles := addTiles(t, f.store, "w", 1, 100)
			tileSHA = tiles[0].SHA256
			rep, err := f.up.UploadPending(context.Background(), uploader.Request{})
			if err != nil || rep.Rejected != 1 || status(t, f.store, tiles[0].ID) != uploader.StatusPending {
				t.Errorf("UploadPending(%s) = %+v, %v, want the tile rejected and still pending", name, rep, err)
			}
		})
	}
}

func TestBlossomMinReplicas(t *testing.T) {
	ctx := context.Background()
	t.Run("two of two required", func(t *testing.T) {
		a, b := uploadertest.NewServer(t), uploadertest.NewServer(t)
		f := newBlossomFixture(t, []string{a.URL, b.URL}, func(c *uploader.Config) { c.MinReplicas = 2; c.DisableRetry = true })
		tiles := addTiles(t, f.store, "w", 3, 50)
		b.Reject(tiles[0].SHA256, -1, 507, "disk full")
		rep, err := f.up.UploadPending(ctx, uploader.Request{})
		if err != nil || rep.Accepted != 2 || rep.Rejected != 1 {
			t.Fatalf("UploadPending = %d/%d (%v), want 2 accepted / 1 rejected", rep.Accepted, rep.Rejected, err)
		}
		if !a.Has(tiles[0].SHA256) || b.Has(tiles[0].SHA256) {
			t.Errorf("tile 0 on a=%v b=%v, want only a", a.Has(tiles[0].SHA256), b.Has(tiles[0].SHA256))
		}
	})
	t.Run("one down, one required", func(t *testing.T) {
		a, b := uploadertest.NewServer(t), uploadertest.NewServer(t)
		f := newBlossomFixture(t, []string{a.URL, b.URL}, nil)
		addTiles(t, f.store, "w", 3, 50)
		a.Down()
		rep, err := f.up.UploadPending(ctx, uploader.Request{})
		if err != nil || rep.Outcome != uploader.OutcomeSuccess || b.Blobs() != 3 {
			t.Fatalf("UploadPending = %s (%v), b has %d blobs, want success with 3 on b", rep.Outcome, err, b.Blobs())
		}
		if err := f.up.ConfirmState(ctx); err != nil {
			t.Errorf("ConfirmState(one of two up, need 1) = %v, want nil", err)
		}
		b.Down()
		if err := f.up.ConfirmState(ctx); !errors.Is(err, uploader.ErrServerUnreachable) {
			t.Errorf("ConfirmState(all down) = %v, want ErrServerUnreachable", err)
		}
	})
}

func TestRestoreVerifiesAndFallsBack(t *testing.T) {
	ctx := context.Background()
	a, b := uploadertest.NewServer(t), uploadertest.NewServer(t)
	f := newBlossomFixture(t, []string{a.URL, b.URL}, func(c *uploader.Config) { c.MinReplicas = 2 })
	data := randomBytes(t, 10_000)
	m, _, err := f.store.AddFile(ctx, "w", bytes.NewReader(data), 3000)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := f.up.UploadPending(ctx, uploader.Request{}); err != nil || rep.Outcome != uploader.OutcomeSuccess {
		t.Fatalf("UploadPending = %s, %v", rep.Outcome, err)
	}
	a.Corrupt(m.Tiles[1].SHA256)
	var out bytes.Buffer
	if err := uploader.Restore(ctx, nil, m, []string{a.URL, b.URL}, &out); err != nil || !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("Restore(a corrupt, b good) = %v, identical=%v, want nil, true", err, bytes.Equal(out.Bytes(), data))
	}
	out.Reset()
	if err := uploader.Restore(ctx, nil, m, []string{a.URL}, &out); !errors.Is(err, uploader.ErrTileUnavailable) || !strings.Contains(err.Error(), "hash mismatch") {
		t.Errorf("Restore(only corrupt server) = %v, want ErrTileUnavailable naming the hash mismatch", err)
	}
	b.Down()
	a.Down()
	if err := uploader.Restore(ctx, nil, m, []string{a.URL, b.URL}, &out); !errors.Is(err, uploader.ErrTileUnavailable) {
		t.Errorf("Restore(servers down) = %v, want ErrTileUnavailable", err)
	}
}

func TestAuthorizationIsSignedKind24242(t *testing.T) {
	// khatru's blossom handler verifies the event (kind, id, signature,
	// expiration, t=upload); an accepted upload is recorded under our pubkey.
	srv := uploadertest.NewServer(t)
	store := newStore(t, nil)
	addTiles(t, store, "w", 2, 10)
	key := newKey(t)
	cfg := uploader.DefaultConfig()
	cfg.Servers = []string{srv.URL}
	u, err := uploader.NewBlossomUploader(cfg, uploader.Deps{Store: store, SecretKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.UploadPending(context.Background(), uploader.Request{}); err != nil {
		t.Fatal(err)
	}
	if n := srv.Uploads(u.PublicKey()); n != 2 {
		t.Errorf("uploads recorded for our pubkey = %d, want 2", n)
	}
	for _, bad := range []string{"", "zz", strings.Repeat("0", 64), strings.Repeat("f", 64)} {
		_, err := uploader.NewBlossomUploader(cfg, uploader.Deps{Store: store, SecretKey: bad})
		if !errors.Is(err, uploader.ErrBadKey) || (bad != "" && strings.Contains(err.Error(), bad)) {
			t.Errorf("NewBlossomUploader(key %q) = %v, want ErrBadKey without echoing the key", bad, err)
		}
	}
}
