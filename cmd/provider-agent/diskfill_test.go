package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"provideragent/agent"
	"provideragent/internal/relaytest"
)

// Hostile disk writers: one writes to its output (its log) as fast as it
// can, for ever; the other fills its home directory as fast as it can.
const (
	logHogLine = `yes 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'`
	dirHogLine = `i=0; while :; do head -c 4194304 /dev/zero > fill$i; i=$((i+1)); done`
)

// logBytes is the size of workload id's log and its rotated parts under
// logDir.
func logBytes(logDir, id string) int64 {
	var n int64
	matches, _ := filepath.Glob(filepath.Join(logDir, id+".log*"))
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil {
			n += st.Size()
		}
	}
	return n
}

// TestRunHostileDiskWriter runs the real binary with small disk limits
// (logs rotated at 4 MiB keeping 2 parts; directories bounded at 64 MiB)
// and two hostile workloads: loghog writes its output as fast as it can,
// dirhog fills its home as fast as it can. loghog's log never takes more
// than the cap (12 MiB) however long it writes; dirhog is killed once over
// its bound and cannot start again (failed, the reason in status). The
// agent's database and fencing keep working throughout: /healthz stays
// 200, no step fails, and workloads granted and released meanwhile start
// and stop as fast as before. It logs the figures of docs/figures.md
// (go test ./cmd/provider-agent -run TestRunHostileDiskWriter -v).
func TestRunHostileDiskWriter(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "data")
	newKey(t, filepath.Join(dir, "identity.key"))
	relay := relaytest.Start(t)
	section := fmt.Sprintf("[backend]\nworkload_dir = %q\nlog_max_mib = 4\nlog_keep = 2\nworkload_dir_max_mib = 64\ndisk_check_interval = \"250ms\"\n", workloadDir(t))
	if os.Geteuid() != 0 {
		section += "isolation = \"none\"\n"
	}
	cfg := hostileConfig(t, tmp, dir, relay.URL(), section)
	a := startRun(t, "--config", cfg)
	base := strings.TrimSuffix(a.status, "/status")
	logDir := filepath.Join(dir, "logs")

	// The time from a grant to its workload running, and from its release
	// to its end: the agent's steps (commit, then effects), measured as an
	// operator sees them.
	cycle := func(id string) (time.Duration, time.Duration) {
		t.Helper()
		start := time.Now()
		must(t, nil, "workloads", "grant", "--config", cfg, "--id", id, "--command", "sleep 7413", "--restart", "never")
		a.waitStatus(t, id+" running", 30*time.Second, func(st agent.Status) bool {
			w, ok := workloadIn(st, id)
			return ok && w.Running
		})
		up := time.Since(start)
		start = time.Now()
		must(t, nil, "workloads", "release", id, "--config", cfg)
		a.waitStatus(t, id+" released", 30*time.Second, func(st agent.Status) bool {
			_, ok := workloadIn(st, id)
			return !ok
		})
		return up, time.Since(start)
	}
	steps := func() (float64, float64) {
		return metricValue(t, base+"/metrics", "agent_step_seconds_count"), metricValue(t, base+"/metrics", "agent_step_seconds_sum")
	}
	measure := func(label string) (median time.Duration, meanStep float64) {
		c0, s0 := steps()
		var ups []time.Duration
		for i := range 3 {
			up, _ := cycle(fmt.Sprintf("probe-%s-%d", label, i))
			ups = append(ups, up)
		}
		c1, s1 := steps()
		slices.Sort(ups)
		return ups[len(ups)/2], (s1 - s0) / max(c1-c0, 1)
	}
	idleUp, idleStep := measure("idle")

	must(t, nil, "workloads", "grant", "--config", cfg, "--id", "loghog", "--command", logHogLine, "--restart", "never")
	must(t, nil, "workloads", "grant", "--config", cfg, "--id", "dirhog", "--command", dirHogLine, "--restart", "never")
	// Sample the log while the hogs write and the probes run.
	var peak int64
	var grew []string
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		began := time.Now()
		next := time.Duration(0)
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			n := logBytes(logDir, "loghog")
			peak = max(peak, n)
			if el := time.Since(began); el >= next {
				grew = append(grew, fmt.Sprintf("%.1fs %.1f MiB", el.Seconds(), float64(n)/(1<<20)))
				next += time.Second
			}
		}
	}()
	a.waitStatus(t, "loghog running", 30*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "loghog")
		return ok && w.Running
	})
	busyUp, busyStep := measure("busy")
	st := a.waitStatus(t, "dirhog failed", 30*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "dirhog")
		return ok && w.State == "failed"
	})
	close(stop)
	<-sampled

	if w, _ := workloadIn(st, "dirhog"); !strings.Contains(w.Reason, "workload_dir_max_mib") {
		t.Errorf("dirhog's reason = %q, want its disk limit", w.Reason)
	}
	if w, _ := workloadIn(st, "loghog"); !w.Running {
		t.Errorf("loghog = %+v, want it still running (its log is capped, not it)", w)
	}
	if peak > 12<<20+64<<10 {
		t.Errorf("loghog's log took %d bytes at its peak, want at most 12 MiB (4 MiB x 3)", peak)
	}
	if _, err := os.Stat(filepath.Join(logDir, "loghog.log.2")); err != nil {
		t.Errorf("loghog's log was not rotated twice: %v", err)
	}
	if n := metricValue(t, base+"/metrics", "agent_step_errors_total"); n != 0 {
		t.Errorf("agent_step_errors_total = %v, want 0: the database kept taking steps", n)
	}
	resp, err := http.Get(base + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz = %v %v, want 200", resp, err)
	} else {
		resp.Body.Close()
	}
	t.Logf("loghog's log on disk, once a second: %s; peak %.1f MiB (cap 12 MiB)", strings.Join(grew, ", "), float64(peak)/(1<<20))
	t.Logf("grant to running, median of 3: idle %v, while the hogs write %v; mean step (commit + effects): idle %.2f ms, busy %.2f ms",
		idleUp.Round(time.Millisecond), busyUp.Round(time.Millisecond), idleStep*1000, busyStep*1000)
	a.stop(t)
}
