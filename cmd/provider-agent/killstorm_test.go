package main

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"provideragent/agent"
	"provideragent/internal/relaytest"
	"provideragent/lease"
)

// TestKillStormKeepsEveryHeldWorkload, over the real
// binary: `run` is killed with kill -9 at a random instant in the first
// KILL_STORM_WINDOW_MS (default 6 s: past the first periodic save at 5 s)
// of each of KILL_STORM_RUNS (default 20) runs, and started again. After each kill, every workload the database
// holds (a row in a holding state: what `workloads list` shows) must be on
// the restarted agent's /status at once, and at the end the workload runs
// again, never two copies at a time (each copy tags its lines with a
// random number).
// Before this was fixed, a kill in the first five seconds (before the
// periodic save wrote the machine's metadata) left rows the restart
// discarded: the workload was forgotten while `workloads list` showed it
// live.
//
//	KILL_STORM_RUNS=200 KILL_STORM_WINDOW_MS=10000 go test ./cmd/provider-agent -run TestKillStormKeepsEveryHeldWorkload -v -timeout 1h
func TestKillStormKeepsEveryHeldWorkload(t *testing.T) {
	t.Parallel()
	runs, window := envInt(t, "KILL_STORM_RUNS", 20), time.Duration(envInt(t, "KILL_STORM_WINDOW_MS", 6_000))*time.Millisecond
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("KILL_STORM_SEED"); s != "" {
		seed = uint64(envInt(t, "KILL_STORM_SEED", 0))
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("KILL_STORM_SEED=%d, %d runs, kills within %v of each start", seed, runs, window)

	tmp := t.TempDir()
	var urls []string
	for range 3 {
		urls = append(urls, relaytest.Start(t).URL())
	}
	dir := filepath.Join(tmp, "node")
	newKey(t, filepath.Join(dir, "identity.key"))
	standby := newKey(t, filepath.Join(tmp, "standby", "identity.key")) // named, never running
	cfg := fastConfig(t, tmp, dir, "127.0.0.1:0", urls, 2)
	out := filepath.Join(sharedDir(t), "writes.txt") // the workload's user appends to it
	must(t, nil, "workloads", "grant", "--config", cfg, "--id", "w1", "--command", appendLoop(out, "w1"), "--standby", npubOf(t, standby))
	must(t, nil, "workloads", "grant", "--config", cfg, "--id", "solo", "--command", "sleep 100000")

	var held []string // what the database held at the last kill
	for i := range runs {
		r := startRun(t, "--config", cfg)
		st, err := r.fetchStatus()
		if err != nil {
			t.Fatalf("run %d: /status: %v", i, err)
		}
		var ids []string
		for _, w := range st.Workloads {
			ids = append(ids, w.ID)
		}
		for _, id := range held {
			if !slices.Contains(ids, id) {
				t.Fatalf("run %d: the database held %s at the last kill, but the restarted agent's /status lists %v", i, id, ids)
			}
		}
		d := time.Duration(rng.Int64N(int64(window)))
		time.Sleep(d)
		r.kill(t)
		held = heldInDB(t, cfg)
		t.Logf("run %d: kill -9 after %v; the database holds %v", i, d.Round(time.Millisecond), held)
	}

	r := startRun(t, "--config", cfg)
	r.waitStatus(t, "w1 running again after the storm", 60*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "w1")
		return ok && w.Running
	})
	time.Sleep(time.Second)
	r.stop(t)
	checkOneCopyAtATime(t, out)
}

// heldInDB is the workloads the agent's database holds (workload rows in a
// holding state), read as `workloads list --json` reads them.
func heldInDB(t *testing.T, cfg string) []string {
	t.Helper()
	var ws []agent.WorkloadStatus
	if err := json.Unmarshal([]byte(must(t, nil, "workloads", "list", "--config", cfg, "--json").stdout), &ws); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, w := range ws {
		if lease.State(w.State).Holding() {
			ids = append(ids, w.ID)
		}
	}
	return ids
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s = %q: want a non-negative number", name, v)
	}
	return n
}
