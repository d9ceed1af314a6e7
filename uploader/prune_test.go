package uploader_test

import (
	"context"
	"testing"

	"provideragent/uploader"
	"provideragent/uploader/uploadertest"
)

// TestPruneUploaded: only the uploaded tiles of the workload outside keep
// go, with their placements; kept, pending and other workloads' tiles
// stay.
func TestPruneUploaded(t *testing.T) {
	ctx := context.Background()
	srv := uploadertest.NewServer(t)
	f := newBlossomFixture(t, []string{srv.URL}, func(cfg *uploader.Config) { cfg.DisableRetry = true })
	tiles := addTiles(t, f.store, "job-7", 3, 100)
	other := addTiles(t, f.store, "other", 1, 100)
	if _, err := f.up.UploadPending(ctx, uploader.Request{}); err != nil {
		t.Fatal(err)
	}
	pending := addTiles(t, f.store, "job-7", 4, 100)[3] // a fourth, new tile
	n, err := f.store.PruneUploaded(ctx, "job-7", []string{tiles[1].SHA256})
	if err != nil || n != 2 {
		t.Fatalf("PruneUploaded = %d, %v; want 2 tiles pruned", n, err)
	}
	left, err := f.store.List(ctx, uploader.Filter{Workload: "job-7"})
	if err != nil {
		t.Fatal(err)
	}
	var shas []string
	for _, tl := range left {
		shas = append(shas, tl.SHA256)
	}
	if len(left) != 2 || !contains(shas, tiles[1].SHA256) || !contains(shas, pending.SHA256) {
		t.Errorf("tiles of job-7 after pruning = %v, want the kept one and the pending one", shas)
	}
	if p, _ := f.store.Placed(ctx, "job-7", []string{tiles[0].SHA256}, []string{srv.URL}); p != 0 {
		t.Errorf("a pruned tile is still placed on %d servers", p)
	}
	if p, _ := f.store.Placed(ctx, "job-7", []string{tiles[1].SHA256}, []string{srv.URL}); p != 1 {
		t.Errorf("the kept tile is placed on %d servers, want 1", p)
	}
	if o, _ := f.store.List(ctx, uploader.Filter{Workload: "other"}); len(o) != 1 || o[0].SHA256 != other[0].SHA256 {
		t.Errorf("tiles of another workload after pruning = %+v", o)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
