package uploader_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"provideragent/internal/sqlitedb"
	"provideragent/uploader"
)

// stepClock is a clock whose Sleep returns at once and is remembered, so
// that the decorator's backoff shows without waiting for it.
type stepClock struct {
	now    time.Time
	sleeps []time.Duration
}

func (c *stepClock) Now() time.Time { return c.now }

func (c *stepClock) Sleep(_ context.Context, d time.Duration) error {
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return nil
}

// flakyServer is an Uploader that rejects every tile the first time it
// sees it and accepts it after: a Blossom server with a transient refusal.
type flakyServer struct {
	store *uploader.Store
	seen  map[int64]bool
}

func (f *flakyServer) UploadPending(ctx context.Context, req uploader.Request) (uploader.Report, error) {
	tiles, err := f.store.PendingUploads(ctx, req.Workload, req.Limit)
	if err != nil {
		return uploader.Report{}, err
	}
	var rep uploader.Report
	for _, t := range tiles {
		r := uploader.TileResult{TileID: t.ID, SHA256: t.SHA256, Size: t.Size, Verdict: uploader.VerdictAccepted}
		if !f.seen[t.ID] {
			f.seen[t.ID] = true
			r.Verdict, r.Reason = uploader.VerdictRejected, "try again"
			rep.Rejected++
		} else {
			if err := f.store.MarkUploaded(ctx, t.ID); err != nil {
				return rep, err
			}
			rep.Accepted++
		}
		rep.Tiles = append(rep.Tiles, r)
	}
	rep.Outcome = uploader.OutcomeSuccess
	if rep.Rejected > 0 {
		rep.Outcome = uploader.OutcomePartial // some servers refused some tiles
	}
	return rep, nil
}

func (f *flakyServer) EnumeratePending(ctx context.Context, workload string) ([]uploader.Tile, error) {
	return f.store.PendingUploads(ctx, workload, 0)
}

func (f *flakyServer) ConfirmState(context.Context) error { return nil }

// The retry decorator wraps any Uploader: a partial outcome (some tiles
// rejected) is retried within the call after a backoff, re-sending only
// the tiles not yet accepted, and each rejection counts against the tile's
// budget (MaxPerTileAttempts) across calls.
func ExampleRetryUploader() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "uploader-")
	defer os.RemoveAll(dir)
	db, err := sqlitedb.Open(ctx, filepath.Join(dir, "tiles.db"), sqlitedb.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	clock := &stepClock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	store, err := uploader.NewStore(ctx, db, clock)
	if err != nil {
		fmt.Println(err)
		return
	}
	// A checkpoint of 10 bytes, cut into tiles of 4: three tiles.
	m, n, err := store.AddFile(ctx, "counter-1", strings.NewReader("0123456789"), 4)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("tiles:", n, "of", len(m.Tiles))

	server := &flakyServer{store: store, seen: map[int64]bool{}}
	up, err := uploader.NewRetryUploader(server, uploader.DefaultConfig(), uploader.Deps{Store: store, Clock: clock})
	if err != nil {
		fmt.Println(err)
		return
	}
	rep, err := up.UploadPending(ctx, uploader.Request{Workload: "counter-1"})
	fmt.Println(rep.Outcome, "accepted", rep.Accepted, "retries", rep.RetryCount, "err", err)
	fmt.Println("slept:", clock.sleeps)
	left, _ := store.CountPending(ctx, "counter-1")
	fmt.Println("pending:", left)
	// Output:
	// tiles: 3 of 3
	// success accepted 3 retries 1 err <nil>
	// slept: [2s]
	// pending: 0
}
