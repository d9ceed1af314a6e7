package backend

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary act as an agent that starts the workload
// line in helperLineEnv, with the containment and isolation in
// helperModeEnv ("<mode>,<cgroup version>,<isolation>"), prints "started
// <supervisor pid> <containment>" and then waits to be killed.
const (
	helperEnv     = "BACKEND_TEST_AGENT_HELPER"
	helperLineEnv = "BACKEND_TEST_AGENT_LINE"
	helperModeEnv = "BACKEND_TEST_AGENT_MODE"
)

func TestMain(m *testing.M) {
	RunShimIfRequested()
	// A variable of the agent's environment that an isolated workload
	// must not see (set here, not by t.Setenv, so that tests may run in
	// parallel).
	os.Setenv(agentSecretEnv, "s3cret-of-the-agent")
	if dir := os.Getenv(helperEnv); dir != "" {
		os.Exit(runHelperAgent(dir, os.Getenv(helperLineEnv), os.Getenv(helperModeEnv)))
	}
	if dir := os.Getenv(podmanHelperEnv); dir != "" {
		os.Exit(runPodmanHelper(dir, os.Getenv(podmanLineEnv), os.Getenv(podmanDirEnv)))
	}
	os.Exit(m.Run())
}

func runHelperAgent(dir, line, mode string) int {
	cfg := ProcessConfig{StopGrace: time.Second, LogDir: filepath.Join(dir, "logs")}
	f := append(strings.Split(mode, ","), "", "", "")
	cfg.Containment = ContainMode(f[0])
	cfg.cgroupVersion, _ = strconv.Atoi(f[1])
	cfg.Isolation = IsolationMode(f[2])
	b, err := NewProcess(cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	if err := b.Start(context.Background(), StartSpec{WorkloadID: "w", Command: ShellCommand(line)}); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	b.mu.Lock()
	shim := b.procs["w"].cmd.Process.Pid
	b.mu.Unlock()
	fmt.Println("started", shim, b.contain)
	time.Sleep(time.Minute)
	return 0
}

// helperAgent is runHelperAgent in a child process.
type helperAgent struct {
	cmd         *exec.Cmd
	shim        int
	containment string
}

// startHelperAgent starts a helper agent running line under mode (the
// test binary at bin, as cred when not nil) and waits until it started
// the workload. It is killed at cleanup.
func startHelperAgent(t *testing.T, bin, dir, line string, c containCase, cred *syscall.Credential) *helperAgent {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir, helperLineEnv+"="+line,
		helperModeEnv+"="+string(c.mode)+","+strconv.Itoa(c.cgroupVersion)+","+string(c.isolation))
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-waited
		// What the test left (and the backend's cgroups).
		if _, err := KillLeftovers(filepath.Join(dir, "logs"), nil); err != nil {
			t.Errorf("KillLeftovers at cleanup: %v", err)
		}
	})
	line0, _ := bufio.NewReader(out).ReadString('\n')
	f := strings.SplitN(strings.TrimSpace(line0), " ", 3)
	if len(f) != 3 || f[0] != "started" {
		t.Fatalf("helper agent said %q, want started <pid> <containment>", line0)
	}
	h := &helperAgent{cmd: cmd, containment: f[2]}
	h.shim, _ = strconv.Atoi(f[1])
	return h
}

// stopAndWait sends SIGSTOP to pid and waits until every thread of it is
// stopped: a thread that is running on another CPU stops only a moment
// later, and could still act on what the test does next.
func stopAndWait(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("every thread of %d to stop", pid), func() bool {
		tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			return false
		}
		for _, task := range tasks {
			tid, _ := strconv.Atoi(task.Name())
			if st, ok := readStat(tid); !ok || (st.state != 'T' && st.state != 't') {
				return false
			}
		}
		return true
	})
}

// recordPid is a shell command that appends its own pid (as the test's
// /proc names it: $$ is a pid in the workload's PID namespace) to file and
// then becomes argv (exec, same pid).
func recordPid(file, argv string) string {
	return `sh -c '` + recordSelf(file) + `; exec ` + argv + `'`
}

// recordSelf is a shell command that appends the shell's pid, as the
// test's /proc names it, to file. Its redirections hold no single quote,
// so it may stand inside one.
func recordSelf(file string) string {
	return `read -r p _ </proc/self/stat; echo $p >> ` + file
}

// scrubbedDaemon is a shell command that starts a daemon the way the
// issue's trial did: it clears its environment (no backend tag) and leaves
// the shell's session and process group; it records its pid in file and
// appends a line to out every 20 ms when out is not "".
func scrubbedDaemon(file, out string) string {
	loop := `while :; do sleep 0.02; done`
	if out != "" {
		loop = `while :; do echo "$(date +%s%N) $p" >> ` + out + `; sleep 0.02; done`
	}
	return `env -i PATH=/usr/bin:/bin setsid sh -c '` + recordSelf(file) + `; ` + loop + `' &`
}

// readPids waits until file lists n pids and returns them.
func readPids(t *testing.T, file string, n int) []int {
	t.Helper()
	var pids []int
	waitFor(t, fmt.Sprintf("%d pids in %s", n, file), func() bool {
		data, _ := os.ReadFile(file)
		pids = pids[:0]
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return len(pids) >= n
	})
	return pids
}

// TestWorkloadTreeDiesWithKilledAgent runs an agent in a child process
// with a workload of each shape a shell line can take, kills the agent
// with SIGKILL, and checks that every process of the workload dies with
// it, without any later agent's help: a shell pipeline (the shell forks
// each element: grandchildren of the agent), a double fork whose setsid'ed
// daemon leaves the shell's session and is reparented, and a daemon that
// also clears its environment. No cgroup is left behind either.
func TestWorkloadTreeDiesWithKilledAgent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		line func(pids string) string
		n    int // processes that record their pid
	}{
		{"pipeline", func(pids string) string {
			return recordSelf(pids) + `; ` + recordPid(pids, "sleep 1000") + ` | ` + recordPid(pids, "cat")
		}, 3},
		{"double fork", func(pids string) string {
			return `(setsid ` + recordPid(pids, "sleep 1000") + ` &); ` + recordSelf(pids) + `; ` + recordPid(pids, "sleep 1000")
		}, 3},
		{"scrubbed daemon", func(pids string) string {
			return scrubbedDaemon(pids, "") + ` ` + recordSelf(pids) + `; ` + recordPid(pids, "sleep 1000")
		}, 3},
	}
	for _, c := range containCases(t) {
		for _, tt := range tests {
			t.Run(c.name+"/"+tt.name, func(t *testing.T) {
				t.Parallel() // its own log dir, marker and cgroup: the modes wait on their timers side by side
				dir := sharedDir(t)
				pidFile := filepath.Join(dir, "pids")
				h := startHelperAgent(t, os.Args[0], dir, tt.line(pidFile), c, nil)
				pids := readPids(t, pidFile, tt.n)
				t.Cleanup(func() { killPids(pids) })
				for _, pid := range pids {
					if !alive(pid) {
						t.Fatalf("workload process %d is not running before the kill", pid)
					}
				}
				if err := h.cmd.Process.Kill(); err != nil { // SIGKILL
					t.Fatal(err)
				}
				waitFor(t, "every workload process to die with the agent", func() bool { return allDead(pids) })
				// Nor does a cgroup outlive it: the supervisor removes its own
				// and the backend's on its way out.
				for _, tr := range cgroupTrees(mustMarker(t, filepath.Join(dir, "logs"))) {
					waitFor(t, "the cgroup dir "+tr.dir+" to go", func() bool { _, err := os.Stat(tr.dir); return os.IsNotExist(err) })
				}
			})
		}
	}
}

// killPids SIGKILLs those of pids that still run a test workload's
// command, sh or sleep (cleanup of a failed test; a pid alone may have
// been reused, and a scrubbed daemon carries no tag to check).
func killPids(pids []int) {
	for _, pid := range pids {
		comm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
		if c := strings.TrimSpace(string(comm)); err == nil && (c == "sh" || c == "sleep" || c == "cat") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
