package uploader_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"provideragent/internal/sqlitedb"
	"provideragent/uploader"
)

// instantInner is an in-memory Uploader that succeeds at once.
type instantInner struct{ rep uploader.Report }

func (i *instantInner) UploadPending(context.Context, uploader.Request) (uploader.Report, error) {
	return i.rep, nil
}
func (i *instantInner) EnumeratePending(context.Context, string) ([]uploader.Tile, error) {
	return nil, nil
}
func (i *instantInner) ConfirmState(context.Context) error { return nil }

// benchInner keeps the baseline call an interface call the compiler cannot
// devirtualise.
var benchInner uploader.Uploader

// BenchmarkRetryOverhead: one op is a RetryUploader.UploadPending whose inner
// (in memory) succeeds at once with a 10-tile report, the decorator holding a
// real SQLite tile store. Reports the inner called directly (baseline,
// measured in the same run) and the decorator's overhead over it. Target:
// under 50 us/op.
func BenchmarkRetryOverhead(b *testing.B) {
	ctx := context.Background()
	store := newStore(b, nil)
	tiles := addTiles(b, store, "w", 10, 64)
	rep := uploader.Report{Outcome: uploader.OutcomeSuccess}
	for _, t := range tiles {
		rep.Tiles = append(rep.Tiles, uploader.TileResult{TileID: t.ID, SHA256: t.SHA256, Size: t.Size, Verdict: uploader.VerdictAccepted, Code: 200})
		rep.Accepted++
		rep.BytesUploaded += t.Size
	}
	inner := &instantInner{rep: rep}
	r, err := uploader.NewRetryUploader(inner, uploader.DefaultConfig(), uploader.Deps{Store: store, Clock: newFakeClock()})
	if err != nil {
		b.Fatal(err)
	}
	req := uploader.Request{Workload: "w"}
	benchInner = inner // called through the interface, as the decorator does
	b.StopTimer()
	start := time.Now()
	for range b.N {
		if _, err := benchInner.UploadPending(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	base := time.Since(start)
	b.ResetTimer()
	b.StartTimer()
	start = time.Now()
	for range b.N {
		if _, err := r.UploadPending(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	dec := time.Since(start)
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(base.Nanoseconds())/n, "inner-ns/op")
	b.ReportMetric(float64((dec-base).Nanoseconds())/n, "overhead-ns/op")
}

// BenchmarkIncrementUploadAttempts: one op is one UPDATE ... RETURNING on a
// real SQLite file in WAL mode, cycling over 100 tiles, with
// synchronous=FULL (the agent's default: an fsync per commit) and NORMAL.
// Reports the p50 and p99 latency of single calls. Target: p99 under 1 ms.
func BenchmarkIncrementUploadAttempts(b *testing.B) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		b.Run("synchronous="+sync, func(b *testing.B) {
			ctx := context.Background()
			db, err := sqlitedb.Open(ctx, openDB(b), sqlitedb.Options{Synchronous: sync})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			store, err := uploader.NewStore(ctx, db, nil)
			if err != nil {
				b.Fatal(err)
			}
			tiles := addTiles(b, store, "w", 100, 16)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				if _, err := store.IncrementUploadAttempts(ctx, tiles[i%len(tiles)].ID); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) }
			b.ReportMetric(q(0.50), "p50-ns")
			b.ReportMetric(q(0.99), "p99-ns")
		})
	}
}

// BenchmarkRetryPartialPass: one op is a decorated UploadPending whose first
// inner pass rejects 1 of 10 tiles and whose retry succeeds: the real cost of
// a retry (increment, pending count, fake sleep, second pass, and the fake
// inner's own MarkUploaded/RecordRejection writes) on a real SQLite file.
func BenchmarkRetryPartialPass(b *testing.B) {
	ctx := context.Background()
	store := newStore(b, nil)
	cfg := uploader.DefaultConfig()
	cfg.MaxPerTileAttempts = 1 << 30
	b.StopTimer()
	for i := range b.N {
		w := fmt.Sprintf("w%d", i)
		tiles := addTiles(b, store, w, 10, 32)
		bad := tiles[3].ID
		inner := &scriptedInner{store: store, reject: func(call int, t uploader.Tile) bool { return call == 1 && t.ID == bad }}
		r, err := uploader.NewRetryUploader(inner, cfg, uploader.Deps{Store: store, Clock: newFakeClock()})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		rep, err := r.UploadPending(ctx, uploader.Request{Workload: w})
		b.StopTimer()
		if err != nil || rep.Outcome != uploader.OutcomeSuccess || rep.RetryCount != 1 {
			b.Fatalf("UploadPending = %s retry %d (%v), want success after 1 retry", rep.Outcome, rep.RetryCount, err)
		}
	}
}
