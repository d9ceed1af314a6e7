package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3" // the "sqlite3" driver, for the lock holder

	"provideragent/agent"
	"provideragent/internal/cutproxy"
	"provideragent/internal/relaytest"
)

// holdLockEnv makes this test binary, run as a child, hold SQLite's write
// lock on the database the variable names (BEGIN IMMEDIATE, as `sqlite3
// DB 'BEGIN IMMEDIATE;'` would), print "locked", and keep it until its
// standard input closes: another process that holds the database.
const holdLockEnv = "PROVIDER_AGENT_TEST_HOLD_WRITE_LOCK"

func holdWriteLockIfRequested() {
	path := os.Getenv(holdLockEnv)
	if path == "" {
		return
	}
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000")
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	conn, err := db.Conn(context.Background())
	if err == nil {
		_, err = conn.ExecContext(context.Background(), "BEGIN IMMEDIATE")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "begin immediate:", err)
		os.Exit(2)
	}
	fmt.Println("locked")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until the parent closes stdin
	os.Exit(0)
}

// sqliteLocker is another process holding SQLite's write lock on a database.
type sqliteLocker struct {
	cmd   *exec.Cmd
	stdin interface{ Close() error }
	since time.Time
	once  sync.Once // release may run from a test's goroutine and from its cleanup
}

// holdWriteLock starts a process that takes the write lock on the database
// at path and keeps it until release (or the end of the test).
func holdWriteLock(t *testing.T, path string) *sqliteLocker {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), holdLockEnv+"="+path)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &sqliteLocker{cmd: cmd, stdin: in}
	t.Cleanup(h.release)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "locked" {
		t.Fatalf("lock holder printed %q, %v; want locked", line, err)
	}
	h.since = time.Now()
	return h
}

func (h *sqliteLocker) release() {
	h.once.Do(func() {
		_ = h.stdin.Close()
		_ = h.cmd.Wait()
	})
}

// TestWriteLockHeldElsewhereDoesNotDelayTheFence, over
// the real binary: a primary and its standby, three relays, the demo's
// timings (heartbeats every second, t1 2 s, t2 3 s, stale 3 s) and stop
// grace 2 s; the workload appends to a file shared by both nodes. Another
// process holds the primary's SQLite write lock while heartbeats keep
// arriving, and the primary is then cut off two of the three relays. Its
// machine must still judge quorum, evict and stop on time: its last line
// comes within stale + t1 + t2 (8 s, from the cut) plus a heartbeat and a
// tick, and the standby, which takes over by silence, never writes beside
// it. The fenced step itself cannot commit while the lock is held; its
// revocation waits, its stop does not. Before this was fixed the primary's
// loop spent each turn waiting for the lock and its workload ran until the
// lock was released.
func TestWriteLockHeldElsewhereDoesNotDelayTheFence(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	relays, urls := relaytest.StartN(t, 3)
	// The primary reaches relays 1 and 2 through proxies that the test cuts.
	proxies := []*cutproxy.Proxy{proxyTo(t, relays[1]), proxyTo(t, relays[2])}
	dial := dialVia(urls, map[int]*cutproxy.Proxy{1: proxies[0], 2: proxies[1]})
	dirA, dirB := filepath.Join(tmp, "primary"), filepath.Join(tmp, "standby")
	pubA := newKey(t, filepath.Join(dirA, "identity.key"))
	pubB := newKey(t, filepath.Join(dirB, "identity.key"))
	cfgA := fastConfig(t, tmp, dirA, "127.0.0.1:0", urls, 2)
	cfgB := fastConfig(t, tmp, dirB, "127.0.0.1:0", urls, 2, npubOf(t, pubA))
	appendTo(t, cfgA, "stop_grace = \"2s\"\n"+dial) // fastConfig ends in [backend]
	appendTo(t, cfgB, "stop_grace = \"2s\"\n")
	out := filepath.Join(sharedDir(t), "writes.txt") // both workloads' users append to it
	must(t, nil, "workloads", "grant", "--config", cfgA, "--id", "w1", "--command", appendLoop(out, "w1"),
		"--standby", npubOf(t, pubB), "--publish")

	a := startRun(t, "--config", cfgA)
	b := startRun(t, "--config", cfgB)
	waitPrimaryAndStandby(t, a, b, "w1", 60*time.Second)
	time.Sleep(3 * time.Second) // heartbeats listing w1 on every relay

	lock := holdWriteLock(t, filepath.Join(dirA, "provider-agent.db"))
	time.Sleep(2 * time.Second) // the lock is held while heartbeats arrive
	cut := time.Now()
	for _, p := range proxies {
		p.Cut()
	}
	// The standby takes over by silence (takeover_after 12 s after the
	// primary's last heartbeat on relays 1 and 2): wait for it, with the
	// lock still held, then release it.
	b.waitStatus(t, "w1 live at epoch 2 on the standby", 90*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "w1")
		return ok && w.State == "live" && w.Epoch == 2 && w.Running
	})
	time.Sleep(2 * time.Second)
	held := time.Since(lock.since)
	lock.release()

	ws := readWrites(t, out)
	lastA, firstB := lastWrite(ws, 1), firstWrite(ws, 2)
	stale, t1, t2 := 3*time.Second, 2*time.Second, 3*time.Second
	bound := stale + t1 + t2 + time.Second + agent.DefaultTickInterval
	t.Logf("primary's last write %v after the cut (bound %v); standby's first write %v after it; the write lock was held %v",
		lastA.Sub(cut).Round(time.Millisecond), bound, firstB.Sub(cut).Round(time.Millisecond), held.Round(time.Millisecond))
	if lastA.IsZero() || firstB.IsZero() {
		t.Fatalf("writes: primary last %v, standby first %v: want both", lastA, firstB)
	}
	if d := lastA.Sub(cut); d > bound {
		t.Errorf("the primary's workload wrote %v after the cut, want at most stale+t1+t2+heartbeat+tick = %v (its write lock was held elsewhere)", d.Round(time.Millisecond), bound)
	}
	if !lastA.Before(firstB) {
		t.Errorf("two writers: the primary wrote until %v, the standby from %v", lastA.Format(time.StampMilli), firstB.Format(time.StampMilli))
	}
}

// appendTo appends text to the file at path.
func appendTo(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestShutdownBehindAWriteLockPersists: SIGTERM while another process
// holds the database's write lock and the agent holds a step that could
// not commit (its workload exited under the lock). The final save waits
// for the lock (driver.Config.CloseWait), which is released 1.5 s later:
// the agent persists its steps and exits 0 instead of giving up after the
// 20 ms probe of held steps and exiting with "machine steps not persisted
// yet".
func TestShutdownBehindAWriteLockPersists(t *testing.T) {
	t.Parallel()
	p := newPair(t)
	flag := filepath.Join(sharedDir(t), "exit-now")
	must(t, nil, "workloads", "grant", "--config", p.cfgA, "--id", "w1",
		"--command", fmt.Sprintf("while [ ! -e %s ]; do sleep 0.1; done; exit 3", flag),
		"--standby", npubOf(t, p.pubB), "--publish")
	a := startRun(t, "--config", p.cfgA)
	a.waitStatus(t, "w1 running", 60*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "w1")
		return ok && w.Running
	})
	lock := holdWriteLock(t, filepath.Join(p.dirA, "provider-agent.db"))
	if err := os.WriteFile(flag, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for metricValue(t, a.metricsURL(), "agent_step_errors_total") == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no step failed to commit within 30 s of the workload's exit under the write lock")
		}
		time.Sleep(100 * time.Millisecond)
	}
	go func() {
		time.Sleep(1500 * time.Millisecond)
		lock.release()
	}()
	a.stop(t) // exit 0: the held steps were persisted on the way out
	if strings.Contains(a.stderr.String(), "not persisted yet") {
		t.Errorf("run's stderr says steps were not persisted:\n%s", a.stderr.String())
	}
}
