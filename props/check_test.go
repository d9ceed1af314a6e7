package props

import (
	"flag"
	mathrand "math/rand/v2"
	"os"
	"strconv"
	"testing"

	"pgregory.net/rapid"
)

// Check is rapid.Check at the depth PROPS_CHECKS asks for (default rapid's
// -rapid.checks, 100), with a fresh seed per property unless -rapid.seed is
// given; it logs the seed, so that a deep run reads "seed N, K checks" and
// any of its properties can be replayed alone with -rapid.seed=N.
//
//	PROPS_CHECKS=20000 go test ./props -v -timeout 3h | grep -E '^=== RUN|seed|checks passed|FAIL'
func Check(t *testing.T, prop func(*rapid.T)) {
	t.Helper()
	CheckCI(t, 0, prop)
}

// CheckCI is Check for a property whose default run (CI: no PROPS_CHECKS
// and rapid's default -rapid.checks) does ciChecks checks instead of
// rapid's 100: the variants that add one fault or one observation to a
// property CI already runs in full. 0 means rapid's default.
func CheckCI(t *testing.T, ciChecks int, prop func(*rapid.T)) {
	t.Helper()
	checksFlag := flag.Lookup("rapid.checks")
	if n := os.Getenv("PROPS_CHECKS"); n != "" {
		if _, err := strconv.Atoi(n); err != nil {
			t.Fatalf("PROPS_CHECKS = %q: want a number of checks", n)
		}
		if err := flag.Set("rapid.checks", n); err != nil {
			t.Fatalf("set rapid.checks: %v", err)
		}
	} else if checksFlag.Value.String() == checksFlag.DefValue && (ciChecks > 0 || raceEnabled) {
		if ciChecks == 0 {
			ciChecks, _ = strconv.Atoi(checksFlag.DefValue)
		}
		if raceEnabled {
			// The simulator runs on one goroutine: the race detector finds
			// nothing in it and slows it 4x. Under -race (the README's test
			// command) each property runs a sixteenth of its CI depth, enough
			// to race the shell's goroutines; .ci/run runs them at full
			// depth without -race right after.
			ciChecks = max(ciChecks/16, 3)
		}
		if err := flag.Set("rapid.checks", strconv.Itoa(ciChecks)); err != nil {
			t.Fatalf("set rapid.checks: %v", err)
		}
		defer func() { _ = flag.Set("rapid.checks", checksFlag.DefValue) }()
	}
	seedFlag := flag.Lookup("rapid.seed")
	if seedFlag.Value.String() == "0" {
		seed := mathrand.Uint64()
		if err := flag.Set("rapid.seed", strconv.FormatUint(seed, 10)); err != nil {
			t.Fatalf("set rapid.seed: %v", err)
		}
		defer func() { _ = flag.Set("rapid.seed", "0") }()
	}
	t.Logf("rapid seed %s, %s checks", seedFlag.Value.String(), flag.Lookup("rapid.checks").Value.String())
	rapid.Check(t, prop)
}

// SkipSearchUnderRace skips a counterexample search under the race
// detector: the simulator runs on one goroutine, so the detector has
// nothing to find there, and the searches (minutes of shrinking under it)
// run without -race at their full depth (.ci/run runs ./props so beside the
// race run).
func SkipSearchUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("a counterexample search of the one-goroutine simulator: run without -race")
	}
}
