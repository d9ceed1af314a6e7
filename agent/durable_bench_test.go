package agent

import (
	"context"
	"os"
	"testing"
	"time"

	"provideragent/lease"
)

// BenchmarkDurable measures a durable workload's recovery point and time
// with the counter counting every 10 ms and checkpointing
// every 200 ms, for the demo timings (1 s heartbeats, takeover_after 12 s)
// and, with DURABLE_BENCH_ALL=1, the faster profile (fastProfile) and the
// default timings (defaultProfile: 60 s heartbeats; a run takes about
// 15 minutes).
//
// cut: the primary is cut off from two of three relays; it fences itself
// and its revocation names its last published checkpoint. rpo_ms is how
// old the last published checkpoint was at the cut (the recovery point: at
// most one checkpoint interval plus a publish); lost_values how many counts
// the standby does not resume (the primary's value when it stopped minus
// the standby's first: this includes what the cut-off primary counted
// until it fenced itself, which it could not publish); rto_s the time from
// the cut to the standby's counter starting.
//
// move: workloads move; rpo_values (0 expected) and rto_s from the command
// to the standby's counter starting.
//
//	go test ./agent -run '^$' -bench BenchmarkDurable -benchtime 3x
//	DURABLE_BENCH_ALL=1 go test ./agent -run '^$' -bench 'BenchmarkDurable/profile=fast' -benchtime 1x
//	DURABLE_BENCH_ALL=1 go test ./agent -run '^$' -bench 'BenchmarkDurable/profile=default' -benchtime 1x -timeout 40m
func BenchmarkDurable(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("workloads run as users of their own: needs root")
	}
	profiles := []struct {
		name string
		cfg  func([]string) lease.Config
	}{{"demo", lease.DemoConfig}}
	if os.Getenv("DURABLE_BENCH_ALL") != "" {
		profiles = append(profiles, struct {
			name string
			cfg  func([]string) lease.Config
		}{"fast", fastProfile}, struct {
			name string
			cfg  func([]string) lease.Config
		}{"default", defaultProfile})
	}
	for _, p := range profiles {
		b.Run("profile="+p.name+"/cut", func(b *testing.B) { benchCut(b, p.cfg) })
		b.Run("profile="+p.name+"/move", func(b *testing.B) { benchMove(b, p.cfg) })
	}
}

// fastProfile is docs/durable.md's faster profile: 5 s heartbeats, the
// takeover bound t1+t2+stale+max_skew+relay_delay = 55 s, takeover_after
// 75 s.
func fastProfile(relays []string) lease.Config {
	c := lease.DefaultConfig()
	c.M, c.N, c.Relays = min(2, len(relays)), len(relays), relays
	c.HeartbeatInterval = 5 * time.Second
	c.Stale = 15 * time.Second
	c.T1 = 10 * time.Second
	c.T2 = 20 * time.Second
	c.MaxSkew = 5 * time.Second
	c.RelayDelay = 5 * time.Second
	c.ProvisionTimeout = 30 * time.Second
	c.ClaimTimeout = 10 * time.Second
	c.ClaimRetryBase = 5 * time.Second
	c.ClaimRetryMax = 20 * time.Second
	c.TakeoverAfter = 75 * time.Second
	return c
}

// defaultProfile is lease.DefaultConfig over the benchmark's relays.
func defaultProfile(relays []string) lease.Config {
	c := lease.DefaultConfig()
	c.M, c.N, c.Relays = min(2, len(relays)), len(relays), relays
	return c
}

// recoveryBound is how long a benchmark waits for the standby's counter:
// beyond the takeover bound, so that only a failure times out.
func recoveryBound(profile func([]string) lease.Config) time.Duration {
	return max(3*time.Minute, profile([]string{"ws://a", "ws://b", "ws://c"}).TakeoverAfter+2*time.Minute)
}

func benchCut(b *testing.B, profile func([]string) lease.Config) {
	var lost, rpoMS, rto float64
	for range b.N {
		d := startDurable(b, "bc", 2, profile)
		cut := time.Now()
		for _, p := range d.proxies {
			p.Cut()
		}
		waitFor(b, recoveryBound(profile), "the counter started at epoch 2", func() bool { _, ok := startsAt(b, d.starts, 2); return ok })
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
}

func benchMove(b *testing.B, profile func([]string) lease.Config) {
	var rpo, rto float64
	for range b.N {
		d := startDurable(b, "bm", 0, profile)
		moved := time.Now()
		if _, err := QueueMove(context.Background(), d.primary.a.data.db, "bm", "", moved); err != nil {
			b.Fatal(err)
		}
		waitFor(b, recoveryBound(profile), "the counter started at epoch 2", func() bool { _, ok := startsAt(b, d.starts, 2); return ok })
		rto += time.Since(moved).Seconds()
		first, _ := startsAt(b, d.starts, 2)
		final, _ := finalAt(b, d.starts, 1)
		rpo += float64(final - first)
		d.primary.stop()
		d.standby.stop()
	}
	n := float64(b.N)
	b.ReportMetric(rpo/n, "rpo_values")
	b.ReportMetric(rto/n, "rto_s")
}
