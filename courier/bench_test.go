package courier

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"provideragent/internal/sqlitedb"
)

// BenchmarkSend measures durable sends (synchronous=FULL). serial: one op
// is one Send. concurrent=64: one op is a round of 64 concurrent Sends,
// which group commit folds into few transactions; "x-serial" compares it
// with a serial baseline measured in the same run.
func BenchmarkSend(b *testing.B) {
	bundle := make([]byte, 512)
	b.Run("serial", func(b *testing.B) {
		e := newEnv(b, nil, Deps{})
		ctx := context.Background()
		b.ResetTimer()
		start := time.Now()
		for range b.N {
			if _, err := e.c.Send(ctx, bundle, "bench", SendOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "sends/s")
	})
	b.Run("concurrent=64", func(b *testing.B) {
		const workers = 64
		e := newEnv(b, nil, Deps{})
		ctx := context.Background()
		serial := measureSerial(b, e, bundle, 200)
		total := int64(b.N) * workers
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		start := time.Now()
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= total {
					if _, err := e.c.Send(ctx, bundle, "bench", SendOptions{}); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		rate := float64(total) / time.Since(start).Seconds()
		b.StopTimer()
		b.ReportMetric(rate, "sends/s")
		b.ReportMetric(rate/serial, "x-serial")
	})
}

// measureSerial returns the serial send rate over n sends.
func measureSerial(b *testing.B, e *env, bundle []byte, n int) float64 {
	b.Helper()
	start := time.Now()
	for range n {
		if _, err := e.c.Send(context.Background(), bundle, "bench", SendOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkFlush runs one Flush over 10,000 due receipts with a forwarder
// of 1 ms latency and concurrency 32; fail=N makes N percent of receipts
// fail (they are rescheduled, not waited for). "x-ideal" is the wall time
// over the ideal 10,000 x 1 ms / 32; "x-bare-pool" is the wall time over a
// bare worker pool running the same forwarder without a database.
func BenchmarkFlush(b *testing.B) {
	const (
		receipts    = 10000
		concurrency = 32
		latency     = time.Millisecond
	)
	ideal := time.Duration(receipts) * latency / concurrency
	for _, failPct := range []int{0, 10} {
		b.Run(fmt.Sprintf("fail=%d", failPct), func(b *testing.B) {
			fwd := ForwarderFunc(func(ctx context.Context, d Delivery) error {
				time.Sleep(latency)
				if failPct > 0 && int(uint64(d.ReceiptID)%100) < failPct {
					return ServerError(errBoom)
				}
				return nil
			})
			var total, baseline time.Duration
			b.StopTimer()
			for range b.N {
				e := newEnv(b, func(c *Config) { c.Concurrency = concurrency }, Deps{})
				fillReceipts(b, e, receipts)
				baseline += bareWorkerPool(fwd, receipts, concurrency)
				b.StartTimer()
				start := time.Now()
				res, err := e.c.Flush(context.Background(), fwd)
				total += time.Since(start)
				b.StopTimer()
				if err != nil || res.Acknowledged+res.Retried != receipts {
					b.Fatalf("Flush = %+v, %v, want %d outcomes", res, err, receipts)
				}
				e.c.Close()
				e.db.Close()
			}
			wall := total / time.Duration(b.N)
			base := baseline / time.Duration(b.N)
			b.ReportMetric(float64(wall)/float64(ideal), "x-ideal")
			b.ReportMetric(float64(wall)/float64(base), "x-bare-pool")
			b.ReportMetric(float64(receipts)/wall.Seconds(), "deliveries/s")
		})
	}
}

// bareWorkerPool is the baseline: the same forwarder over n deliveries
// with the same concurrency and no database, measured in the same run (the
// machine's sleep granularity and load are in it too).
func bareWorkerPool(fwd Forwarder, n, concurrency int) time.Duration {
	jobs := make(chan Delivery, 256)
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range jobs {
				_ = fwd.Forward(context.Background(), d)
			}
		}()
	}
	for i := range n {
		jobs <- Delivery{ReceiptID: ID(i + 1)}
	}
	close(jobs)
	wg.Wait()
	return time.Since(start)
}

// fillReceipts stores n due receipts in one transaction.
func fillReceipts(b *testing.B, e *env, n int) {
	b.Helper()
	ctx := context.Background()
	err := sqlitedb.InTx(ctx, e.db, func(tx *sql.Tx) error {
		for i := range n {
			if _, err := e.c.SendTx(ctx, tx, []byte(fmt.Sprint("bundle-", i)), "bench", SendOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
