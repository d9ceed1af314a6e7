package lease

import (
	"fmt"
	"testing"
	"time"
)

const benchProviders = 1000

var benchSizes = []int{1000, 10000, 100000}

func benchKey(i int) string { return fmt.Sprintf("%064x", i+1) }

// benchMachine builds provider 0's machine over n workloads spread over 1000
// providers: provider 0 holds every 1000th workload and is first standby of
// all others, so every workload does real work in Tick (holder quorum checks
// or standby takeover checks over 3 relays).
func benchMachine(b *testing.B, n int) (*Machine, []Heartbeat) {
	b.Helper()
	cfg := testConfig()
	m, err := New(cfg, benchKey(0))
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		k := i % benchProviders
		spec := Spec{
			ID: fmt.Sprintf("w%d", i), Primary: benchKey(k), Replication: ReplicationWarmStandby,
			RestartPolicy: RestartPolicy{Policy: RestartOnFailure, MaxAttempts: 3}, Epoch: 1,
		}
		switch {
		case k == 0:
			spec.Standbys = []string{benchKey(1)}
		case k == benchProviders-1:
			spec.Standbys = []string{benchKey(0), benchKey(1)}
		default:
			spec.Standbys = []string{benchKey(0), benchKey(k + 1)}
		}
		if _, err := m.Track(t0, spec); err != nil {
			b.Fatal(err)
		}
	}
	hbs := make([]Heartbeat, 0, benchProviders*len(cfg.Relays))
	for p := 0; p < benchProviders; p++ {
		for _, r := range cfg.Relays {
			hbs = append(hbs, Heartbeat{Provider: benchKey(p), Relay: r})
		}
	}
	return m, hbs
}

// oursTick is one op of ours: one heartbeat per provider per relay since the
// last tick, then one Tick over all workloads.
func oursTick(m *Machine, hbs []Heartbeat, now time.Time) int {
	for i := range hbs {
		hbs[i].CreatedAt, hbs[i].ReceivedAt = now, now
		m.ObserveHeartbeat(now, hbs[i])
	}
	return len(m.Tick(now))
}

// BenchmarkTick measures one Tick over all workloads after one heartbeat
// per provider per relay (the heartbeats are fed inside the op, as the first
// version's tick took them as input). "warm" is the steady state, where Tick skips
// workloads whose next deadline lies ahead; "cold" forces every workload to
// be evaluated (O(workloads*N)), the cost after a restore or when every
// deadline is due. For workloads <= 10000 the first version's algorithm (a
// full scan per tick, seedOp) is measured in
// the same run and the ratio reported as x-baseline (best of 3 each, which
// resists noise on a shared machine).
func BenchmarkTick(b *testing.B) {
	for _, n := range benchSizes {
		for _, mode := range []string{"warm", "cold"} {
			name := fmt.Sprintf("workloads=%d", n)
			if mode == "cold" {
				name += "/cold"
			}
			b.Run(name, func(b *testing.B) {
				m, hbs := benchMachine(b, n)
				now := t0
				for i := 0; i < 3; i++ { // reach the steady state: everyone Live or Standby
					now = now.Add(60 * time.Second)
					oursTick(m, hbs, now)
				}
				op := func() {
					now = now.Add(60 * time.Second)
					if mode == "cold" {
						clear(m.wake)
					}
					if effs := oursTick(m, hbs, now); effs != 0 {
						b.Fatalf("Tick in the steady state returned %d effects", effs)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					op()
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/tick")
				if n > 10000 {
					return
				}
				ours := bestOf(3, op)
				base := bestOf(3, seedOp(n))
				b.ReportMetric(float64(base)/float64(ours), "x-baseline")
			})
		}
	}
}

// bestOf returns the fastest of k runs of op.
func bestOf(k int, op func()) time.Duration {
	best := time.Duration(1<<63 - 1)
	for i := 0; i < k; i++ {
		start := time.Now()
		op()
		if d := time.Since(start); d < best {
			best = d
		}
	}
	return best
}

// seedOp returns one op of the first version's algorithm (every workload
// scanned on every tick) over n workloads: the baseline of BenchmarkTick.
func seedOp(n int) func() {
	sm, obs := seedSetup(n)
	now := uint64(t0.Unix())
	return func() {
		now += 60
		for j := range obs {
			obs[j].seenAt, obs[j].eventTimestamp = now, now
		}
		sm.tick(now, obs)
	}
}

func BenchmarkTickSeedBaseline(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("workloads=%d", n), func(b *testing.B) {
			op := seedOp(n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				op()
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/tick")
		})
	}
}

func BenchmarkObserve(b *testing.B) {
	for _, listed := range []int{0, 2} {
		b.Run(fmt.Sprintf("listed=%d", listed), func(b *testing.B) {
			m, hbs := benchMachine(b, benchProviders*2)
			cfg := m.Config()
			lists := make([][]WorkloadEpoch, benchProviders)
			for p := range lists {
				if listed > 0 {
					lists[p] = []WorkloadEpoch{{ID: fmt.Sprintf("w%d", p), Epoch: 1}, {ID: fmt.Sprintf("w%d", p+benchProviders), Epoch: 1}}[:listed]
				}
			}
			now := t0.Add(time.Hour)
			m.Tick(now)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := i % benchProviders
				hb := hbs[p*len(cfg.Relays)+(i/benchProviders)%len(cfg.Relays)]
				t := now.Add(time.Duration(i) * time.Microsecond)
				hb.CreatedAt, hb.ReceivedAt = t, t
				hb.Listed, hb.Workloads = listed > 0, lists[p]
				m.ObserveHeartbeat(t, hb)
			}
		})
	}
}

// The naive algorithm this machine replaced (a per-workload tick), kept
// as the benchmark's baseline: every workload scans every observation and
// builds a set of live relays.

type seedObs struct {
	providerNpub   string
	relayURL       string
	seenAt         uint64
	eventTimestamp uint64
}

type seedWorkload struct {
	id           int
	providerNpub string
	state        int // 0 provisioning, 1 live, 2 suspect, 3 evicted
	since        uint64
}

type seedMachine struct {
	m, t1, t2, stale uint64
	workloads        map[int]*seedWorkload
}

func seedSetup(n int) (*seedMachine, []seedObs) {
	sm := &seedMachine{m: 2, t1: 120, t2: 300, stale: 180, workloads: make(map[int]*seedWorkload, n)}
	for i := 0; i < n; i++ {
		sm.workloads[i] = &seedWorkload{id: i, providerNpub: benchKey(i % benchProviders), state: 1}
	}
	relays := testRelays(3)
	obs := make([]seedObs, 0, benchProviders*len(relays))
	for p := 0; p < benchProviders; p++ {
		for _, r := range relays {
			obs = append(obs, seedObs{providerNpub: benchKey(p), relayURL: r})
		}
	}
	return sm, obs
}

func (sm *seedMachine) tick(now uint64, observations []seedObs) int {
	events := 0
	for _, w := range sm.workloads {
		live := make(map[string]struct{})
		for i := range observations {
			o := &observations[i]
			if o.providerNpub != w.providerNpub {
				continue
			}
			if o.eventTimestamp+sm.stale < now {
				continue
			}
			live[o.relayURL] = struct{}{}
		}
		alive := uint64(len(live)) >= sm.m
		switch w.state {
		case 0:
			if alive {
				w.state, w.since = 1, now
				events++
			}
		case 1:
			if !alive && now-w.since >= sm.t1 {
				w.state, w.since = 2, now
				events++
			}
		case 2:
			if alive {
				w.state, w.since = 1, now
				events++
			} else if now-w.since >= sm.t2 {
				w.state = 3
				events++
			}
		}
	}
	return events
}
