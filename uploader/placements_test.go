package uploader_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"provideragent/uploader"
	"provideragent/uploader/uploadertest"
)

// TestPlacementsPerAckingServer: every server that stored a tile and
// confirmed its hash is recorded, one that refused it or is down is not,
// whatever min_replicas made of the tile; Placed is the smallest count of
// the given servers over the given blobs.
func TestPlacementsPerAckingServer(t *testing.T) {
	ctx := context.Background()
	a, b, c, down := uploadertest.NewServer(t), uploadertest.NewServer(t), uploadertest.NewServer(t), uploadertest.NewServer(t)
	down.Down()
	f := newBlossomFixture(t, []string{a.URL, b.URL + "/", c.URL, down.URL}, func(cfg *uploader.Config) {
		cfg.DisableRetry, cfg.MinReplicas = true, 2
	})
	tiles := addTiles(t, f.store, "job-7", 4, 100)
	refused := tiles[1].SHA256
	c.Reject(refused, -1, http.StatusPaymentRequired, "pay first")
	b.Reject(tiles[3].SHA256, -1, http.StatusRequestEntityTooLarge, "too big")
	c.Reject(tiles[3].SHA256, -1, http.StatusRequestEntityTooLarge, "too big")
	_ = addTiles(t, f.store, "other", 1, 100)
	if _, err := f.up.UploadPending(ctx, uploader.Request{Workload: "job-7"}); err != nil {
		t.Fatalf("UploadPending = %v", err)
	}
	if st := status(t, f.store, tiles[3].ID); st != uploader.StatusPending {
		t.Fatalf("tile acked by 1 of min_replicas 2 is %s, want pending", st)
	}

	all := []string{tiles[0].SHA256, tiles[1].SHA256, tiles[2].SHA256, tiles[3].SHA256}
	three := []string{a.URL, b.URL, c.URL}
	for _, tc := range []struct {
		name    string
		shas    []string
		servers []string
		want    int
	}{
		{"every tile, three servers", all[:3], three, 2},
		{"tiles on all three", []string{all[0], all[2]}, three, 3},
		{"tile below min_replicas still placed once", all[3:], three, 1},
		{"every tile", all, three, 1},
		{"the down server holds nothing", all[:1], []string{down.URL}, 0},
		{"servers compare without trailing slash", all[:1], []string{a.URL + "/", b.URL}, 2},
		{"a server named twice counts once", all[:1], []string{a.URL, a.URL, a.URL + "/"}, 1},
		{"other servers do not count", all[:1], []string{"https://elsewhere.example"}, 0},
		{"a blob placed nowhere", append([]string{strings.Repeat("0", 64)}, all[0]), three, 0},
		{"repeated blobs", []string{all[0], all[0]}, three, 3},
		{"no servers", all, nil, 0},
	} {
		got, err := f.store.Placed(ctx, "job-7", tc.shas, tc.servers)
		if err != nil || got != tc.want {
			t.Errorf("Placed(%s) = %d, %v, want %d", tc.name, got, err, tc.want)
		}
	}
	if got, err := f.store.Placed(ctx, "other", all, three); err != nil || got != 0 {
		t.Errorf("Placed(another workload's name) = %d, %v, want 0: placements are per workload", got, err)
	}
	if _, err := f.store.Placed(ctx, "job-7", nil, three); err == nil {
		t.Errorf("Placed(no blobs) = nil error, want one")
	}

	// The rows themselves: one per acking server, at the store's clock.
	rows, err := f.store.Placements(ctx, "job-7")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		all[0]: {a.URL, b.URL, c.URL}, all[1]: {a.URL, b.URL}, all[2]: {a.URL, b.URL, c.URL}, all[3]: {a.URL},
	}
	got := map[string][]string{}
	for _, p := range rows {
		got[p.SHA256] = append(got[p.SHA256], p.Server)
		if !p.PlacedAt.Equal(f.clock.Now().Truncate(time.Millisecond)) {
			t.Errorf("placement %+v placed_at = %v, want the store clock %v", p, p.PlacedAt, f.clock.Now())
		}
	}
	for sha, servers := range want {
		if !slices.Equal(got[sha], slices.Sorted(slices.Values(servers))) {
			t.Errorf("placements of %s = %v, want %v", sha[:8], got[sha], servers)
		}
	}
}
