package agentdb

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"provideragent/internal/sqlitedb"
)

// benchSnapshot is a workload snapshot of realistic size (~1 KiB of JSON).
var benchSnapshot = json.RawMessage(`{"state":"live","epoch":3,"pad":"` + strings.Repeat("x", 1000) + `"}`)

func benchStore(b *testing.B) *Store {
	b.Helper()
	db, err := sqlitedb.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlitedb.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	s, err := Open(context.Background(), db)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE baseline (id TEXT PRIMARY KEY, v TEXT)`); err != nil {
		b.Fatal(err)
	}
	return s
}

// rawCommitsPerSecond measures the baseline: n commits of one plain upsert
// of the same size, on the same file. The value changes every time (an
// unchanged row would make the commit a no-op without an fsync).
func rawCommitsPerSecond(b *testing.B, s *Store, n int) float64 {
	b.Helper()
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := s.DB().Exec(`INSERT INTO baseline (id, v) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET v = excluded.v`,
			fmt.Sprint(i%50), fmt.Sprint(i)+string(benchSnapshot)); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkSaveStep commits one machine step (rowsPerStep workload rows and
// one cursor) per transaction with synchronous=FULL, and reports steps/s and
// the ratio to a plain one-row commit measured in the same run.
func BenchmarkSaveStep(b *testing.B) {
	for _, rowsPerStep := range []int{1, 100} {
		b.Run(fmt.Sprintf("rows=%d", rowsPerStep), func(b *testing.B) {
			s := benchStore(b)
			ctx := context.Background()
			base := rawCommitsPerSecond(b, s, 200)
			rows := make([]WorkloadRow, rowsPerStep)
			for i := range rows {
				rows[i] = WorkloadRow{ID: fmt.Sprintf("w%04d", i), State: "live", Epoch: 3,
					Spec: json.RawMessage(`{"id":"x"}`), Snapshot: benchSnapshot}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				err := s.SaveStep(ctx, nil, Step{Workloads: rows, Cursors: map[string]int64{"wss://r.example": int64(i)}})
				if err != nil {
					b.Fatal(err)
				}
			}
			steps := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(steps, "steps/s")
			b.ReportMetric(steps*float64(rowsPerStep), "rows/s")
			b.ReportMetric(base, "baseline_commits/s")
			b.ReportMetric(steps/base, "ratio_to_baseline")
		})
	}
}
