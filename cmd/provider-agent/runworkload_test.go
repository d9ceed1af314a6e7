package main

import (
	"bufio"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"provideragent/config"
	"provideragent/internal/relaytest"
)

// runEnv is the test's environment without PROVIDER_AGENT_* settings.
func runEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, config.EnvPrefix) {
			env = append(env, kv)
		}
	}
	return env
}

// agentSetup is a data dir with a key and a local operator lease granted
// on three child relays.
type agentSetup struct {
	bin, dataDir string
	relayArgs    []string
	pidFile      string   // the workload's processes append their pids
	shimFile     string   // the workload's top shell appends its parent's pid
	env          []string // added to run's environment
}

// treeLine is a workload of every shape that escaped the old Pdeathsig: a
// setsid'ed double fork and a pipeline, each process recording its pid
// (4 pids), plus the supervisor's pid (the top shell's parent). Pids are
// recorded as /proc names them, not as $$ and $PPID: those are numbers in
// the workload's PID namespace.
func treeLine(pidFile, shimFile string) string {
	return recordParent(shimFile) + `; (setsid ` + recordPid(pidFile, "sleep 1000") + ` &); ` + recordSelf(pidFile) + `; ` +
		recordPid(pidFile, "sleep 1000") + ` | ` + recordPid(pidFile, "cat")
}

const treePids = 4

// recordSelf appends the shell's pid (as /proc names it) to file; it holds
// no single quote, so it may stand inside one.
func recordSelf(file string) string { return `read -r p _ </proc/self/stat; echo $p >> ` + file }

// recordParent appends the shell's parent's pid (as /proc names it) to file.
func recordParent(file string) string {
	return `read -r _ _ _ pp _ </proc/self/stat; echo $pp >> ` + file
}

// recordPid is a shell command that records its pid in file and becomes
// argv (exec, same pid).
func recordPid(file, argv string) string {
	return `sh -c '` + recordSelf(file) + `; exec ` + argv + `'`
}

func newAgentSetup(t *testing.T) *agentSetup {
	t.Helper()
	return newAgentSetupLine(t, treeLine)
}

// newAgentSetupLine is newAgentSetup with the workload line line(pidFile,
// shimFile).
func newAgentSetupLine(t *testing.T, line func(pidFile, shimFile string) string) *agentSetup {
	t.Helper()
	s := &agentSetup{bin: agentBinary(t), dataDir: t.TempDir()}
	for range 3 {
		s.relayArgs = append(s.relayArgs, "--relay", relaytest.Start(t).URL())
	}
	s.relayArgs = append(s.relayArgs, "--quorum", "2")
	// The workload's user writes them.
	tmp := sharedDir(t)
	s.pidFile, s.shimFile = filepath.Join(tmp, "pids"), filepath.Join(tmp, "shim")
	s.env = []string{config.EnvPrefix + "BACKEND_WORKLOAD_DIR=" + workloadDir(t)}
	if _, err := config.GenerateKeyFile(filepath.Join(s.dataDir, "identity.key")); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"workloads", "grant", "--data-dir", s.dataDir, "--id", "tree", "--command", line(s.pidFile, s.shimFile)}, s.relayArgs...)
	cmd := exec.Command(s.bin, args...)
	cmd.Env = runEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("workloads grant: %v\n%s", err, out)
	}
	return s
}

// runningAgent is `provider-agent run` in a child process.
type runningAgent struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	done   chan error
	exited bool
}

func (s *agentSetup) start(t *testing.T) *runningAgent {
	t.Helper()
	return s.startOn(t, "127.0.0.1:0")
}

// startOn is start with /status and /metrics on listen.
func (s *agentSetup) startOn(t *testing.T, listen string) *runningAgent {
	t.Helper()
	args := append([]string{"run", "--data-dir", s.dataDir, "--listen", listen}, s.relayArgs...)
	r := &runningAgent{cmd: exec.Command(s.bin, args...), stderr: &lockedBuffer{}, done: make(chan error, 1)}
	r.cmd.Env = append(runEnv(), s.env...)
	r.cmd.Stderr = r.stderr
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
		}
		r.done <- r.cmd.Wait()
	}()
	t.Cleanup(func() {
		if !r.exited {
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		if t.Failed() {
			t.Logf("run stderr:\n%s", r.stderr.String())
		}
	})
	return r
}

// wait returns run's exit error (bounded).
func (r *runningAgent) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.exited = true
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("run did not exit within 60 s")
	}
	return nil
}

// pids waits until file lists n pids and returns them.
func pids(t *testing.T, file string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second) // relays, heartbeats and quorum first
	for {
		data, _ := os.ReadFile(file)
		var out []int
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		if len(out) >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s lists %d pids after 90 s, want %d", file, len(out), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running reports whether pid runs and is not a zombie.
func running(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// waitAllDead polls until none of pids runs (bounded).
func waitAllDead(t *testing.T, what string, pids []int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left []int
		for _, pid := range pids {
			if running(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: processes %v still run 30 s later, want none", what, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killIfOurs SIGKILLs the pids still running with the workload's id in
// their environment, or a cleared environment (cleanup of a failed test; a
// bare pid may be reused).
func killIfOurs(pids []int) {
	for _, pid := range pids {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err == nil && (strings.Contains(string(env), "\x00PROVIDER_AGENT_WORKLOAD_ID=tree\x00") || string(env) == scrubbedEnv+"\x00") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestRunKilledTakesItsWorkloads: kill -9 of `provider-agent run` holding a
// Live workload that is a pipeline plus a setsid'ed double fork leaves none
// of the workload's processes running (a workload that outlived the agent
// would make two writers once the standby took over).
func TestRunKilledTakesItsWorkloads(t *testing.T) {
	t.Parallel()
	s := newAgentSetup(t)
	r := s.start(t)
	started := time.Now()
	ps := pids(t, s.pidFile, treePids)
	t.Logf("workload running %v after run started", time.Since(started).Round(time.Millisecond))
	t.Cleanup(func() { killIfOurs(ps) })
	for _, pid := range ps {
		if !running(pid) {
			t.Fatalf("workload process %d is not running before the kill", pid)
		}
	}
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	r.wait(t)
	waitAllDead(t, "after kill -9 of run", ps)
	t.Logf("the workload's %d processes were gone %v after kill -9 of run", len(ps), time.Since(killed).Round(time.Millisecond))
}

// TestRunRestartKillsLeftoversBeforeTheDatabase: where a workload has a
// cgroup but no PID namespace (backend.containment = cgroup, what auto
// falls back to without root or user namespaces), its supervisor is
// SIGKILLed, then the agent (SIGSTOPped first, so that it cannot clean
// up): the workload's tree is left running, also a daemon that cleared
// its environment. A restart whose database fails to open exits 1, but
// kills those leftovers first, found by their cgroup.
func TestRunRestartKillsLeftoversBeforeTheDatabase(t *testing.T) {
	t.Parallel()
	s := newAgentSetupLine(t, func(pidFile, shimFile string) string {
		return scrubbedDaemon(pidFile, "") + ` ` + treeLine(pidFile, shimFile)
	})
	s.env = append(s.env, "PROVIDER_AGENT_BACKEND_CONTAINMENT=cgroup")
	r := s.start(t)
	ps := pids(t, s.pidFile, treePids+1)
	t.Cleanup(func() { killIfOurs(ps) })
	shim := pids(t, s.shimFile, 1)[0]
	stopAndWait(t, r.cmd.Process.Pid)
	if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = r.cmd.Process.Kill()
	r.wait(t)
	var left []int
	for _, pid := range ps {
		if running(pid) {
			left = append(left, pid)
		}
	}
	if len(left) != len(ps) {
		t.Fatalf("of the workload's processes %v only %v outlived its supervisor and agent; this test needs them all", ps, left)
	}
	// The database is now garbage: run cannot open it.
	db := filepath.Join(s.dataDir, config.DBFileName)
	for _, f := range []string{db + "-wal", db + "-shm"} {
		_ = os.Remove(f)
	}
	if err := os.WriteFile(db, []byte(strings.Repeat("not a database ", 512)), 0o600); err != nil {
		t.Fatal(err)
	}
	again := s.start(t)
	err := again.wait(t)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("run on a corrupt database = %v, want exit 1\nstderr:\n%s", err, again.stderr.String())
	}
	waitAllDead(t, "after a restart on a corrupt database", left)
}

// TestSecondRunOnADataDirRefuses: while one run holds the data dir, a
// second run exits 1 with one line naming the holder's pid and kills
// nothing; read-only operator commands keep working.
func TestSecondRunOnADataDirRefuses(t *testing.T) {
	t.Parallel()
	s := newAgentSetup(t)
	// The first run listens where a second one with the same config would
	// (the usual case: both on the default port).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	first := s.startOn(t, listen)
	ps := pids(t, s.pidFile, treePids)
	t.Cleanup(func() { killIfOurs(ps) })

	// Another port: refused by the data dir's lock. The same port: refused
	// at the listener, which comes first, and named the same way.
	for _, l := range []string{"127.0.0.1:0", listen} {
		second := s.startOn(t, l)
		err := second.wait(t)
		msg := strings.TrimSpace(second.stderr.String())
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("second run on %s = %v, want exit 1\nstderr:\n%s", l, err, msg)
		}
		if want := "pid " + strconv.Itoa(first.cmd.Process.Pid); !strings.Contains(msg, want) || strings.Contains(msg, "\n") {
			t.Errorf("second run's error (--listen %s) = %q, want one line naming %q", l, msg, want)
		}
	}
	for _, pid := range ps {
		if !running(pid) {
			t.Errorf("workload process %d of the first run died after the second run, want it running", pid)
		}
	}
	select {
	case err := <-first.done:
		first.exited = true
		t.Fatalf("first run exited (%v) after the second run, want it running", err)
	default:
	}
	for _, args := range [][]string{
		{"status", "--data-dir", s.dataDir},
		{"workloads", "list", "--data-dir", s.dataDir},
		{"workloads", "show", "--data-dir", s.dataDir, "tree"},
		{"courier", "list", "--data-dir", s.dataDir},
		{"tiles", "list", "--data-dir", s.dataDir},
	} {
		cmd := exec.Command(s.bin, args...)
		cmd.Env = runEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%v while run holds the data dir = %v, want exit 0\n%s", args, err, out)
		}
	}
	// The holder stops cleanly and releases the lock: the next run starts.
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.wait(t); err != nil {
		t.Fatalf("first run after SIGTERM = %v, want exit 0", err)
	}
	waitAllDead(t, "after the first run stopped", ps)
}

// TestLockDataDir: the lock is exclusive across descriptors (as across
// processes), names the holder's pid, and is free again once released.
func TestLockDataDir(t *testing.T) {
	dir := t.TempDir()
	first, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lockDataDir(free dir) = %v, want nil", err)
	}
	_, err = lockDataDir(dir)
	var locked *dataDirLockedError
	if !errors.As(err, &locked) || locked.holder != strconv.Itoa(os.Getpid()) {
		t.Fatalf("lockDataDir(held dir) = %v, want a dataDirLockedError naming pid %d", err, os.Getpid())
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lockDataDir(released dir) = %v, want nil", err)
	}
	again.Close()
	if _, err := lockDataDir(filepath.Join(dir, "missing")); err == nil || errors.As(err, &locked) {
		t.Errorf("lockDataDir(missing dir) = %v, want an error that is not a lock conflict", err)
	}
}
