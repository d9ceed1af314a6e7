package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/backend"
	"provideragent/internal/relaytest"
	"provideragent/internal/sqlitedb"
	"provideragent/lease"
)

// childEnv names the JSON file that turns the test binary into a child
// agent (TestMain), so that tests can kill -9 a real agent process.
const childEnv = "AGENT_TEST_CHILD_CONFIG"

type childConfig struct {
	Key    string            `json:"key"`
	Relays []string          `json:"relays"`
	Dial   map[string]string `json:"dial"`
	DBPath string            `json:"db_path"`
	LogDir string            `json:"log_dir"`
	Spec   lease.Spec        `json:"spec"`
	// TakeoverAfter, when set, replaces the demo configuration's.
	TakeoverAfter time.Duration `json:"takeover_after"`
}

func TestMain(m *testing.M) {
	backend.RunShimIfRequested()
	if path := os.Getenv(childEnv); path != "" {
		if err := runChild(path); err != nil {
			fmt.Fprintln(os.Stderr, "child agent:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChild runs one agent and prints its timeline events as JSON lines.
func runChild(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cc childConfig
	if err := json.Unmarshal(b, &cc); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	db, err := sqlitedb.Open(ctx, cc.DBPath, sqlitedb.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	pcfg := backend.DefaultProcessConfig()
	pcfg.StopGrace = 2 * time.Second
	pcfg.LogDir = cc.LogDir
	proc, err := backend.NewProcess(pcfg, nil)
	if err != nil {
		return err
	}
	cfg := testAgentConfig(cc.Relays, cc.Key, "child")
	cfg.DialAddrs = cc.Dial
	if cc.TakeoverAfter > 0 {
		cfg.Lease.TakeoverAfter = cc.TakeoverAfter
	}
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	a, err := New(ctx, cfg, Deps{DB: db, Backend: proc, OnEvent: func(e Event) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(e)
	}})
	if err != nil {
		return err
	}
	a.Track(ctx, cc.Spec)
	err = a.Run(ctx)
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = proc.Close(cctx)
	return err
}

// childAgent is an agent running in a child process.
type childAgent struct {
	t   *testing.T
	cmd *exec.Cmd
	log *eventLog
	wg  sync.WaitGroup
}

func startChild(t *testing.T, cc childConfig) *childAgent {
	t.Helper()
	path := filepath.Join(t.TempDir(), "child.json")
	b, _ := json.Marshal(cc)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &childAgent{t: t, cmd: cmd, log: &eventLog{}}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.read(out)
	}()
	t.Cleanup(func() { c.kill() })
	return c
}

func (c *childAgent) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e Event
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			c.log.add(e)
		}
	}
}

// kill sends SIGKILL (a crash: nothing is flushed) and waits.
func (c *childAgent) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
	c.wg.Wait()
}

func (c *childAgent) waitEvent(limit time.Duration, what string, pred func(Event) bool) Event {
	c.t.Helper()
	var got Event
	waitFor(c.t, limit, what+fmt.Sprintf(" (child states %v)", c.log.states()), func() bool {
		e, ok := c.log.find(pred)
		got = e
		return ok
	})
	return got
}

func processAlive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// TestKill9MidFailoverNoSecondWriter: the primary (a child process) is cut
// off from every relay, evicts itself and queues its revocation, and is
// killed with SIGKILL before the revocation could leave. Its workload dies
// with it. Restarted with its relays back, it stays fenced (no second
// writer) and re-sends the persisted revocation, which promotes the
// standby: it ends Live at epoch 2.
//
// Both take over only after 2 minutes of silence, so the standby's
// promotion can come from nothing but the revocation (and the primary's
// retake of its own evicted epoch cannot come first), however slow the
// machine. The cut waits until a heartbeat listing w1 has come back from
// quorum: a revocation carries quorum_at_ms only then, and one without it
// cannot promote anyone (lease.RevocationDeadline; the takeover rule
// decides).
func TestKill9MidFailoverNoSecondWriter(t *testing.T) {
	t.Parallel()
	rs, urls := relaytest.StartN(t, 3)
	proxies, dial := cutProxies(t, rs, urls, 3)
	lcfg := lease.DemoConfig(urls)
	lcfg.TakeoverAfter = 2 * time.Minute
	standby := startAgent(t, agentOpts{name: "standby", lcfg: lcfg})
	primaryKey := nostr.GeneratePrivateKey()
	primaryPub, _ := nostr.GetPublicKey(primaryKey)
	dir := t.TempDir()
	// The workloads write their pid files as users of their own
	// (isolation): into a directory every user may write.
	pidDir, err := os.MkdirTemp("", "agent-pids-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pidDir) })
	if err := os.Chmod(pidDir, 0o1777); err != nil {
		t.Fatal(err)
	}
	spec := warmSpec("w1", primaryPub, standby.pub, urls)
	// The pid as /proc names it ($$ is a pid in the workload's namespace).
	spec.Command = []string{"sh", "-c", `read -r p _ </proc/self/stat; echo $p > "$0/pid-$PROVIDER_AGENT_EPOCH"; while :; do sleep 0.2; done`, pidDir}
	standby.a.Track(context.Background(), spec)
	cc := childConfig{Key: primaryKey, Relays: urls, Dial: dial, DBPath: filepath.Join(dir, "primary.db"), LogDir: filepath.Join(dir, "logs"), Spec: spec, TakeoverAfter: lcfg.TakeoverAfter}

	primary := startChild(t, cc)
	primary.waitEvent(20*time.Second, "primary live@1", func(e Event) bool { return e.Kind == "state" && e.State == "live" && e.Epoch == 1 })
	var pid int
	waitFor(t, 5*time.Second, "workload pid file", func() bool {
		b, err := os.ReadFile(filepath.Join(pidDir, "pid-1"))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	waitListedOnQuorum(t, "primary", primary.log, "w1", lcfg, 10*time.Second)

	for _, p := range proxies {
		p.Cut()
	}
	primary.waitEvent(20*time.Second, "revocation queued", func(e Event) bool {
		return e.Kind == "revocation" && strings.Contains(e.Detail, "queued")
	})
	primary.kill()
	waitFor(t, 5*time.Second, "workload process gone with its agent", func() bool { return !processAlive(pid) })
	if got := standby.log.states(); strings.Join(got, ",") != "standby@1" {
		t.Fatalf("standby transitions before the restart = %v, want [standby@1]", got)
	}

	for _, p := range proxies {
		if err := p.Restore(); err != nil {
			t.Fatal(err)
		}
	}
	restarted := startChild(t, cc)
	defer func() {
		if t.Failed() {
			restarted.log.dump(t, "restarted")
			standby.log.dump(t, "standby")
		}
	}()
	// The persisted revocation leaves again after the restart (the receipt a
	// killed flush had claimed is due after the courier's claim timeout) and
	// promotes the standby, long before either's takeover by silence.
	standby.waitState("w1", lease.StateLive, 2, 40*time.Second)
	if _, ok := standby.log.find(func(e Event) bool {
		return e.Kind == "received" && strings.Contains(e.Detail, "revocation of epoch 1")
	}); !ok {
		t.Fatalf("standby Live@2 without having received the revocation of epoch 1")
	}
	restarted.waitEvent(20*time.Second, "revocation re-sent and acknowledged by quorum", func(e Event) bool {
		return e.Kind == "revocation" && strings.Contains(e.Detail, "delivered")
	})
	restarted.waitEvent(10*time.Second, "restarted primary fenced", func(e Event) bool { return e.Kind == "state" && e.State == "fenced" })
	if e, ok := restarted.log.find(func(e Event) bool {
		return e.Kind == "start" || (e.Kind == "state" && (e.State == "live" || e.State == "provisioning" || e.State == "syncing"))
	}); ok {
		t.Fatalf("restarted primary event %+v: want no start and no holding state", e)
	}
	if !standby.backend.Running("w1") {
		t.Fatalf("standby Running(w1) = false, want true at epoch 2")
	}
	if _, err := os.Stat(filepath.Join(pidDir, "pid-1")); err != nil {
		t.Fatalf("pid file of epoch 1: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(pidDir, "pid-1"))
	if p2, _ := strconv.Atoi(strings.TrimSpace(string(b))); p2 != pid {
		t.Fatalf("epoch 1 started again after the restart (pid %d, was %d)", p2, pid)
	}
}

// TestCutOffPrimaryTakeover: the primary loses every relay and can publish
// nothing; the standby takes over after takeover_after, and when the
// primary's relays come back it stays fenced.
func TestCutOffPrimaryTakeover(t *testing.T) {
	t.Parallel()
	rs, urls := relaytest.StartN(t, 3)
	proxies, dial := cutProxies(t, rs, urls, 3)
	lcfg := lease.DemoConfig(urls)
	primary, standby := startPair(t, lcfg, dial)
	cut := time.Now()
	for _, p := range proxies {
		p.Cut()
	}
	bound := lcfg.Stale + lcfg.TakeoverAfter + lcfg.RelayDelay + 5*time.Second
	standby.waitState("w1", lease.StateLive, 2, bound+10*time.Second)
	t.Logf("takeover took %v (bound %v)", time.Since(cut), bound)
	stop, ok := primary.log.find(func(e Event) bool { return e.Kind == "stop" })
	start, _ := standby.log.find(func(e Event) bool { return e.Kind == "start" && strings.Contains(e.Detail, "epoch 2") })
	if !ok || !stop.Time.Before(start.Time) {
		t.Fatalf("primary stop %v (found %v), standby start %v: want the stop first", stop.Time, ok, start.Time)
	}
	for _, p := range proxies {
		if err := p.Restore(); err != nil {
			t.Fatal(err)
		}
	}
	primary.waitState("w1", lease.StateFenced, 1, 15*time.Second)
	if primary.backend.Running("w1") {
		t.Fatalf("primary Running(w1) = true after the takeover, want false")
	}
}
