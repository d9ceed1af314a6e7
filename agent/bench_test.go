package agent

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"provideragent/internal/cutproxy"
	"provideragent/internal/relaytest"
	"provideragent/lease"
)

// rssMiB reads this process's resident set size from /proc (0 elsewhere).
func rssMiB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// peakRSSMiB reads this process's peak resident set size (VmHWM) since it
// started or since resetPeakRSS (0 elsewhere).
func peakRSSMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// resetPeakRSS sets the peak resident set size to the current one (Linux:
// clear_refs 5), so that peakRSSMiB reads the peak of what follows.
func resetPeakRSS() error { return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// BenchmarkAgentMemory10k: one agent holding 10,000 Live workloads over 3
// relays (heartbeats of ~300 KB listing them all). Reports the process RSS
// and Go heap once all are Live, against the RSS measured before the agent
// started (the baseline). Target: rss-MiB under 100.
func BenchmarkAgentMemory10k(b *testing.B) {
	const n = 10000
	_, urls := relaytest.StartN(b, 3)
	lcfg := lease.DemoConfig(urls)
	lcfg.ProvisionTimeout = lcfg.T1 + lcfg.T2
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		runtime.GC()
		base := rssMiB()
		b.StartTimer()
		start := time.Now()
		a, _, stop := startBulkAgent(b, n, lcfg, b.TempDir()+"/mem.db")
		deadline := time.Now().Add(90 * time.Second)
		for liveCount(a) < n {
			if time.Now().After(deadline) {
				b.Fatalf("only %d of %d workloads Live after 90 s", liveCount(a), n)
			}
			time.Sleep(100 * time.Millisecond)
		}
		allLive := time.Since(start)
		time.Sleep(3 * time.Second) // a few heartbeat rounds in the steady state
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		rss := rssMiB()
		if p := os.Getenv("AGENT_HEAP_PROFILE"); p != "" {
			if f, err := os.Create(p); err == nil {
				_ = pprof.WriteHeapProfile(f)
				f.Close()
			}
		}
		b.ReportMetric(rss, "rss-MiB")
		b.ReportMetric(base, "baseline-rss-MiB")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		b.ReportMetric(allLive.Seconds(), "s-to-all-live")
		b.StopTimer()
		stop()
	}
}

// BenchmarkFailover: the demo configuration over child-process relays; one
// op is a primary cut off from 2 of 3 relays until the standby is Live at
// epoch 2. Reports failover-s and the bound t1+t2+stale+relay_delay+2s.
func BenchmarkFailover(b *testing.B) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		rs, urls := relaytest.StartN(b, 3)
		lcfg := lease.DemoConfig(urls)
		var proxies []*cutproxy.Proxy
		dial := map[string]string{}
		for j := range 2 {
			p, err := cutproxy.New(rs[j].Addr())
			if err != nil {
				b.Fatal(err)
			}
			proxies = append(proxies, p)
			dial[urls[j]] = p.URL()
		}
		primary := startAgent(b, agentOpts{name: "primary", lcfg: lcfg, dial: dial})
		standby := startAgent(b, agentOpts{name: "standby", lcfg: lcfg})
		spec := warmSpec("w1", primary.pub, standby.pub, urls)
		primary.a.Track(context.Background(), spec)
		standby.a.Track(context.Background(), spec)
		waitFor(b, 20*time.Second, "primary live", func() bool { return hasState(primary.log, "w1", lease.StateLive, 1) })
		b.StartTimer()
		cut := time.Now()
		for _, p := range proxies {
			p.Cut()
		}
		waitFor(b, 60*time.Second, "standby live at epoch 2", func() bool { return hasState(standby.log, "w1", lease.StateLive, 2) })
		took := time.Since(cut)
		b.StopTimer()
		bound := lcfg.T1 + lcfg.T2 + lcfg.Stale + lcfg.RelayDelay + 2*time.Second
		b.ReportMetric(took.Seconds(), "failover-s")
		b.ReportMetric(bound.Seconds(), "bound-s")
		primary.stop()
		standby.stop()
		for _, p := range proxies {
			p.Close()
		}
	}
}

func hasState(l *eventLog, id string, st lease.State, epoch uint64) bool {
	_, ok := l.find(func(e Event) bool {
		return e.Kind == "state" && e.Workload == id && e.State == string(st) && e.Epoch == epoch
	})
	return ok
}
