package agent

import (
	"context"
	"os"
	"testing"
	"time"

	"provideragent/lease"
)

// BenchmarkDurable measures a durable workload's recovery point and time
// (issue 28 item 5) with the demo timings (1 s heartbeats, takeover 12 s),
// the counter counting every 10 ms and checkpointing every 200 ms:
//
//   - cut: the primary is cut off from two of three relays; it fences
//     itself and its revocation names its last published checkpoint.
//     rpo_ms is how old the last published checkpoint was at the cut (the
//     recovery point: at most one checkpoint interval plus a publish),
//     lost_values how many counts the standby does not resume (the
//     primary's value when it stopped minus the standby's first: this
//     includes what the cut-off primary counted until it fenced itself,
//     which it could not publish), rto_s the time from the cut to the
//     standby's counter starting.
//
//   - move: workloads move. rpo_values (0 expected) and rto_s from the
//     command to the standby's counter starting.
//
//     go test ./agent -run '^$' -bench BenchmarkDurable -benchtime 3x
func BenchmarkDurable(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("workloads run as users of their own: needs root")
	}
	b.Run("profile=demo/cut", func(b *testing.B) {
		var lost, rpoMS, rto float64
		for range b.N {
			d := startDurable(b, "bc", 2)
			cut := time.Now()
			for _, p := range d.proxies {
				p.Cut()
			}
			waitFor(b, 40*time.Second, "the counter started at epoch 2", func() bool { _, ok := startsAt(b, d.starts, 2); return ok })
			rto += time.Since(cut).Seconds()
			first, _ := startsAt(b, d.starts, 2)
			waitFor(b, 10*time.Second, "the primary's counter stopped", func() bool { _, ok := finalAt(b, d.starts, 1); return ok })
			final, _ := finalAt(b, d.starts, 1)
			lost += float64(final - first)
			if last, ok := d.primary.a.ckpt.publisher.Last("bc"); ok {
				rpoMS += float64(cut.Sub(last.TakenAt).Milliseconds())
			}
			d.primary.stop()
			d.standby.stop()
		}
		n := float64(b.N)
		b.ReportMetric(lost/n, "lost_values")
		b.ReportMetric(rpoMS/n, "rpo_ms")
		b.ReportMetric(rto/n, "rto_s")
	})
	b.Run("profile=demo/move", func(b *testing.B) {
		var rpo, rto float64
		for range b.N {
			d := startDurable(b, "bm", 0)
			moved := time.Now()
			if _, err := QueueMove(context.Background(), d.primary.a.data.db, "bm", "", moved); err != nil {
				b.Fatal(err)
			}
			waitFor(b, 30*time.Second, "the counter started at epoch 2", func() bool { _, ok := startsAt(b, d.starts, 2); return ok })
			rto += time.Since(moved).Seconds()
			first, _ := startsAt(b, d.starts, 2)
			final, _ := finalAt(b, d.starts, 1)
			rpo += float64(final - first)
			d.standby.waitState("bm", lease.StateLive, 2, 10*time.Second)
			d.primary.stop()
			d.standby.stop()
		}
		n := float64(b.N)
		b.ReportMetric(rpo/n, "rpo_values")
		b.ReportMetric(rto/n, "rto_s")
	})
}
