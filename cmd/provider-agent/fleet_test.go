package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// Fleet sizes and shape, by flag or environment (the flag wins):
//
//	go test ./cmd/provider-agent -run '^$' -bench BenchmarkFleet -benchtime 1x -timeout 3h \
//	    -args -fleet.providers 100 -fleet.workloads 10000
//	FLEET_PROVIDERS=100 FLEET_WORKLOADS=10000 go test ./cmd/provider-agent -run '^$' -bench BenchmarkFleet -benchtime 1x -timeout 3h
//
// FLEET_LOGDIR keeps each agent's log (p<i>.log) there, and
// FLEET_LOGLEVEL=debug makes them log every claim step and read.
var (
	fleetProvidersFlag = flag.Int("fleet.providers", 0, "BenchmarkFleet/TestFleet: providers (env FLEET_PROVIDERS; default 12)")
	fleetWorkloadsFlag = flag.Int("fleet.workloads", 0, "BenchmarkFleet/TestFleet: workloads (env FLEET_WORKLOADS; default 300)")
	fleetProfileFlag   = flag.String("fleet.profile", "", "BenchmarkFleet/TestFleet: lease timings, fast, ci (0.4 x fast) or demo (env FLEET_PROFILE; default fast for the benchmark, ci for the test)")
	fleetRestFlag      = flag.Duration("fleet.rest", 0, "BenchmarkFleet/TestFleet: the at-rest window (env FLEET_REST; default 6 heartbeat intervals)")
	fleetRecordFlag    = flag.String("fleet.record", "", "BenchmarkFleet/TestFleet: 1 to record the starts and stops of workloads other than the durable counters and the rack's instead of running them, 0 to run every workload as a process (env FLEET_RECORD; default 1; needed past about 3,000 workloads on 23 GiB, and keeps a small fleet's start light on two cores)")
	fleetDrainFlag     = flag.Int("fleet.drain", 0, "BenchmarkFleet/TestFleet: providers drained one after another (env FLEET_DRAIN; default 10 % of the providers, at least one)")
	fleetPeersFlag     = flag.Int("fleet.peers", 0, "BenchmarkFleet/TestFleet: a primary's standbys are drawn from the next this many providers on other racks (env FLEET_PEERS; default 0: from every provider, so that every provider follows nearly every other)")
	fleetGrantRateFlag = flag.Int("fleet.grantrate", 0, "BenchmarkFleet/TestFleet: grants published a second (env FLEET_GRANT_RATE; default 400 in record mode, else 40)")
	fleetRateFlag      = flag.String("fleet.ratelimit", "", "BenchmarkFleet/TestFleet: 1 to have the khatru relay rate-limit per key and connection (env FLEET_RATELIMIT; default 1)")
)

// fleetOptsFromEnv reads the fleet's size and shape (defaults: 12 providers,
// 300 workloads, the given profile, a rack and a drain of 10 % of the
// providers, at least one each, the khatru relay rate-limited).
func fleetOptsFromEnv(tb testing.TB, profile fleetProfile) fleetOpts {
	tb.Helper()
	num := func(flagV int, env string, def int) int {
		if flagV > 0 {
			return flagV
		}
		if v := os.Getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				tb.Fatalf("%s = %q: want a positive number", env, v)
			}
			return n
		}
		return def
	}
	str := func(flagV, env, def string) string {
		if flagV != "" {
			return flagV
		}
		if v := os.Getenv(env); v != "" {
			return v
		}
		return def
	}
	o := fleetOpts{providers: num(*fleetProvidersFlag, "FLEET_PROVIDERS", 12), workloads: num(*fleetWorkloadsFlag, "FLEET_WORKLOADS", 300)}
	switch p := str(*fleetProfileFlag, "FLEET_PROFILE", profile.name); p {
	case "fast":
		o.profile = fastFleet
	case "ci":
		o.profile = ciFleet
	case "demo":
		o.profile = demoFleet
	default:
		tb.Fatalf("fleet profile %q: want fast, ci or demo", p)
	}
	o.rest = *fleetRestFlag
	if v := os.Getenv("FLEET_REST"); o.rest == 0 && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			tb.Fatalf("FLEET_REST = %q: want a positive duration", v)
		}
		o.rest = d
	}
	if o.rest == 0 {
		// CI's profile measures the rest only to check that relays refuse
		// nothing: three beats are enough and keep TestFleet short.
		o.rest = 6 * o.profile.lt.Heartbeat
		if o.profile.name == ciFleet.name {
			o.rest = 3 * o.profile.lt.Heartbeat
		}
	}
	o.rateLimit = str(*fleetRateFlag, "FLEET_RATELIMIT", "1") == "1"
	o.record = str(*fleetRecordFlag, "FLEET_RECORD", "1") == "1"
	if o.providers < 4 || o.workloads < o.providers {
		tb.Fatalf("a fleet of %d providers and %d workloads: want at least 4 providers and a workload each", o.providers, o.workloads)
	}
	o.peers = num(*fleetPeersFlag, "FLEET_PEERS", 0)
	o.grantsPerSecond = num(*fleetGrantRateFlag, "FLEET_GRANT_RATE", 0)
	o.rack = max(1, int(math.Round(float64(o.providers)/10)))
	o.drain = min(num(*fleetDrainFlag, "FLEET_DRAIN", o.rack), o.providers-o.rack)
	return o
}

// TestFleet is BenchmarkFleet's small size, which CI runs: 12 providers
// and 300 workloads (FLEET_PROVIDERS, FLEET_WORKLOADS) with the fast
// profile at 0.4 of its timings (FLEET_PROFILE=fast for the fast profile's
// own, two minutes longer), the four phases of runFleet. It fails when a workload ran
// twice, one of the rack's workloads was not Live elsewhere within the
// lease's bound, a workload was left without a holder, a drained workload
// was not moved or lost state, or a relay refused anything for its limits.
func TestFleet(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workloads run as users of their own: needs root")
	}
	if raceEnabled {
		t.Skip("the fleet's agents are child processes without the race detector: run TestFleet without -race")
	}
	t.Parallel()
	o := fleetOptsFromEnv(t, ciFleet)
	r := runFleet(t, o)
	r.log(t)
	r.check(t)
}

// BenchmarkFleet: a fleet of real agent processes on three
// relays (strfry-emulated, khatru rate-limited per key and connection,
// @nostr-relay/core), P providers and W workloads (-fleet.providers,
// -fleet.workloads; default 12 and 300) with the fast profile's timings,
// through four phases (runFleet): at rest, a rack of 10 % of the
// providers killed at once, the rack back, a rolling drain of another
// 10 %. Each op is one fleet; its figures are reported as metrics and
// printed as a table.
func BenchmarkFleet(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("workloads run as users of their own: needs root")
	}
	o := fleetOptsFromEnv(b, fastFleet)
	for range b.N {
		b.StopTimer()
		r := runFleet(b, o)
		r.log(b)
		r.check(b)
		r.report(b)
	}
}

// fleetResult is what runFleet measured.
type fleetResult struct {
	o          fleetOpts
	toAllLive  time.Duration
	rest       restFigures
	rack       rackFigures
	back       backFigures
	drains     []drainFigures
	twice      []string
	notHeld    []string // workloads without a holder at the end
	held2      []string // workloads Live on two providers at the end
	copiesSeen int
}

// runFleet starts a fleet and runs its phases: at rest, the rack's death,
// its return, the rolling drain.
func runFleet(tb testing.TB, o fleetOpts) *fleetResult {
	tb.Helper()
	res := &fleetResult{o: o}
	f := newFleet(tb, o)
	drained := map[int]bool{}
	for i := o.providers - o.drain; i < o.providers; i++ {
		drained[i] = true
	}
	t0 := time.Now()
	f.startAll(f.providers)
	f.waitSynced(2 * time.Minute)
	tb.Logf("phase start: %d agents synced after %.1fs", o.providers, time.Since(t0).Seconds())
	began := time.Now()
	f.grantAll(func(primary int) bool { return drained[primary] })
	f.waitPlaced(5*time.Minute + time.Duration(o.workloads)*20*time.Millisecond)
	res.toAllLive = time.Since(began)
	tb.Logf("fleet of %d providers, %d workloads (%d durable), profile %s: all Live and watched %.1fs after the first grant (%d a second)",
		o.providers, o.workloads, countDurable(f), o.profile.name, res.toAllLive.Seconds(), o.grantRate())

	phase := func(name string, run func()) {
		t0 := time.Now()
		run()
		tb.Logf("phase %s: %.1fs", name, time.Since(t0).Seconds())
	}
	phase("at rest", func() { res.rest = f.atRest() })
	phase("rack dies", func() { res.rack = f.rackDies() })
	phase("rack returns", func() { res.back = f.rackReturns() })
	phase("rolling drain", func() {
		for i := o.providers - o.drain; i < o.providers; i++ {
			res.drains = append(res.drains, f.drainOne(f.providers[i]))
		}
	})
	v := f.view(nil)
	live := v.liveOn()
	for _, w := range f.workloads {
		switch n := len(live[w.id]); {
		case n == 0:
			res.notHeld = append(res.notHeld, w.id)
		case n > 1:
			res.held2 = append(res.held2, fmt.Sprintf("%s on %v", w.id, live[w.id]))
		}
	}
	time.Sleep(2 * procScanEvery)
	res.twice = f.mon.twiceRun()
	res.copiesSeen = f.mon.copiesSeen()
	if o.record {
		twice, copies := f.recordedTwice()
		res.twice = append(res.twice, twice...)
		res.copiesSeen += copies
	}
	return res
}

func countDurable(f *fleet) int {
	n := 0
	for _, w := range f.workloads {
		if w.durable {
			n++
		}
	}
	return n
}

// waitPlaced waits until every workload is Live and running on one of its
// three members and watched (standby) by the other two, and notes where
// each is held. That is its primary unless the primary lost its quorum
// while the fleet started (on loaded cores, beside CI's other tests) and a
// standby took it over, as the lease has it do.
func (f *fleet) waitPlaced(limit time.Duration) {
	f.tb.Helper()
	f.waitView("every workload Live on a member and watched by the other two", limit, time.Second, func(v fleetView) (bool, string) {
		idx := indexView(v)
		missing := 0
		example := ""
		for _, w := range f.workloads {
			members := []int{w.primary, w.s1, w.s2}
			holder, standbys := -1, 0
			for _, m := range members {
				switch r := idx[m][w.id]; {
				case r.State == "live" && r.Running:
					holder = m
					w.epoch = r.Epoch
				case r.State == "standby":
					standbys++
				}
			}
			if holder < 0 || standbys != 2 {
				missing++
				if example == "" {
					p, s1, s2 := idx[w.primary][w.id], idx[w.s1][w.id], idx[w.s2][w.id]
					example = fmt.Sprintf("%s: primary %d %q running %v, standbys %d %q and %d %q", w.id, w.primary, p.State, p.Running, w.s1, s1.State, w.s2, s2.State)
				}
				continue
			}
			w.holder = holder
		}
		return missing == 0, fmt.Sprintf("%d of %d not placed (e.g. %s)", missing, len(f.workloads), example)
	})
	moved := 0
	for _, w := range f.workloads {
		if w.holder != w.primary {
			moved++
		}
	}
	if moved > 0 {
		f.tb.Logf("%d workloads held by a standby once placed: their primary lost its quorum while the fleet started", moved)
	}
}

// indexView is a view's workloads by provider and id.
func indexView(v fleetView) map[int]map[string]workloadRow {
	out := map[int]map[string]workloadRow{}
	for i, st := range v.by {
		m := make(map[string]workloadRow, len(st.Workloads))
		for _, w := range st.Workloads {
			m[w.ID] = workloadRow{State: w.State, Epoch: w.Epoch, Running: w.Running, Holder: w.Primary}
		}
		out[i] = m
	}
	return out
}

// workloadRow is one provider's row of a workload.
type workloadRow struct {
	State   string
	Epoch   uint64
	Running bool
	Holder  string
}

// percentile is the p-th percentile (0..100) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}
