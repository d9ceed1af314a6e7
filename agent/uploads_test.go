package agent

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/internal/sqlitedb"
	"provideragent/lease"
	"provideragent/uploader"
	"provideragent/uploader/uploadertest"
)

// TestUploadLoopUploadsPendingTiles: checkpoint tiles stored on the agent's
// SQLite file before Run are uploaded by the running agent's upload loop
// through the real uploader stack (retry decorator over the Blossom
// uploader) to a real Blossom server: the server stores every tile, the
// tiles are marked uploaded, and the uploader's metrics on the agent's
// registry moved.
func TestUploadLoopUploadsPendingTiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := uploadertest.NewServer(t)
	key := nostr.GeneratePrivateKey()
	db, err := sqlitedb.Open(ctx, filepath.Join(t.TempDir(), "agent.db"), sqlitedb.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	reg := prometheus.NewRegistry()
	tiles, err := uploader.NewStore(ctx, db, nil)
	if err != nil {
		t.Fatalf("NewStore() = %v, want nil", err)
	}
	umet, err := uploader.NewMetrics(reg)
	if err != nil {
		t.Fatalf("NewMetrics() = %v, want nil", err)
	}
	ucfg := uploader.DefaultConfig()
	ucfg.Servers = []string{srv.URL}
	ucfg.TileSize = 1024
	ucfg.RequestTimeout = 10 * time.Second
	up, err := uploader.BuildUploader(ucfg, uploader.Deps{Store: tiles, SecretKey: key, Metrics: umet})
	if err != nil {
		t.Fatalf("BuildUploader() = %v, want nil", err)
	}

	// Two workloads' checkpoints, stored before the agent runs.
	var shas []string
	for _, w := range []struct {
		id   string
		size int
	}{{"w1", 3*1024 + 100}, {"w2", 1024}} {
		data := bytes.Repeat([]byte(w.id+"-checkpoint "), w.size/len(w.id+"-checkpoint ")+1)[:w.size]
		m, n, err := tiles.AddFile(ctx, w.id, bytes.NewReader(data), ucfg.TileSize)
		if err != nil || n == 0 {
			t.Fatalf("AddFile(%s) = %d, %v, want > 0 tiles, nil", w.id, n, err)
		}
		for _, mt := range m.Tiles {
			shas = append(shas, mt.SHA256)
		}
	}
	pending, err := tiles.CountPending(ctx, "")
	if err != nil || pending == 0 {
		t.Fatalf("CountPending() before Run = %d, %v, want > 0, nil", pending, err)
	}

	pool := &upPool{}
	pool.up.Store(3)
	cfg := DefaultConfig()
	cfg.Lease = lease.DemoConfig(stepRelays)
	cfg.SecretKey = key
	cfg.Listen = ""
	a, err := New(ctx, cfg, Deps{DB: db, Backend: newMemBackend(), Pool: pool, Registerer: reg,
		Uploader: up, UploadInterval: time.Hour})
	if err != nil {
		t.Fatalf("New() = %v, want nil", err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	}()

	// The first upload round runs at once (the interval is an hour). The
	// tiles are marked uploaded while the round runs, and the round's
	// metrics are counted when it returns, a moment later: wait for both.
	success := umet.Uploads.WithLabelValues(string(uploader.OutcomeSuccess))
	waitFor(t, 20*time.Second, "every tile uploaded and the round counted", func() bool {
		n, err := tiles.CountPending(ctx, "")
		return err == nil && n == 0 && testutil.ToFloat64(success) >= 1
	})
	for _, sha := range shas {
		if !srv.Has(sha) {
			t.Errorf("server Has(%s) = false, want true", sha)
		}
	}
	got, err := tiles.List(ctx, uploader.Filter{})
	if err != nil {
		t.Fatalf("List() = %v, want nil", err)
	}
	if len(got) != len(shas) {
		t.Fatalf("List() = %d tiles, want %d", len(got), len(shas))
	}
	for _, tl := range got {
		if tl.Status != uploader.StatusUploaded {
			t.Errorf("tile %d (%s) status = %s, want %s", tl.ID, tl.Workload, tl.Status, uploader.StatusUploaded)
		}
	}
	if got := srv.Uploads(a.PublicKey()); got != len(shas) {
		t.Errorf("server Uploads(agent key) = %d, want %d", got, len(shas))
	}
	if got := testutil.ToFloat64(success); got < 1 {
		t.Errorf("uploader_uploads_total{outcome=success} = %v, want >= 1", got)
	}
	var wantBytes float64
	for _, tl := range got {
		wantBytes += float64(tl.Size)
	}
	if got := testutil.ToFloat64(umet.BytesUploaded); got != wantBytes {
		t.Errorf("uploader_bytes_uploaded_total = %v, want %v", got, wantBytes)
	}
	// They are gathered from the agent's registry, beside its own.
	n, err := testutil.GatherAndCount(reg, "uploader_uploads_total", "uploader_bytes_uploaded_total", "agent_workloads")
	if err != nil || n < 5+1 {
		t.Errorf("GatherAndCount(agent registry) = %d, %v, want the uploader's 5 series and the agent's", n, err)
	}
}
