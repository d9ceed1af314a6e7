package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// containCase is one containment the tree tests run under.
type containCase struct {
	name          string
	mode          ContainMode
	cgroupVersion int
	isolation     IsolationMode // "": the default (user)
}

// containCases returns every containment this host offers (a PID
// namespace, a v2 cgroup, a v1 freezer cgroup) and none. A host that
// offers none of the first three fails the test: CI must cover them. The
// host is probed once per test process: probes of one marker must not run
// side by side (they share the marker's cgroup and its probe group), and
// the parallel tests all ask.
func containCases(t testing.TB) []containCase {
	t.Helper()
	hostCases.once.Do(probeContainCases)
	for _, why := range hostCases.missing {
		t.Logf("containment %s", why)
	}
	if hostCases.err != nil {
		t.Fatal(hostCases.err)
	}
	if len(hostCases.cases) < 2 {
		t.Fatalf("containments available here: %v; want a PID namespace or a cgroup at least", hostCases.cases)
	}
	return hostCases.cases
}

// hostCases is what probeContainCases found, once per test process.
var hostCases struct {
	once    sync.Once
	cases   []containCase
	missing []string // "NAME not available here: why"
	err     error
}

func probeContainCases() {
	all := []containCase{
		{"pidns", ContainPIDNS, 0, ""},
		{"cgroup-v2", ContainCgroup, 2, ""},
		{"cgroup-v1", ContainCgroup, 1, ""},
		{"none", ContainNone, 0, ""},
	}
	for _, c := range all {
		got, err := detectContainment(c.mode, "probe-"+strconv.Itoa(os.Getpid()), c.cgroupVersion)
		switch {
		case err == nil:
			got.close()
			hostCases.cases = append(hostCases.cases, c)
		case errors.Is(err, ErrNoContainment):
			hostCases.missing = append(hostCases.missing, fmt.Sprintf("%s not available here: %v", c.name, err))
		default:
			hostCases.err = err
			return
		}
	}
}

// newTestMode is newTest under containment c.
func newTestMode(t *testing.T, grace time.Duration, c containCase) *Process {
	t.Helper()
	cfg := DefaultProcessConfig()
	cfg.StopGrace = grace
	cfg.LogDir = filepath.Join(t.TempDir(), "logs")
	cfg.Containment, cfg.cgroupVersion = c.mode, c.cgroupVersion
	b, err := NewProcess(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("Close() = %v, want nil", err)
		}
	})
	return b
}

// TestContainmentOnThisHost: as root on a host with both cgroup versions
// (CI), auto holds every workload in a PID namespace and a v2 cgroup and
// warns about nothing; each explicit mode gets what it names, and warns
// when it has no PID namespace; a mode that needs a cgroup refuses a
// backend without a log dir to name it by.
func TestContainmentOnThisHost(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("not root: TestUnprivilegedAgentUsesAUserNamespace covers this")
	}
	marker := "host-" + strconv.Itoa(os.Getpid()) // not containCases' marker
	auto, err := detectContainment(ContainAuto, marker, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer auto.close()
	if !auto.PIDNamespace || auto.UserNamespace || auto.tree == nil || auto.Warning != "" {
		t.Errorf("auto as root = %+v (%s), want a PID namespace, a cgroup, no user namespace, no warning", auto, auto)
	}
	for _, tc := range []struct {
		mode     ContainMode
		ns, cg   bool
		warnings string // a word the warning holds; "" for none
	}{
		{ContainPIDNS, true, false, ""},
		{ContainCgroup, false, true, "agent starts again"},
		{ContainNone, false, false, "backend.containment = none"},
	} {
		c, err := detectContainment(tc.mode, marker, 0)
		if err != nil {
			t.Errorf("detectContainment(%s) = %v", tc.mode, err)
			continue
		}
		c.close()
		if c.PIDNamespace != tc.ns || (c.tree != nil) != tc.cg {
			t.Errorf("detectContainment(%s) = %s, want pid namespace %v, cgroup %v", tc.mode, c, tc.ns, tc.cg)
		}
		if (tc.warnings == "") != (c.Warning == "") || !strings.Contains(c.Warning, tc.warnings) {
			t.Errorf("detectContainment(%s).Warning = %q, want one holding %q", tc.mode, c.Warning, tc.warnings)
		}
	}
	if _, err := detectContainment(ContainCgroup, "", 0); !errors.Is(err, ErrNoContainment) {
		t.Errorf("detectContainment(cgroup, no log dir) = %v, want ErrNoContainment", err)
	}
	if err := ContainMode("jail").Validate(); err == nil || !strings.Contains(err.Error(), `"jail"`) {
		t.Errorf(`Validate("jail") = %v, want an error naming it`, err)
	}
}

// TestScrubbedDaemonOutlivesNoSupervisor is the scrubbed-daemon trial at
// the backend: a workload whose daemon clears its environment (env -i) and
// leaves the supervisor's session (setsid), appending to a file. (a) kill
// -9 of the supervisor alone: the daemon is dead when the Exit is
// delivered, so the respawn that follows is the only writer; (b) kill -9
// of the agent and the supervisor together (the agent stopped first, so
// neither can act): in a PID namespace the daemon dies with its
// supervisor; with a cgroup alone it runs on until a restarted agent's
// KillLeftovers kills it by its cgroup.
func TestScrubbedDaemonOutlivesNoSupervisor(t *testing.T) {
	t.Parallel()
	for _, c := range containCases(t) {
		if c.mode == ContainNone {
			continue // TestUncontainedBackendWarns
		}
		t.Run(c.name+"/supervisor", func(t *testing.T) {
			t.Parallel() // its own log dir, marker and cgroup: the modes wait on their timers side by side
			b := newTestMode(t, time.Second, c)
			dir := sharedDir(t)
			pidFile, out := filepath.Join(dir, "pids"), filepath.Join(dir, "out")
			line := scrubbedDaemon(pidFile, out) + ` while :; do sleep 1; done`
			if err := b.Start(context.Background(), StartSpec{WorkloadID: "d", Command: ShellCommand(line)}); err != nil {
				t.Fatal(err)
			}
			first := readPids(t, pidFile, 1)
			t.Cleanup(func() { killPids(readPidsNow(pidFile)) })
			waitFor(t, "the daemon to write", func() bool { return countLines(out) > 0 })
			b.mu.Lock()
			shim := b.procs["d"].cmd.Process
			b.mu.Unlock()
			if err := shim.Kill(); err != nil {
				t.Fatal(err)
			}
			e := nextExit(t, b)
			exited := time.Now()
			if alive(first[0]) {
				t.Fatalf("the scrubbed daemon %d runs when its killed supervisor's Exit (%v) came, want it dead", first[0], e)
			}
			// The respawn: exactly one writer from the Exit on.
			if err := b.Start(context.Background(), StartSpec{WorkloadID: "d", Command: ShellCommand(line)}); err != nil {
				t.Fatal(err)
			}
			pids := readPids(t, pidFile, 2)
			n := countLines(out)
			waitFor(t, "the respawned daemon to write", func() bool { return countLines(out) > n })
			if w := writersSince(out, exited, 500*time.Millisecond); len(w) != 1 || w[0] != pids[1] {
				data, _ := os.ReadFile(out)
				t.Errorf("daemons writing after the respawn = %v, want only the new one %d\n%s", w, pids[1], data)
			}
		})
		t.Run(c.name+"/agent-and-supervisor", func(t *testing.T) {
			dir := sharedDir(t)
			pidFile, out := filepath.Join(dir, "pids"), filepath.Join(dir, "out")
			h := startHelperAgent(t, os.Args[0], dir, scrubbedDaemon(pidFile, out)+` while :; do sleep 1; done`, c, nil)
			daemon := readPids(t, pidFile, 1)[0]
			t.Cleanup(func() { killPids([]int{daemon}) })
			waitFor(t, "the daemon to write", func() bool { return countLines(out) > 0 })
			stopAndWait(t, h.cmd.Process.Pid)
			if err := syscall.Kill(h.shim, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = h.cmd.Process.Kill()
			killed := time.Now()
			if c.mode == ContainPIDNS {
				waitFor(t, "the daemon to die with its supervisor", func() bool { return !alive(daemon) })
				t.Logf("the daemon was gone %v after the kill", time.Since(killed).Round(time.Millisecond))
				return
			}
			time.Sleep(200 * time.Millisecond)
			if !alive(daemon) {
				t.Fatalf("with a cgroup alone the daemon died with agent and supervisor; this test needs it running")
			}
			n, err := KillLeftovers(filepath.Join(dir, "logs"), nil)
			if err != nil || n < 1 {
				t.Errorf("KillLeftovers = %d, %v, want at least the daemon", n, err)
			}
			if alive(daemon) {
				t.Errorf("the daemon %d runs after KillLeftovers returned, want it dead", daemon)
			}
			for _, tr := range cgroupTrees(mustMarker(t, filepath.Join(dir, "logs"))) {
				if g := tr.groups(); len(g) != 0 {
					t.Errorf("cgroups left under %s after KillLeftovers: %v", tr.dir, g)
				}
				tr.remove()
			}
		})
	}
}

// TestUncontainedBackendWarns: where the agent can contain nothing
// (simulated by backend.containment = none), NewProcess warns at start,
// naming the risk, and Containment carries the warning for /status; the
// backend still runs workloads.
func TestUncontainedBackendWarns(t *testing.T) {
	var logs bytes.Buffer
	cfg := DefaultProcessConfig()
	cfg.Containment = ContainNone
	cfg.LogDir = filepath.Join(t.TempDir(), "logs")
	b, err := NewProcess(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "env -i") {
		t.Errorf("NewProcess(containment none) logged %q, want a WARN naming env -i", got)
	}
	c := b.Containment()
	if c.PIDNamespace || c.Cgroup != "" || !strings.Contains(c.Warning, "outlives") || c.String() != "none" {
		t.Errorf("Containment() = %+v (%s), want none with a warning", c, c.String())
	}
	if err := b.Start(context.Background(), StartSpec{WorkloadID: "x", Command: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if e := nextExit(t, b); e.Code != 0 {
		t.Errorf("Exit = %+v, want code 0", e)
	}
}

// TestCgroupKill: a cgroup is killed whole, also while its processes
// fork as fast as they can, in both hierarchies; it is then removed.
func TestCgroupKill(t *testing.T) {
	t.Parallel()
	for _, c := range containCases(t) {
		if c.mode != ContainCgroup {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			marker := "test-" + strconv.Itoa(os.Getpid()) + "-" + c.name
			var tree *cgroupTree
			for _, tr := range cgroupTrees(marker) {
				if tr.version == c.cgroupVersion {
					tree = &tr
				}
			}
			if err := tree.create(); err != nil {
				t.Fatal(err)
			}
			defer tree.remove()
			g, err := tree.newGroup("w1-forker")
			if err != nil {
				t.Fatal(err)
			}
			defer g.remove()
			// A shell that joins the cgroup and forks short-lived children
			// without a pause.
			cmd := shellIn(t, g, `while :; do (sleep 1000 &) ; done`)
			waitFor(t, "the forks", func() bool { return len(g.pids()) > 5 })
			n, err := g.kill()
			if err != nil || n == 0 {
				t.Fatalf("kill() = %d, %v, want some processes and nil", n, err)
			}
			_ = cmd.Wait()
			if left := g.pids(); len(left) != 0 {
				t.Errorf("after kill() the cgroup holds %v, want nothing", left)
			}
			if err := g.remove(); err != nil {
				t.Errorf("remove() = %v, want nil", err)
			}
		})
	}
}

// TestLogDirIsPrivate: the log dir is created 0700 and the logs 0600
// (workload logs may hold secrets); an existing log dir open to others is
// kept as the operator made it, with a WARN.
func TestLogDirIsPrivate(t *testing.T) {
	root := t.TempDir()
	fresh := filepath.Join(root, "fresh")
	b, err := NewProcess(ProcessConfig{StopGrace: time.Second, LogDir: fresh, Containment: ContainNone}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background(), StartSpec{WorkloadID: "l", Command: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	nextExit(t, b)
	b.Close(context.Background())
	for path, want := range map[string]os.FileMode{fresh: 0o700, b.LogPath("l"): 0o600} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
			t.Errorf("mode of %s = %v (%v), want %04o", path, st.Mode().Perm(), err, want)
		}
	}
	open := filepath.Join(root, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	b, err = NewProcess(ProcessConfig{StopGrace: time.Second, LogDir: open, Containment: ContainNone}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	b.Close(context.Background())
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "mode=0755") || !strings.Contains(got, "chmod 700") {
		t.Errorf("NewProcess(log dir 0755) logged %q, want a WARN naming the mode and chmod 700", got)
	}
}

// shellIn starts sh -c line inside cgroup g (the shell joins it first).
func shellIn(t *testing.T, g *cgroupGroup, line string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", `echo 0 > `+g.procsFile()+` || exit 9; `+line)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _, _ = g.kill() })
	return cmd
}

func mustMarker(t *testing.T, logDir string) string {
	t.Helper()
	m, err := markerFor(logDir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// readPidsNow returns the pids file lists now.
func readPidsNow(file string) []int {
	data, _ := os.ReadFile(file)
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// countLines counts the lines of file.
func countLines(file string) int {
	data, _ := os.ReadFile(file)
	return bytes.Count(data, []byte{'\n'})
}

// writersSince waits for d, then returns the distinct pids that appended
// a "<unix ns> <pid>" line to file stamped after since.
func writersSince(file string, since time.Time, d time.Duration) []int {
	time.Sleep(d)
	f, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer f.Close()
	data, _ := io.ReadAll(f)
	seen := map[int]bool{}
	var out []int
	for _, line := range strings.Split(string(data), "\n") {
		ts, pid, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		ns, err1 := strconv.ParseInt(ts, 10, 64)
		p, err2 := strconv.Atoi(pid)
		if err1 == nil && err2 == nil && ns > since.UnixNano() && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// TestUnprivilegedAgentUsesAUserNamespace: an agent that is not root (here
// uid 65534, where it may write no cgroup) holds each workload in a PID
// namespace inside a user namespace, under its own uid, and warns about
// nothing: a scrubbed daemon dies with its supervisor when agent and
// supervisor are killed together.
func TestUnprivilegedAgentUsesAUserNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the agent as another user")
	}
	const nobody = 65534
	dir, err := os.MkdirTemp("", "backend-userns-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "backend.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "pids")
	// An agent that is not root cannot run workloads as other users: this
	// test is about containment, so it runs them as its own (isolation none).
	h := startHelperAgent(t, bin, dir, scrubbedDaemon(pidFile, "")+` while :; do sleep 1; done`,
		containCase{"auto", ContainAuto, 0, IsolateNone}, &syscall.Credential{Uid: nobody, Gid: nobody})
	if h.containment != "pid namespace (in a user namespace)" {
		t.Errorf("containment of an agent running as uid %d = %q, want a pid namespace in a user namespace", nobody, h.containment)
	}
	daemon := readPids(t, pidFile, 1)[0]
	t.Cleanup(func() { killPids([]int{daemon}) })
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+strconv.Itoa(daemon), &st); err != nil || st.Uid != nobody {
		t.Errorf("the workload's uid = %d (%v), want the agent's, %d", st.Uid, err, nobody)
	}
	stopAndWait(t, h.cmd.Process.Pid)
	if err := syscall.Kill(h.shim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = h.cmd.Process.Kill()
	waitFor(t, "the daemon to die with its supervisor", func() bool { return !alive(daemon) })
}
