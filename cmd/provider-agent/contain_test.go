package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"provideragent/agent"
	"provideragent/config"
	"provideragent/internal/sqlitedb"
)

// scrubbedEnv is the whole environment of scrubbedDaemon's daemon.
const scrubbedEnv = "PATH=/usr/bin:/bin"

// scrubbedDaemon is a daemon that escapes its group: it clears its
// environment (so it
// carries no backend tag) and leaves the shell's session and process group,
// records its pid in pidFile and, when out is not "", appends
// "<unix ns> <pid>" to out every 20 ms. It ends with "&".
func scrubbedDaemon(pidFile, out string) string {
	loop := `while :; do sleep 0.02; done`
	if out != "" {
		loop = `while :; do echo "$(date +%s%N) $p" >> ` + out + `; sleep 0.02; done`
	}
	return `env -i ` + scrubbedEnv + ` setsid sh -c '` + recordSelf(pidFile) + `; ` + loop + `' &`
}

// stopAndWait SIGSTOPs pid and waits until every thread of it is stopped
// (a thread running on another CPU stops a moment later, and could still
// act on what the test does next).
func stopAndWait(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		stopped := len(tasks) > 0
		for _, task := range tasks {
			data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/stat")
			s := string(data)
			i := strings.LastIndexByte(s, ')')
			if err != nil || i < 0 || i+2 >= len(s) || (s[i+2] != 'T' && s[i+2] != 't') {
				stopped = false
			}
		}
		if stopped {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d not stopped 10 s after SIGSTOP", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// writerLog is the file the scrubbed daemons append to.
type writerLog string

// lines returns (unix ns, pid) of every complete line.
func (w writerLog) lines() [][2]int64 {
	data, _ := os.ReadFile(string(w))
	var out [][2]int64
	for _, l := range strings.Split(string(data), "\n") {
		a, b, ok := strings.Cut(l, " ")
		ts, err1 := strconv.ParseInt(a, 10, 64)
		pid, err2 := strconv.ParseInt(b, 10, 64)
		if ok && err1 == nil && err2 == nil {
			out = append(out, [2]int64{ts, pid})
		}
	}
	return out
}

// writers returns the distinct pids that wrote lines stamped in [from, to).
func (w writerLog) writers(from, to time.Time) []int {
	seen := map[int]bool{}
	for _, l := range w.lines() {
		if l[0] >= from.UnixNano() && l[0] < to.UnixNano() {
			seen[int(l[1])] = true
		}
	}
	var out []int
	for p := range seen {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

// last returns when pid last wrote (zero if never).
func (w writerLog) last(pid int) time.Time {
	var t int64
	for _, l := range w.lines() {
		if int(l[1]) == pid && l[0] > t {
			t = l[0]
		}
	}
	if t == 0 {
		return time.Time{}
	}
	return time.Unix(0, t)
}

// waitWriter waits (bounded) until a pid other than the ones in not wrote
// a line, and returns it.
func (w writerLog) waitWriter(t *testing.T, what string, not ...int) int {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second) // relays, heartbeats, quorum, backoff
	for {
		for _, l := range w.lines() {
			found := true
			for _, n := range not {
				found = found && int(l[1]) != n
			}
			if found {
				return int(l[1])
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s wrote within 90 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scrubbedSetup is a data dir whose lease's workload escapes its group: the
// top shell records its supervisor's pid and starts the scrubbed daemon,
// which appends to out; run gets config (stop_grace 2 s, respawn backoff
// 500 ms, and extra).
type scrubbedSetup struct {
	*agentSetup
	out    writerLog
	config string
}

const scrubbedGrace = 2 * time.Second

func newScrubbedSetup(t *testing.T, extra string) *scrubbedSetup {
	t.Helper()
	out := filepath.Join(sharedDir(t), "out") // the workload's user writes it
	s := &scrubbedSetup{out: writerLog(out)}
	s.agentSetup = newAgentSetupLine(t, func(pidFile, shimFile string) string {
		return recordParent(shimFile) + `; ` + scrubbedDaemon(pidFile, out) + ` while :; do sleep 1; done`
	})
	s.config = filepath.Join(t.TempDir(), "agent.toml")
	body := fmt.Sprintf("[backend]\nstop_grace = %q\nworkload_dir = %q\n%s\n[lease]\nrestart_backoff_initial = \"500ms\"\n",
		scrubbedGrace.String(), workloadDir(t), extra)
	if err := os.WriteFile(s.config, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

// run starts `run` on the setup (its /status URL known).
func (s *scrubbedSetup) run(t *testing.T) *runChild {
	t.Helper()
	return startRun(t, append([]string{"--config", s.config, "--data-dir", s.dataDir, "--listen", "127.0.0.1:0"}, s.relayArgs...)...)
}

// daemonPids returns every daemon pid recorded so far.
func (s *scrubbedSetup) daemonPids() []int {
	data, _ := os.ReadFile(s.pidFile)
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if p, err := strconv.Atoi(f); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// waitSaved waits until the agent's database holds its machine snapshot:
// a run killed before its first save forgets its workloads, which is not
// what these tests are about.
func waitSaved(t *testing.T, dataDir string) {
	t.Helper()
	cfg := config.Default()
	cfg.Agent.DataDir = dataDir
	db, err := sqlitedb.Open(context.Background(), cfg.DBPath(), sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM agent_kv WHERE key = 'lease_machine'`).Scan(&n); err == nil && n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent saved no machine snapshot within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRunScrubbedDaemonDiesWithItsSupervisor is the scrubbed-daemon trial
// with its supervisor killed alone, over the real binary: the workload's daemon clears its environment and leaves
// the session; kill -9 of its supervisor alone. No copy of the daemon
// survives the supervisor, and the agent respawns exactly one: one writer
// afterwards. (The agent used to kill what carried its environment tag
// and respawn beside the untagged daemon: two writers.)
func TestRunScrubbedDaemonDiesWithItsSupervisor(t *testing.T) {
	t.Parallel()
	s := newScrubbedSetup(t, "")
	r := s.run(t)
	first := s.out.waitWriter(t, "daemon")
	t.Cleanup(func() { killIfOurs(s.daemonPids()) })
	st, err := r.fetchStatus()
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 && (!strings.HasPrefix(st.Containment, "pid namespace + cgroup") || st.ContainmentWarning != "") {
		t.Errorf("/status containment = %q, warning %q; want a pid namespace and a cgroup, no warning (root, CI)", st.Containment, st.ContainmentWarning)
	}
	shim := pids(t, s.shimFile, 1)[0]
	killed := time.Now()
	if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	second := s.out.waitWriter(t, "respawned daemon", first)
	respawned := time.Now()
	time.Sleep(time.Second)
	if w := s.out.writers(respawned, time.Now()); len(w) != 1 || w[0] != second {
		t.Errorf("daemons writing in the second after the respawn = %v, want only the respawned one %d", w, second)
	}
	if running(first) {
		t.Errorf("the first daemon %d still runs after kill -9 of its supervisor, want it dead", first)
	}
	t.Logf("after kill -9 of the supervisor alone, the first daemon wrote its last line %v after the kill; the respawned one wrote %v after it",
		s.out.last(first).Sub(killed).Round(time.Millisecond), respawned.Sub(killed).Round(time.Millisecond))
}

// TestRunScrubbedDaemonDiesWithAgentAndSupervisor is the
// scrubbed-daemon trial with both killed, over the real binary: kill -9 of the agent and its supervisor together
// (the agent stopped first, so that neither acts). Within stop_grace
// nothing writes any more; a restarted run has nothing left to kill, and
// starts exactly one daemon. (The daemon used to write on, a restarted run
// did not find it, and a standby would start beside it.)
func TestRunScrubbedDaemonDiesWithAgentAndSupervisor(t *testing.T) {
	t.Parallel()
	s := newScrubbedSetup(t, "")
	r := s.run(t)
	first := s.out.waitWriter(t, "daemon")
	t.Cleanup(func() { killIfOurs(s.daemonPids()) })
	waitSaved(t, s.dataDir)
	shim := pids(t, s.shimFile, 1)[0]
	stopAndWait(t, r.cmd.Process.Pid)
	killed := time.Now()
	if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.kill(t)
	time.Sleep(scrubbedGrace)
	if w := s.out.writers(time.Now().Add(-100*time.Millisecond), time.Now().Add(time.Hour)); len(w) != 0 {
		t.Errorf("stop_grace (%v) after kill -9 of agent and supervisor, processes %v still write, want none", scrubbedGrace, w)
	}
	t.Logf("after kill -9 of agent and supervisor, the daemon wrote its last line %v after the kill",
		s.out.last(first).Sub(killed).Round(time.Millisecond))

	again := s.run(t)
	second := s.out.waitWriter(t, "daemon of the restarted run", first)
	restarted := time.Now()
	time.Sleep(time.Second)
	if w := s.out.writers(restarted, time.Now()); len(w) != 1 || w[0] != second {
		t.Errorf("daemons writing in the second after the restart = %v, want only the restarted run's %d", w, second)
	}
	if strings.Contains(again.stderr.String(), "leftover") {
		t.Errorf("the restarted run killed leftovers, want nothing left to kill:\n%s", again.stderr.String())
	}
	if running(first) {
		t.Errorf("the first daemon %d runs after the restart, want it dead", first)
	}
}

// TestRunSaysWhatItCannotContain: where the agent can contain nothing
// (simulated by backend.containment = none) run starts, warns at start
// naming the risk, and says so on /status and in `status`; likewise for
// workloads run unisolated (backend.isolation = none); a data dir open to
// group or others is a WARN with the chmod fix; logs/ is 0700.
func TestRunSaysWhatItCannotContain(t *testing.T) {
	t.Parallel()
	s := newScrubbedSetup(t, "containment = \"none\"\nisolation = \"none\"")
	if err := os.Chmod(s.dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	r := s.run(t)
	s.out.waitWriter(t, "daemon")
	t.Cleanup(func() { killIfOurs(s.daemonPids()) })
	logs := r.stderr.String()
	for _, want := range []string{
		`level=WARN msg="workloads are not fully contained: workload containment is off (backend.containment = none)`,
		`level=WARN msg="workloads are not isolated: workload isolation is off (backend.isolation = none)`,
		`level=WARN msg="data dir ` + s.dataDir + `: mode 0755 lets group or others into it`,
		`chmod 700 ` + s.dataDir,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("run's log does not hold %q:\n%s", want, logs)
		}
	}
	st := r.waitStatus(t, "the containment on /status", 30*time.Second, func(st agent.Status) bool { return st.Containment != "" })
	if st.Containment != "none" || !strings.Contains(st.ContainmentWarning, "env -i") {
		t.Errorf("/status containment = %q, warning %q; want none and a warning naming env -i", st.Containment, st.ContainmentWarning)
	}
	if !strings.HasPrefix(st.Isolation, "none") || !strings.Contains(st.IsolationWarning, "unsafe for workloads of third parties") {
		t.Errorf("/status isolation = %q, warning %q; want none and a warning that it is unsafe", st.Isolation, st.IsolationWarning)
	}
	out := must(t, nil, "status", "--data-dir", s.dataDir, "--config", s.config, "--url", r.status)
	if !strings.Contains(out.stdout, "WARNING: workloads are not fully contained (none)") ||
		!strings.Contains(out.stdout, "WARNING: workloads are not isolated (none") {
		t.Errorf("status prints %q, want the containment and isolation warnings", out.stdout)
	}
	if fi, err := os.Stat(filepath.Join(s.dataDir, "logs")); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o700 {
		t.Errorf("logs/ mode = %04o, want 0700", fi.Mode().Perm())
	}
}
