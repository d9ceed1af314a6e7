package props_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"provideragent/props"

	"provideragent/props/sim"
)

// noFailover is a checker that fails as soon as the primary (P0) stops its
// workload, any provider leaves its initial role (suspect, evicted, fenced,
// promoting), or any epoch above 1 starts.
func noFailover() sim.Checker {
	seen := 0
	bad := []string{"-> suspect", "-> evicted", "-> fenced", "-> promoting", "-> failed", "publishes"}
	return func(s *sim.Sim) error {
		if _, ok := s.Running(0, workloadID); !ok {
			return fmt.Errorf("false failover: the primary stopped its workload")
		}
		if _, e := s.Starts(); e > 1 {
			return fmt.Errorf("false failover: epoch %d started", e)
		}
		tl := s.Timeline()
		for ; seen < len(tl); seen++ {
			for _, b := range bad {
				if strings.Contains(tl[seen].What, b) {
					return fmt.Errorf("false failover: %s %s", tl[seen].Who, tl[seen].What)
				}
			}
		}
		return nil
	}
}

// TestNoFalseFailover: with M=2 of N=3 and every fault confined to one
// relay (rapid picks which: crashes with or without storage, partitions
// from any provider, loss, duplicates, reordering, replays) and clocks
// within the bounds, the primary is never evicted, no standby ever claims,
// and no epoch above 1 ever starts.
func TestNoFalseFailover(t *testing.T) {
	var st stats
	props.Check(t, func(rt *rapid.T) {
		fs := faultSpace{
			MinK: 2, MaxK: 3, MinN: 3, MaxN: 3, FixedM: 2,
			MaxOffset: assumed.MaxClockOffset, MaxDriftPPM: assumed.MaxDriftPPM,
			MaxAdvance:   10 * time.Minute,
			Partitions:   true,
			RelayCrashes: true,
			Wipes:        true,
			LinkFaults:   true,
			Replays:      true,
			OnlyRelay:    rapid.IntRange(0, 2).Draw(rt, "faultyRelay"),
		}
		w := newWorld(rt, leaseProtocol(), fs)
		w.s.AddChecker(noFailover())
		rt.Repeat(w.actions())
		st.add(w)
	})
	t.Logf("%v", &st)
}
