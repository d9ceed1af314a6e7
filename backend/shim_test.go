package backend

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// allDead reports whether none of pids runs (zombies count as dead).
func allDead(pids []int) bool {
	for _, pid := range pids {
		if alive(pid) {
			return false
		}
	}
	return true
}

// TestStopReachesTheWholeTree: Stop's SIGTERM and, after the grace, SIGKILL
// reach every process of the workload, also a setsid'ed daemon that
// ignores SIGTERM and one that cleared its environment; once Stop returns,
// none of them runs. Under every containment this host offers.
func TestStopReachesTheWholeTree(t *testing.T) {
	t.Parallel()
	for _, c := range containCases(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // its own log dir, marker and cgroup: the modes wait on their timers side by side
			b := newTestMode(t, 300*time.Millisecond, c)
			pidFile := filepath.Join(sharedDir(t), "pids")
			line := `trap "" TERM; (setsid ` + recordPid(pidFile, "sleep 1000") + ` &); (setsid sh -c 'trap - TERM; ` + recordSelf(pidFile) + `; exec sleep 1000' &); ` +
				scrubbedDaemon(pidFile, "") + ` ` + recordSelf(pidFile) + `; ` + recordPid(pidFile, "sleep 1000") + ` | cat`
			if err := b.Start(context.Background(), StartSpec{WorkloadID: "tree", Command: ShellCommand(line)}); err != nil {
				t.Fatal(err)
			}
			pids := readPids(t, pidFile, 5)
			t.Cleanup(func() { killPids(pids) })
			if err := b.Stop(context.Background(), "tree", "fenced"); err != nil {
				t.Fatal(err)
			}
			if !allDead(pids) {
				t.Errorf("after Stop returned, processes %v of the workload still run, want none", pids)
			}
			if e := nextExit(t, b); !e.Stopped || e.Signal != "SIGKILL" {
				t.Errorf("Exit after Stop of a SIGTERM-ignoring tree = %+v, want stopped by SIGKILL", e)
			}
		})
	}
}

// TestMainExitTakesTheTree: when the workload's main process ends on its
// own, its exact status is reported and nothing it started survives it,
// not even a double-forked daemon or one that cleared its environment.
func TestMainExitTakesTheTree(t *testing.T) {
	t.Parallel()
	for _, c := range containCases(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // its own log dir, marker and cgroup: the modes wait on their timers side by side
			b := newTestMode(t, 5*time.Second, c)
			pidFile := filepath.Join(sharedDir(t), "pids")
			if err := os.WriteFile(pidFile, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(pidFile, 0o666); err != nil { // the workload's user appends to it
				t.Fatal(err)
			}
			line := `(setsid ` + recordPid(pidFile, "sleep 1000") + ` &); ` + recordPid(pidFile, "sleep 1000") + ` & ` +
				scrubbedDaemon(pidFile, "") + ` while [ $(wc -l < ` + pidFile + `) -lt 3 ]; do sleep 0.01; done; exit 3`
			if err := b.Start(context.Background(), StartSpec{WorkloadID: "quitter", Command: ShellCommand(line)}); err != nil {
				t.Fatal(err)
			}
			e := nextExit(t, b)
			pids := readPids(t, pidFile, 3)
			t.Cleanup(func() { killPids(pids) })
			if e.Code != 3 || e.Signal != "" || e.Stopped {
				t.Errorf("Exit = %+v, want code 3, not stopped", e)
			}
			if !allDead(pids) {
				t.Errorf("after the Exit, processes %v the workload started still run, want none", pids)
			}
		})
	}
}

// TestKilledShimLeavesNothing: a supervisor killed with SIGKILL (the OOM
// killer, an operator) cannot clean up: what it left is dead by the time
// its Exit is delivered (so a respawn never runs beside it), also a daemon
// that cleared its environment and left the supervisor's session. In a PID
// namespace the kernel kills it with the supervisor; with a cgroup the
// backend kills the cgroup. Without either, such a daemon survives (the
// containment's warning says so); the rest of the tree does not.
func TestKilledShimLeavesNothing(t *testing.T) {
	t.Parallel()
	for _, c := range containCases(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // its own log dir, marker and cgroup: the modes wait on their timers side by side
			b := newTestMode(t, 5*time.Second, c)
			pidFile := filepath.Join(sharedDir(t), "pids")
			daemonFile := filepath.Join(sharedDir(t), "daemon")
			line := `(setsid ` + recordPid(pidFile, "sleep 1000") + ` &); ` + scrubbedDaemon(daemonFile, "") + ` ` + recordPid(pidFile, "sleep 1000") + ` | cat`
			if err := b.Start(context.Background(), StartSpec{WorkloadID: "orphaned", Command: ShellCommand(line)}); err != nil {
				t.Fatal(err)
			}
			pids := readPids(t, pidFile, 2)
			daemon := readPids(t, daemonFile, 1)
			t.Cleanup(func() { killPids(append(pids, daemon...)) })
			b.mu.Lock()
			shim := b.procs["orphaned"].cmd.Process
			b.mu.Unlock()
			if err := shim.Kill(); err != nil {
				t.Fatal(err)
			}
			if e := nextExit(t, b); e.Signal != "SIGKILL" || e.Stopped {
				t.Errorf("Exit after SIGKILL of the supervisor = %+v, want SIGKILL, not stopped", e)
			}
			if c.mode == ContainNone {
				waitFor(t, "the tagged processes the killed supervisor left to die", func() bool { return allDead(pids) })
				return
			}
			if left := append(pids, daemon...); !allDead(left) {
				t.Errorf("when the killed supervisor's Exit came, processes %v it left still ran, want none", left)
			}
		})
	}
}

// TestStuckShimIsKilled: a supervisor that does not act on the stop (here
// SIGSTOPped) is killed with its tree once the grace and the margin have
// passed, so Stop stays bounded.
func TestStuckShimIsKilled(t *testing.T) {
	t.Parallel()
	for _, c := range containCases(t) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // its own log dir, marker and cgroup: the modes wait on their timers side by side
			b := newTestMode(t, 200*time.Millisecond, c)
			pidFile := filepath.Join(sharedDir(t), "pids")
			line := `(setsid ` + recordPid(pidFile, "sleep 1000") + ` &); ` + recordPid(pidFile, "sleep 1000")
			if err := b.Start(context.Background(), StartSpec{WorkloadID: "stuck", Command: ShellCommand(line)}); err != nil {
				t.Fatal(err)
			}
			pids := readPids(t, pidFile, 2)
			t.Cleanup(func() { killPids(pids) })
			b.mu.Lock()
			shim := b.procs["stuck"].cmd.Process
			b.mu.Unlock()
			if err := shim.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := b.Stop(ctx, "stuck", "fenced"); err != nil {
				t.Fatalf("Stop(stuck supervisor) = %v, want nil", err)
			}
			if e := nextExit(t, b); !e.Stopped || e.Signal != "SIGKILL" {
				t.Errorf("Exit = %+v, want stopped by SIGKILL", e)
			}
			waitFor(t, "the stuck supervisor's workload to die", func() bool { return allDead(pids) })
		})
	}
}

// TestNewProcessNeedsTheShimHook: a binary that does not call
// RunShimIfRequested cannot run workloads (re-executing it would run its
// main again).
func TestNewProcessNeedsTheShimHook(t *testing.T) {
	shimHooked.Store(false)
	defer shimHooked.Store(true)
	if _, err := NewProcess(DefaultProcessConfig(), nil); !errors.Is(err, ErrNoShim) {
		t.Errorf("NewProcess without the hook = %v, want ErrNoShim", err)
	}
}

func TestParseShimConfig(t *testing.T) {
	for _, good := range []shimConfig{
		{agent: 1234, grace: 1500 * time.Millisecond, token: 7, uid: -1, gid: -1},
		{agent: 1234, grace: time.Second, token: 8, uid: -1, gid: -1, cgroup: "/sys/fs/cgroup/a,b/w1-x"},
		{agent: 1234, grace: time.Second, token: 9, join: true, uid: 1900000000, gid: 1900000000, cgroup: "/sys/fs/cgroup/a,b/w2-x"},
		{agent: 1234, grace: time.Second, token: 10, uid: -1, gid: -1, hold: true},
		{agent: 1234, grace: time.Second, token: 11, uid: -1, gid: -1, logMax: 16 << 20, logKeep: 2, fsize: 1 << 30},
	} {
		if got, err := parseShimConfig(good.env()[len(shimEnv)+1:]); err != nil || got != good {
			t.Errorf("parseShimConfig(%q) = %+v, %v, want %+v", good.env(), got, err, good)
		}
	}
	for _, bad := range []string{"", "1", "v1,1234,5", "v2,1234,5,1,0,", "v3,1234,5,1,0,-1,-1,0,", "v4,1234,5,1,0,-1,-1,0,0,0,0",
		"v4,x,5,1,0,-1,-1,0,0,0,0,", "v4,1234,0,1,0,-1,-1,0,0,0,0,", "v4,1,5,1,0,-1,-1,0,0,0,0,", "v4,1234,5,-1,0,-1,-1,0,0,0,0,",
		"v4,1234,5,1,2,-1,-1,0,0,0,0,", "v4,1234,5,1,1,-1,-1,0,0,0,0,", "v4,1234,5,1,0,-2,-1,0,0,0,0,", "v4,1234,5,1,0,5,-1,0,0,0,0,",
		"v4,1234,5,1,0,-1,-1,2,0,0,0,", "v4,1234,5,1,0,4294967295,4294967295,0,0,0,0,", "v4,1234,5,1,0,-1,-1,0,-1,0,0,",
		"v4,1234,5,1,0,-1,-1,0,0,-1,0,", "v4,1234,5,1,0,-1,-1,0,0,0,-1,"} {
		if _, err := parseShimConfig(bad); err == nil {
			t.Errorf("parseShimConfig(%q) = nil error, want one", bad)
		}
	}
}

// TestShimRefusesWithoutItsPipes: a process started with the shim's
// variable by hand (no lifeline, no handshake pipe) refuses to run
// anything and exits 2.
func TestShimRefusesWithoutItsPipes(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	touch, err := exec.LookPath("touch")
	if err != nil {
		t.Skip("no touch in PATH")
	}
	cmd := exec.Command(os.Args[0])
	cmd.Args = []string{shimArgv0, touch, "touch", marker}
	cmd.Env = append(os.Environ(), shimConfig{agent: os.Getpid(), grace: time.Second, uid: -1, gid: -1}.env())
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Errorf("shim without its pipes = %v (%s), want exit 2", err, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("shim without its pipes ran its command, want nothing run")
	}
}
