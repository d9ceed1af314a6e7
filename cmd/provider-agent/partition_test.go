package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"provideragent/agent"
	"provideragent/internal/netlab"
	"provideragent/internal/relaytest"
)

// The partition trials run the real binary over real
// sockets: three relays and two agents, each in a network namespace of its
// own on a bridge (internal/netlab), the short timings of fastConfig
// (heartbeats every second, t1 2 s, t2 3 s, stale 3 s, takeover after
// 12 s) and stop grace 2 s. The primary holds w1 with the other agent as
// its standby; the workload appends lines tagged with its epoch and a
// random copy id to a file both nodes share. Faults are iptables DROP rules
// in a node's namespace (packets vanish, nothing is reset) and a link set
// down. Each trial checks the single writer (no two copies ever wrote at
// once) and its liveness outcome: who runs w1 at the end, within what time,
// and that the other node stands by again.
//
// They need root (network namespaces) and skip, saying so, without it.
// PARTITION_FLAP_SECONDS (default 60) sets how long the flapping lasts and
// PARTITION_SEED its schedule (logged).

// partitionTrial is one trial's network and nodes.
type partitionTrial struct {
	relays           []*netlab.Node
	primary, standby *netlab.Node
	a, b             *runChild // the agents on primary and standby
	out              string    // the workload's file
}

// fenceBound is how long after losing its relays the primary's workload
// may still write: stale + t1 + t2 of fastConfig plus a heartbeat and a
// tick (as TestWriteLockHeldElsewhereDoesNotDelayTheFence).
const fenceBound = 3*time.Second + 2*time.Second + 3*time.Second + time.Second + agent.DefaultTickInterval

// failoverBound is how long after the primary lost its relays (or after a
// heal) one node runs w1 again: takeover after 12 s of silence, the claim
// step (its timeout 5 s, one retry at its 4 s cap), a relay delay and the
// provisioning, with slack for a loaded machine.
const failoverBound = 45 * time.Second

func newPartitionTrial(t *testing.T, kind relaytest.Kind) *partitionTrial {
	t.Helper()
	lab := netlab.New(t)
	tmp := t.TempDir()
	p := &partitionTrial{}
	var urls []string
	for i := range 3 {
		n := lab.Node("relay" + strconv.Itoa(i))
		r := relaytest.StartKind(t, kind, relaytest.KindOptions{Listen: n.IP + ":7000", Wrap: n.Wrap()})
		urls = append(urls, r.URL())
		p.relays = append(p.relays, n)
	}
	p.primary, p.standby = lab.Node("primary"), lab.Node("standby")
	dirA, dirB := filepath.Join(tmp, "primary"), filepath.Join(tmp, "standby")
	pubA := newKey(t, filepath.Join(dirA, "identity.key"))
	pubB := newKey(t, filepath.Join(dirB, "identity.key"))
	cfgA := fastConfig(t, tmp, dirA, p.primary.IP+":7070", urls, 2)
	cfgB := fastConfig(t, tmp, dirB, p.standby.IP+":7070", urls, 2, npubOf(t, pubA))
	for _, cfg := range []string{cfgA, cfgB} {
		appendTo(t, cfg, "stop_grace = \"2s\"\n") // fastConfig ends in [backend]
	}
	p.out = filepath.Join(sharedDir(t), "writes.txt") // both workloads' users append to it
	must(t, nil, "workloads", "grant", "--config", cfgA, "--id", "w1", "--command", appendLoop(p.out, "w1"),
		"--standby", npubOf(t, pubB), "--publish")
	p.a = startRunWrapped(t, p.primary.Wrap(), "--config", cfgA)
	p.b = startRunWrapped(t, p.standby.Wrap(), "--config", cfgB)
	waitPrimaryAndStandby(t, p.a, p.b, "w1", 60*time.Second)
	time.Sleep(3 * time.Second) // heartbeats listing w1 on every relay
	return p
}

// runner reports which agent runs w1 now: "primary", "standby", "both" or
// "" (an agent it cannot reach counts as not running it).
func (p *partitionTrial) runner() string {
	runs := func(r *runChild) bool {
		st, err := r.fetchStatus()
		if err != nil {
			return false
		}
		w, ok := workloadIn(st, "w1")
		return ok && w.State == "live" && w.Running
	}
	a, b := runs(p.a), runs(p.b)
	switch {
	case a && b:
		return "both"
	case a:
		return "primary"
	case b:
		return "standby"
	}
	return ""
}

// settle waits (up to limit after from) until exactly one agent runs w1
// and the other stands by, and returns how long after from that was.
func (p *partitionTrial) settle(t *testing.T, from time.Time, limit time.Duration) (who string, after time.Duration) {
	t.Helper()
	for time.Since(from) < limit {
		if who = p.runner(); who == "primary" || who == "standby" {
			other := p.b
			if who == "standby" {
				other = p.a
			}
			if st, err := other.fetchStatus(); err == nil {
				if w, ok := workloadIn(st, "w1"); ok && w.State == "standby" {
					return who, time.Since(from)
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%v after %s: w1 runs on %q, want exactly one node running it and the other standing by", limit, from.Format(time.StampMilli), who)
	return "", 0
}

// checkFailover checks a trial whose fault took the primary's relays from
// cut: its workload stopped within fenceBound, the standby ran it within
// failoverBound, and within failoverBound of the heal the standby runs it
// and the primary stands by.
func (p *partitionTrial) checkFailover(t *testing.T, cut, healed time.Time) {
	t.Helper()
	who, after := p.settle(t, healed, failoverBound)
	spans := checkOneCopyAtATime(t, p.out)
	ws := readWrites(t, p.out)
	lastA, firstB := lastWrite(ws, 1), firstWrite(ws, 2)
	t.Logf("the primary's last write %v after the cut (bound %v), the standby's first %v after it; settled %v after the heal on the %s; copies %d",
		lastA.Sub(cut).Round(time.Millisecond), fenceBound, firstB.Sub(cut).Round(time.Millisecond), after.Round(time.Millisecond), who, len(spans))
	if d := lastA.Sub(cut); d > fenceBound {
		t.Errorf("the primary's workload wrote %v after it lost its relays, want at most %v", d.Round(time.Millisecond), fenceBound)
	}
	if firstB.IsZero() || firstB.Sub(cut) > failoverBound {
		t.Errorf("the standby first wrote at epoch 2 %v after the cut, want within %v", firstB.Sub(cut).Round(time.Millisecond), failoverBound)
	}
	if who != "standby" {
		t.Errorf("after the heal w1 runs on the %s, want the standby (it took over)", who)
	}
}

// TestPartitions runs each trial in a lab of its own, in parallel.
func TestPartitions(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skipf("the partition trials make network namespaces, veth links and iptables rules: they need root (uid %d)", os.Geteuid())
	}
	oneWay := []struct {
		name   string
		kind   relaytest.Kind
		cutFor time.Duration // then the fault heals
		cut    func(p *partitionTrial)
	}{
		// Silent drops both ways: the primary hears nothing and nothing it
		// sends arrives.
		{"silent drop", relaytest.NostrRelay, 30 * time.Second, func(p *partitionTrial) { p.primary.Cut(p.relays...) }},
		// Send-only: what the primary sends still leaves (TCP never sees
		// an acknowledgement), nothing comes back.
		{"send only", relaytest.Khatru, 30 * time.Second, func(p *partitionTrial) { p.primary.DropFrom(p.relays...) }},
		// Receive-only: the primary's packets vanish; the relays' reach it.
		{"receive only", relaytest.StrfryEmulated, 30 * time.Second, func(p *partitionTrial) { p.primary.DropTo(p.relays...) }},
		// Link loss: the primary's link goes down at the bridge for 40 s.
		{"link down", relaytest.StrfryEmulated, 40 * time.Second, func(p *partitionTrial) { p.primary.LinkDown() }},
	}
	for _, tc := range oneWay {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPartitionTrial(t, tc.kind)
			cut := time.Now()
			tc.cut(p)
			time.Sleep(tc.cutFor)
			p.primary.Heal()
			p.primary.LinkUp()
			p.checkFailover(t, cut, time.Now())
		})
	}

	// Flapping: the primary's relays are cut and healed at random, cuts of
	// 3 to 14 s (some shorter than the fence, some past the takeover) and
	// heals of 1 to 6 s, for PARTITION_FLAP_SECONDS (default 60).
	t.Run("flapping", func(t *testing.T) {
		t.Parallel()
		p := newPartitionTrial(t, relaytest.Khatru)
		flapFor := time.Duration(envInt(t, "PARTITION_FLAP_SECONDS", 60)) * time.Second
		seed := uint64(time.Now().UnixNano())
		if os.Getenv("PARTITION_SEED") != "" {
			seed = uint64(envInt(t, "PARTITION_SEED", 0))
		}
		rng := rand.New(rand.NewPCG(seed, seed))
		cuts, ups := []int{3, 6, 9, 14}, []int{1, 3, 6}
		start := time.Now()
		var schedule []string
		for time.Since(start) < flapFor {
			c, u := cuts[rng.IntN(len(cuts))], ups[rng.IntN(len(ups))]
			schedule = append(schedule, fmt.Sprintf("cut %ds, up %ds", c, u))
			p.primary.Cut(p.relays...)
			time.Sleep(time.Duration(c) * time.Second)
			p.primary.Heal()
			time.Sleep(time.Duration(u) * time.Second)
		}
		healed := time.Now()
		who, after := p.settle(t, healed, failoverBound)
		spans := checkOneCopyAtATime(t, p.out)
		t.Logf("PARTITION_SEED=%d: %s; settled %v after the last heal on the %s; %d copies ran", seed, strings.Join(schedule, "; "), after.Round(time.Millisecond), who, len(spans))
	})

	// The vanished standby: the standby is cut off every relay for 75 s
	// while the primary is untouched. The relays' sends towards it stall
	// (nothing acknowledges them); they must not stall the primary, whose
	// workload never pauses and which never leaves live.
	t.Run("vanished standby", func(t *testing.T) {
		t.Parallel()
		p := newPartitionTrial(t, relaytest.Khatru)
		cut := time.Now()
		p.standby.Cut(p.relays...)
		var mu sync.Mutex
		var left []string
		done := make(chan struct{})
		go func() { // watches the primary while the standby is gone
			defer close(done)
			for time.Since(cut) < 75*time.Second {
				st, err := p.a.fetchStatus()
				w, ok := workloadIn(st, "w1")
				if err != nil || !ok || w.State != "live" || !w.Running {
					mu.Lock()
					left = append(left, fmt.Sprintf("+%v: %+v (err %v)", time.Since(cut).Round(time.Millisecond), w, err))
					mu.Unlock()
				}
				time.Sleep(250 * time.Millisecond)
			}
		}()
		<-done
		healed := time.Now()
		p.standby.Heal()
		who, after := p.settle(t, healed, failoverBound)
		spans := checkOneCopyAtATime(t, p.out)
		for _, l := range left {
			t.Errorf("the primary's w1 left live and running at %s", l)
		}
		if who != "primary" || len(spans) != 1 {
			t.Errorf("w1 runs on the %s after %d copies, want the primary's one copy throughout", who, len(spans))
		}
		if len(spans) > 0 && spans[0].longestGap > 2*time.Second {
			t.Errorf("the primary's workload paused for %v", spans[0].longestGap)
		}
		if len(spans) > 0 {
			t.Logf("the primary's copy wrote with a longest pause of %v; the standby stood by again %v after the heal", spans[0].longestGap, after.Round(time.Millisecond))
		}
	})
}
