package backend

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"provideragent/backend/backendtest"
	"provideragent/internal/imagespec"
)

// newPodmanTest returns a podman backend with grace, logging under dir's
// logs (a fresh temp dir when dir is ""), closed at cleanup.
func newPodmanTest(t *testing.T, grace time.Duration) *Podman {
	t.Helper()
	backendtest.Busybox(t)
	cfg := DefaultPodmanConfig()
	cfg.StopGrace, cfg.LogDir, cfg.WorkloadDir, cfg.RunArgs = grace, filepath.Join(t.TempDir(), "logs"), reachableDir(t), backendtest.RunArgs
	p, err := NewPodman(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("Close() = %v, want nil", err)
		}
	})
	return p
}

// bbSpec runs line with busybox's sh in the test image.
func bbSpec(id string, epoch uint64, im imagespec.Image, line string) StartSpec {
	if im.Ref == "" {
		im.Ref = backendtest.BusyboxImage
	}
	return StartSpec{WorkloadID: id, Epoch: epoch, Command: imagespec.Encode(im, []string{"/bin/sh", "-c", line})}
}

// logOf waits (bounded) until the workload's log holds want on a line of
// its own, and returns the log.
func logOf(t *testing.T, path, want string) string {
	t.Helper()
	var data []byte
	waitFor(t, want+" in "+path, func() bool {
		data, _ = os.ReadFile(path)
		return strings.Contains("\n"+string(data), "\n"+want+"\n")
	})
	return string(data)
}

// TestPodmanRunsAnImage: a container of the grant's image runs as the
// workload's uid, with no capabilities, no network and only the
// PROVIDER_AGENT_* variables and the grant's environment, its checkpoint
// directory mounted and writable; its output and exit code are reported
// as a process's; a command that is not an image is refused.
func TestPodmanRunsAnImage(t *testing.T) {
	t.Parallel()
	p := newPodmanTest(t, 2*time.Second)
	ctx := context.Background()
	line := `echo "ids $(id -u) $(id -g)"; grep CapEff /proc/self/status; ls /sys/class/net | sed 's/^/net /'; env | sed 's/^/env /'; ` +
		`echo kept > "$PROVIDER_AGENT_CHECKPOINT_DIR/state" && echo wrote; exit 7`
	if err := p.Start(ctx, bbSpec("img", 5, imagespec.Image{Env: []string{"GRANTED=yes"}, MemoryMB: 64, CPUs: 0.5}, line)); err != nil {
		t.Fatal(err)
	}
	if !p.Running("img") {
		t.Errorf("Running(img) after Start = false")
	}
	e := nextExit(t, p)
	if e.WorkloadID != "img" || e.Epoch != 5 || e.Code != 7 || e.Signal != "" || e.Stopped {
		t.Errorf("Exit = %+v, want img epoch 5 code 7, not stopped", e)
	}
	data, _ := os.ReadFile(p.LogPath("img"))
	out := string(data)
	iso := p.Isolation()
	for _, want := range []string{"wrote", "CapEff:\t0000000000000000", "net lo\n", "env GRANTED=yes", "env PROVIDER_AGENT_EPOCH=5",
		"env PROVIDER_AGENT_WORKLOAD_ID=img", "env " + CheckpointDirEnv + "=" + ContainerCheckpointDir, "ended: exit 7"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, agentSecretEnv) || strings.Contains(out, "ids 0 ") || strings.Contains(out, "net eth") {
		t.Errorf("the container has the agent's environment, root or a network:\n%s", out)
	}
	state := filepath.Join(iso.WorkloadDir, "img", "checkpoint", "5", "state")
	if b, err := os.ReadFile(state); err != nil || string(b) != "kept\n" {
		t.Errorf("checkpoint file on the host %s = %q, %v; want what the container wrote", state, b, err)
	}
	if p.Running("img") {
		t.Errorf("Running(img) after its exit = true")
	}
	if out, _ := exec.Command("podman", "ps", "-a", "-q", "--filter", "label="+PodmanLabelWorkload+"=img").Output(); len(strings.TrimSpace(string(out))) != 0 {
		t.Errorf("container record of img left after its exit: %s", out)
	}
	if err := p.Start(ctx, StartSpec{WorkloadID: "cmd", Command: ShellCommand("true")}); err == nil {
		t.Errorf("Start(a plain command) on podman = nil, want an error")
	}
}

// TestPodmanRunsInItsOwnDirectory: podman run works in the backend's own
// directory, not the agent's working directory, where podman and conmon
// would leave files (an empty "oom" after an OOM kill).
func TestPodmanRunsInItsOwnDirectory(t *testing.T) {
	t.Parallel()
	p := newPodmanTest(t, time.Second)
	if err := p.Start(context.Background(), bbSpec("cwd", 1, imagespec.Image{}, "sleep 30")); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	pid := p.ctrs["cwd"].cmd.Process.Pid
	p.mu.Unlock()
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	agentCwd, _ := os.Getwd()
	if err != nil || cwd != p.envDir || cwd == agentCwd {
		t.Errorf("podman run's working directory = %q (%v), want the backend's own %s", cwd, err, p.envDir)
	}
	if err := p.Stop(context.Background(), "cwd", "test"); err != nil {
		t.Fatal(err)
	}
}

// TestPodmanStop: Stop ends a container that ignores SIGTERM with SIGKILL
// after the grace, and one that handles it with its own status; both are
// reported stopped and leave no container.
func TestPodmanStop(t *testing.T) {
	t.Parallel()
	const grace = time.Second
	p := newPodmanTest(t, grace)
	ctx := context.Background()
	for _, tc := range []struct {
		id, line, signal string
		code             int
	}{
		{"stubborn", `trap "" TERM; echo up; while :; do sleep 1; done`, "SIGKILL", -1},
		{"polite", `trap "echo bye; exit 0" TERM; echo up; while :; do sleep 0.1; done`, "", 0},
	} {
		if err := p.Start(ctx, bbSpec(tc.id, 1, imagespec.Image{}, tc.line)); err != nil {
			t.Fatal(err)
		}
		logOf(t, p.LogPath(tc.id), "up")
		began := time.Now()
		if err := p.Stop(ctx, tc.id, "fenced"); err != nil {
			t.Fatal(err)
		}
		took := time.Since(began)
		e := nextExit(t, p)
		if !e.Stopped || e.Reason != "fenced" || e.Signal != tc.signal || e.Code != tc.code {
			t.Errorf("Exit of %s after Stop = %+v, want stopped (fenced), signal %q code %d", tc.id, e, tc.signal, tc.code)
		}
		if tc.signal == "SIGKILL" && (took < grace || took > grace+10*time.Second) {
			t.Errorf("Stop of a SIGTERM-ignoring container took %v, want the grace %v and a little", took, grace)
		}
		t.Logf("Stop of %s took %v", tc.id, took.Round(time.Millisecond))
	}
	if out, _ := exec.Command("podman", "ps", "-a", "-q", "--filter", "label="+PodmanLabelBackend+"="+p.holders.marker).Output(); len(strings.TrimSpace(string(out))) != 0 {
		t.Errorf("containers left after the stops: %s", out)
	}
}

// TestPodmanOOMIsAnExit: a container killed by the kernel for exceeding
// its memory limit is reported as a crash (signal SIGKILL, not stopped),
// as the process backend reports any killed process.
func TestPodmanOOMIsAnExit(t *testing.T) {
	t.Parallel()
	p := newPodmanTest(t, time.Second)
	if err := p.Start(context.Background(), bbSpec("hog", 1, imagespec.Image{MemoryMB: 16}, `exec tail /dev/zero`)); err != nil {
		t.Fatal(err)
	}
	if e := nextExit(t, p); e.Signal != "SIGKILL" || e.Stopped {
		t.Errorf("Exit of a container over its memory limit = %+v, want SIGKILL, not stopped", e)
	}
}

// TestPodmanHostileWorkload: the hostile workload of
// TestIsolatedWorkloadReachesNothing inside a container: none of the
// agent's files, the other workload's checkpoint or log exists there
// (ENOENT), the agent is not in its PID namespace (ESRCH), its supervisor
// (pid 1) is root's (EPERM), and so is the host's root it has (EACCES);
// the data dir and the victim are unchanged.
func TestPodmanHostileWorkload(t *testing.T) {
	t.Parallel()
	backendtest.Busybox(t)
	f := newAgentFiles(t)
	cfg := DefaultPodmanConfig()
	cfg.StopGrace, cfg.LogDir, cfg.WorkloadDir, cfg.RunArgs = time.Second, f.logDir, reachableDir(t), backendtest.RunArgs
	p, err := NewPodman(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	ctx := context.Background()
	victim := `echo victim-secret > "$PROVIDER_AGENT_CHECKPOINT_DIR/secret"; echo ready; exec sleep 1000`
	if err := p.Start(ctx, bbSpec("victim", 2, imagespec.Image{}, victim)); err != nil {
		t.Fatal(err)
	}
	logOf(t, p.LogPath("victim"), "ready")
	ckpt := filepath.Join(p.Isolation().WorkloadDir, "victim", "checkpoint", "2")
	if err := p.Start(ctx, bbSpec("hostile", 1, imagespec.Image{}, hostileLine(f, os.Getpid(), ckpt, p.LogPath("victim")))); err != nil {
		t.Fatal(err)
	}
	if e := nextExit(t, p); e.WorkloadID != "hostile" || e.Code != 0 {
		t.Fatalf("exit %+v, want the hostile workload's, code 0", e)
	}
	out, _ := os.ReadFile(p.LogPath("hostile"))
	checkHostile(t, string(out), map[string][]string{
		"":                   backendtest.ENOENT,
		"host-root-via-pid1": backendtest.EACCES,
		"signal-agent":       backendtest.ESRCH,
		"signal-supervisor":  backendtest.EPERM,
	})
	f.checkUnchanged(t)
	if data, err := os.ReadFile(filepath.Join(ckpt, "secret")); err != nil || string(data) != "victim-secret\n" {
		t.Errorf("the victim's checkpoint secret = %q, %v; want it as the victim wrote it", data, err)
	}
	if !p.Running("victim") {
		t.Errorf("the victim no longer runs")
	}
	t.Logf("hostile workload in a container:\n%s", out)
}

// podmanHelperEnv makes the test binary act as an agent running a podman
// backend on the log dir it names, with one container of the workload
// line in podmanLineEnv; it prints "started <supervisor pid>" once podman
// runs, then waits to be killed.
const (
	podmanHelperEnv = "BACKEND_TEST_PODMAN_HELPER"
	podmanLineEnv   = "BACKEND_TEST_PODMAN_LINE"
	podmanDirEnv    = "BACKEND_TEST_PODMAN_WORKLOAD_DIR"
)

func runPodmanHelper(logDir, line, workloadDir string) int {
	cfg := DefaultPodmanConfig()
	cfg.StopGrace, cfg.LogDir, cfg.WorkloadDir, cfg.RunArgs = 2*time.Second, logDir, workloadDir, backendtest.RunArgs
	p, err := NewPodman(context.Background(), cfg, nil)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	if err := p.Start(context.Background(), bbSpec("w", 1, imagespec.Image{}, line)); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	p.holders.mu.Lock()
	shim := p.holders.procs["w"].cmd.Process.Pid
	p.holders.mu.Unlock()
	fmt.Println("started", shim)
	time.Sleep(time.Minute)
	return 0
}

// TestPodmanContainerDiesWithTheAgent: kill -9 of the agent (alone, or
// with its supervisor) leaves none of the container's processes running,
// a daemon that left the container's main process included, within the
// grace (sampled every 20 ms); the container record it leaves is removed
// by KillPodmanLeftovers, as run does before it opens the database.
func TestPodmanContainerDiesWithTheAgent(t *testing.T) {
	t.Parallel()
	backendtest.Busybox(t)
	const grace = 2 * time.Second
	for _, withShim := range []bool{false, true} {
		name := "agent"
		if withShim {
			name = "agent-and-supervisor"
		}
		t.Run(name, func(t *testing.T) {
			logDir := filepath.Join(t.TempDir(), "logs")
			line := `(setsid sleep 1000 &); echo up; exec sleep 1000`
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), podmanHelperEnv+"="+logDir, podmanLineEnv+"="+line, podmanDirEnv+"="+reachableDir(t))
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
				_, _ = KillLeftovers(logDir, nil)
				_, _ = KillPodmanLeftovers(context.Background(), "podman", logDir, nil)
			})
			first, _ := bufio.NewReader(out).ReadString('\n')
			f := strings.Fields(first)
			if len(f) != 2 || f[0] != "started" {
				t.Fatalf("helper agent said %q, want started <pid>", first)
			}
			shim, _ := strconv.Atoi(f[1])
			logOf(t, LogFile(logDir, "w"), "up")
			procs := namespaceProcs(shim)
			if len(procs) < 2 {
				t.Fatalf("processes in the supervisor's namespace: %v, want the container's two at least", procs)
			}
			if withShim {
				stopAndWait(t, cmd.Process.Pid)
				if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			_ = cmd.Process.Kill()
			killed := time.Now()
			var gone time.Duration
			for gone == 0 {
				if allDead(procs) {
					gone = time.Since(killed)
					break
				}
				if time.Since(killed) > grace {
					t.Fatalf("the container's processes %v still run %v after kill -9 of the agent, want them gone within the grace", procs, grace)
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("the container's %d processes were gone %v after the kill", len(procs), gone.Round(time.Millisecond))
			<-waited
			n, err := KillPodmanLeftovers(context.Background(), "podman", logDir, nil)
			if err != nil || n != 1 {
				t.Errorf("KillPodmanLeftovers after the kill = %d, %v, want the one container record removed", n, err)
			}
		})
	}
}

// namespaceProcs lists the processes (host pids) in the PID namespace of
// pid, pid excepted.
func namespaceProcs(pid int) []int {
	want, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	if err != nil {
		return nil
	}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil || n == pid {
			continue
		}
		if ns, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && ns == want {
			out = append(out, n)
		}
	}
	return out
}
