package backend

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// newTest returns a backend logging to a temp dir, closed at cleanup.
func newTest(t *testing.T, grace time.Duration) *Process {
	t.Helper()
	cfg := DefaultProcessConfig()
	cfg.StopGrace = grace
	cfg.LogDir = filepath.Join(t.TempDir(), "logs")
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

// nextExit waits (bounded) for the next exit.
func nextExit(t *testing.T, b Backend) Exit {
	t.Helper()
	select {
	case e, ok := <-b.Exits():
		if !ok {
			t.Fatal("Exits() closed, want an exit")
		}
		return e
	case <-time.After(20 * time.Second):
		t.Fatal("no exit within 20s")
	}
	return Exit{}
}

// waitFor polls cond until it holds (bounded); it waits for processes, not
// for timers of the code under test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNaturalExits(t *testing.T) {
	t.Parallel()
	b := newTest(t, 5*time.Second)
	ctx := context.Background()
	cases := []struct {
		name   string
		line   string
		code   int
		signal string
	}{
		{"success", "exit 0", 0, ""},
		{"failure", "exit 3", 3, ""},
		{"killed by signal", "kill -SEGV $$", -1, "SIGSEGV"},
		{"killed by a dumping signal", "kill -QUIT $$", -1, "SIGQUIT"},
		{"aborted", "kill -ABRT $$", -1, "SIGABRT"},
		{"exit code of a signal's number", "exit 143", 143, ""},
	}
	for _, tc := range cases {
		id := "w-" + strings.ReplaceAll(tc.name, " ", "-")
		if err := b.Start(ctx, StartSpec{WorkloadID: id, Epoch: 7, Command: ShellCommand(tc.line)}); err != nil {
			t.Fatal(err)
		}
		e := nextExit(t, b)
		if e.WorkloadID != id || e.Epoch != 7 || e.Code != tc.code || e.Signal != tc.signal || e.Stopped || e.Err != nil || e.At.IsZero() {
			t.Errorf("Exit(%s) = %+v, want id %s epoch 7 code %d signal %q not stopped", tc.line, e, id, tc.code, tc.signal)
		}
		if b.Running(id) {
			t.Errorf("Running(%s) after exit = true, want false", id)
		}
	}
}

func TestStopIsReportedAsStopped(t *testing.T) {
	b := newTest(t, 10*time.Second)
	ctx := context.Background()
	spec := StartSpec{WorkloadID: "sleeper", Epoch: 2, Command: []string{"sleep", "60"}}
	if err := b.Start(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if !b.Running("sleeper") {
		t.Fatal("Running(sleeper) = false after Start, want true")
	}
	// Starting again while it runs is a no-op (effects are replayed).
	spec.Epoch = 3
	if err := b.Start(ctx, spec); err != nil {
		t.Fatalf("Start(running) = %v, want nil", err)
	}
	if err := b.Stop(ctx, "sleeper", "fenced"); err != nil {
		t.Fatal(err)
	}
	if b.Running("sleeper") {
		t.Error("Running(sleeper) after Stop = true, want false")
	}
	e := nextExit(t, b)
	if !e.Stopped || e.Reason != "fenced" || e.Signal != "SIGTERM" || e.Epoch != 3 {
		t.Errorf("Exit after Stop = %+v, want stopped, reason fenced, SIGTERM, epoch 3", e)
	}
	// Stopping again, or stopping something unknown, is not an error.
	if err := b.Stop(ctx, "sleeper", "again"); err != nil {
		t.Errorf("Stop(stopped) = %v, want nil", err)
	}
	if err := b.Stop(ctx, "nobody", "x"); err != nil {
		t.Errorf("Stop(unknown) = %v, want nil", err)
	}
	if got := e.String(); got != "signal SIGTERM (stopped: fenced)" {
		t.Errorf("Exit.String() = %q, want %q", got, "signal SIGTERM (stopped: fenced)")
	}
}

func TestStopKillsAfterGrace(t *testing.T) {
	b := newTest(t, 300*time.Millisecond)
	ctx := context.Background()
	dir := sharedDir(t)
	ready := filepath.Join(dir, "ready")
	// The shell and its children ignore SIGTERM.
	line := `trap "" TERM; ` + recordPid(filepath.Join(dir, "child"), "sleep 60") + ` & while [ ! -s ` + filepath.Join(dir, "child") + ` ]; do sleep 0.01; done; touch ` + ready + `; wait`
	if err := b.Start(ctx, StartSpec{WorkloadID: "stubborn", Epoch: 1, Command: ShellCommand(line)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the trap to be set", func() bool { _, err := os.Stat(ready); return err == nil })
	if err := b.Stop(ctx, "stubborn", "evicted"); err != nil {
		t.Fatal(err)
	}
	e := nextExit(t, b)
	if !e.Stopped || e.Signal != "SIGKILL" || e.Code != -1 {
		t.Errorf("Exit after Stop of a SIGTERM-ignoring process = %+v, want stopped by SIGKILL", e)
	}
	// The child in the group is gone too.
	data, _ := os.ReadFile(filepath.Join(dir, "child"))
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("child pid file = %q", data)
	}
	waitFor(t, "the child to die", func() bool { return !alive(pid) })
}

func TestOrphansDieWithLeader(t *testing.T) {
	t.Parallel()
	b := newTest(t, 5*time.Second)
	ctx := context.Background()
	pidFile := filepath.Join(sharedDir(t), "child")
	line := recordPid(pidFile, "sleep 60") + ` & while [ ! -s ` + pidFile + ` ]; do sleep 0.01; done; exit 0`
	if err := b.Start(ctx, StartSpec{WorkloadID: "forker", Command: ShellCommand(line)}); err != nil {
		t.Fatal(err)
	}
	if e := nextExit(t, b); e.Code != 0 || e.Stopped {
		t.Fatalf("Exit = %+v, want code 0", e)
	}
	data, _ := os.ReadFile(pidFile)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("child pid file = %q", data)
	}
	waitFor(t, "the orphan to die", func() bool { return !alive(pid) })
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	// state is the field after the ")" that closes the command name.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestStartErrors(t *testing.T) {
	b := newTest(t, time.Second)
	ctx := context.Background()
	cases := []struct {
		name string
		spec StartSpec
		want error // nil: any error
	}{
		{"no command", StartSpec{WorkloadID: "a"}, ErrNoCommand},
		{"empty argv0", StartSpec{WorkloadID: "a", Command: []string{""}}, ErrNoCommand},
		{"no id", StartSpec{Command: []string{"true"}}, ErrBadSpec},
		{"long id", StartSpec{WorkloadID: strings.Repeat("x", MaxWorkloadIDLen+1), Command: []string{"true"}}, ErrBadSpec},
		{"bad env", StartSpec{WorkloadID: "a", Command: []string{"true"}, Env: []string{"NOEQUALS"}}, ErrBadSpec},
		{"missing binary", StartSpec{WorkloadID: "a", Command: []string{"/nonexistent/binary"}}, nil},
		{"missing dir", StartSpec{WorkloadID: "a", Command: []string{"true"}, Dir: "/nonexistent/dir"}, nil},
	}
	for _, tc := range cases {
		err := b.Start(ctx, tc.spec)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("Start(%s) = %v, want %v", tc.name, err, tc.want)
		}
		if b.Running(tc.spec.WorkloadID) {
			t.Errorf("Running after Start(%s) failed = true, want false", tc.name)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.Start(cctx, StartSpec{WorkloadID: "a", Command: []string{"true"}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Start(cancelled ctx) = %v, want context.Canceled", err)
	}
	select {
	case e := <-b.Exits():
		t.Errorf("Exit after failed starts = %+v, want none", e)
	default:
	}
}

func TestEnvDirAndLogFile(t *testing.T) {
	t.Parallel()
	b := newTest(t, time.Second)
	dir := t.TempDir()
	spec := StartSpec{
		WorkloadID: "job/1 with spaces", Epoch: 4, Dir: dir, Env: []string{"FOO=bar"},
		Command: ShellCommand(`echo "id=$PROVIDER_AGENT_WORKLOAD_ID epoch=$PROVIDER_AGENT_EPOCH foo=$FOO pwd=$(pwd)"; echo oops >&2`),
	}
	if err := b.Start(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	nextExit(t, b)
	path := b.LogPath(spec.WorkloadID)
	if filepath.Dir(path) != b.cfg.LogDir || strings.ContainsAny(filepath.Base(path), "/ ") {
		t.Fatalf("LogPath(%q) = %q, want a safe name inside the log dir", spec.WorkloadID, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"id=job/1 with spaces epoch=4 foo=bar pwd=" + dir, "oops", "=== provider-agent: start", "ended: exit 0"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("log = %q, want it to contain %q", data, want)
		}
	}
}

func TestBaseEnv(t *testing.T) {
	var buf syncBuffer
	t.Setenv("AGENT_ONLY_SECRET", "s3cret")
	b, err := NewProcess(ProcessConfig{StopGrace: time.Second, Output: &buf, BaseEnv: []string{"PATH=" + os.Getenv("PATH")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	if err := b.Start(context.Background(), StartSpec{WorkloadID: "e", Env: []string{"X=1"}, Command: ShellCommand(`echo "[$AGENT_ONLY_SECRET][$X][$PROVIDER_AGENT_WORKLOAD_ID]"`)}); err != nil {
		t.Fatal(err)
	}
	nextExit(t, b)
	if got := buf.String(); !strings.Contains(got, "[][1][e]") {
		t.Errorf("output = %q, want the agent's variable absent and the spec's present", got)
	}
}

func TestOutputWriter(t *testing.T) {
	var buf syncBuffer
	cfg := DefaultProcessConfig()
	cfg.Output = &buf
	b, err := NewProcess(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if err := b.Start(ctx, StartSpec{WorkloadID: id, Command: ShellCommand("echo hello-" + id)}); err != nil {
			t.Fatal(err)
		}
	}
	nextExit(t, b)
	nextExit(t, b)
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); !strings.Contains(s, "hello-a") || !strings.Contains(s, "hello-b") {
		t.Errorf("output = %q, want both workloads' lines", s)
	}
	if b.LogPath("a") != "" {
		t.Errorf("LogPath without LogDir = %q, want empty", b.LogPath("a"))
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func TestCloseStopsEverythingWithoutLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	cfg := DefaultProcessConfig()
	cfg.StopGrace = 5 * time.Second
	cfg.LogDir = t.TempDir()
	b, err := NewProcess(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n = 20
	fdsBefore := openFDs(t)
	for i := 0; i < n; i++ {
		if err := b.Start(ctx, StartSpec{WorkloadID: "w" + strconv.Itoa(i), Command: []string{"sleep", "60"}}); err != nil {
			t.Fatal(err)
		}
	}
	// Running workloads hold no descriptors in the agent (pidfds aside: at
	// most one per process).
	if fds := openFDs(t); fds > fdsBefore+n {
		t.Errorf("open descriptors with %d workloads = %d, want at most %d", n, fds, fdsBefore+n)
	}
	// Nobody reads Exits: Close must not block on it.
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if b.Running("w" + strconv.Itoa(i)) {
			t.Errorf("Running(w%d) after Close = true, want false", i)
		}
	}
	for range b.Exits() {
		// drained or already closed: Exits must end
	}
	if err := b.Start(ctx, StartSpec{WorkloadID: "late", Command: []string{"true"}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Close = %v, want ErrClosed", err)
	}
	if err := b.Close(ctx); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	waitFor(t, "goroutines to return to the baseline", func() bool { return runtime.NumGoroutine() <= before })
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

func TestExitsAreQueuedForSlowReaders(t *testing.T) {
	t.Parallel()
	b := newTest(t, time.Second)
	ctx := context.Background()
	const n = 30
	for i := 0; i < n; i++ {
		if err := b.Start(ctx, StartSpec{WorkloadID: "q" + strconv.Itoa(i), Command: ShellCommand("exit " + strconv.Itoa(i%5))}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all processes to end", func() bool {
		for i := 0; i < n; i++ {
			if b.Running("q" + strconv.Itoa(i)) {
				return false
			}
		}
		return true
	})
	seen := map[string]bool{}
	for i := 0; i < n; i++ {
		e := nextExit(t, b)
		seen[e.WorkloadID] = true
	}
	if len(seen) != n {
		t.Errorf("distinct exits = %d, want %d", len(seen), n)
	}
}

func TestStopContextEnds(t *testing.T) {
	b := newTest(t, 200*time.Millisecond)
	dir := sharedDir(t)
	ready := filepath.Join(dir, "ready")
	if err := b.Start(context.Background(), StartSpec{WorkloadID: "s", Command: ShellCommand(`trap "" TERM; touch ` + ready + `; sleep 60`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the trap", func() bool { _, err := os.Stat(ready); return err == nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Stop(ctx, "s", "quick"); !errors.Is(err, context.Canceled) {
		t.Errorf("Stop(cancelled ctx) = %v, want context.Canceled", err)
	}
	if err := b.Start(context.Background(), StartSpec{WorkloadID: "s", Command: []string{"true"}}); !errors.Is(err, ErrStopping) {
		t.Errorf("Start during stop = %v, want ErrStopping", err)
	}
	// The stop still completes in the background (SIGKILL after the grace).
	e := nextExit(t, b)
	if !e.Stopped || e.Signal != "SIGKILL" {
		t.Errorf("Exit = %+v, want stopped by SIGKILL", e)
	}
}

func TestLogName(t *testing.T) {
	cases := []struct{ id, want string }{
		{"simple-id_1.x", "simple-id_1.x.log"},
		{"../etc/passwd", "_._etc_passwd-"},
		{".hidden", "_hidden-"},
		{strings.Repeat("a", 100), strings.Repeat("a", 64) + "-"},
	}
	for _, tc := range cases {
		got := logName(tc.id)
		if !strings.HasPrefix(got, tc.want) || strings.Contains(got, "/") {
			t.Errorf("logName(%q) = %q, want prefix %q and no slash", tc.id, got, tc.want)
		}
	}
	if logName("a/b") == logName("a_b") {
		t.Errorf("logName(a/b) = logName(a_b) = %q, want distinct", logName("a_b"))
	}
}

// TestLeftoversOfADeadAgentAreKilled simulates an agent killed with kill -9:
// its workload's grandchild survived (Pdeathsig reaches only the child). A
// new backend on the same LogDir kills it; a process tagged for another
// LogDir survives.
func TestLeftoversOfADeadAgentAreKilled(t *testing.T) {
	t.Parallel()
	logDir := filepath.Join(t.TempDir(), "logs")
	first, err := NewProcess(ProcessConfig{StopGrace: time.Second, LogDir: logDir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	marker := first.marker
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	spawn := func(marker string) *os.Process {
		t.Helper()
		cmd := exec.Command("sleep", "60")
		cmd.Env = append(os.Environ(), MarkerEnv+"="+marker)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		t.Cleanup(func() { cmd.Process.Kill(); <-done })
		return cmd.Process
	}
	leftover := spawn(marker)
	other := spawn("0123456789abcdef")
	waitFor(t, "the environ to be readable", func() bool {
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(leftover.Pid) + "/environ")
		return hasEnvEntry(env, []byte(MarkerEnv+"="+marker))
	})

	second := newTestDir(t, logDir)
	waitFor(t, "the leftover to die", func() bool { return !alive(leftover.Pid) })
	if !alive(other.Pid) {
		t.Error("process of another backend was killed, want it alive")
	}
	// New workloads carry the marker.
	if err := second.Start(context.Background(), StartSpec{WorkloadID: "m", Command: ShellCommand(`echo "marker=$` + MarkerEnv + `"`)}); err != nil {
		t.Fatal(err)
	}
	nextExit(t, second)
	data, _ := os.ReadFile(second.LogPath("m"))
	if !strings.Contains(string(data), "marker="+marker) {
		t.Errorf("log = %q, want marker=%s", data, marker)
	}
}

func newTestDir(t *testing.T, logDir string) *Process {
	t.Helper()
	b, err := NewProcess(ProcessConfig{StopGrace: time.Second, LogDir: logDir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return b
}
