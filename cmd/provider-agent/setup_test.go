package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/agent"
	"provideragent/internal/relaytest"
)

// The setup papercuts a new operator meets, each in a child process of the
// real binary.

// TestKeygenCreatesTheDirectory: the README's first command works on a
// fresh checkout: keygen creates the key's directory, mode 0700.
func TestKeygenCreatesTheDirectory(t *testing.T) {
	t.Parallel()
	// Two missing levels, as /var/lib/provider-agent/data on a fresh host:
	// the parent must stay searchable for the workload dir beside it.
	parent := filepath.Join(t.TempDir(), "provider-agent")
	dir := filepath.Join(parent, "data")
	key := filepath.Join(dir, "identity.key")
	r := must(t, nil, "keygen", "--out", key)
	if !strings.Contains(r.stdout, "npub1") {
		t.Errorf("keygen stdout = %q, want the npub", r.stdout)
	}
	for path, want := range map[string]os.FileMode{parent: 0o755, dir: 0o700, key: 0o600} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatalf("after keygen: %v", err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("mode of %s = %04o, want %04o", path, got, want)
		}
	}
}

// TestRunWithoutKeySaysKeygen: run on a data dir without a key file says
// how to make one.
func TestRunWithoutKeySaysKeygen(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	r := cli(t, nil, "run", "--data-dir", dir, "--relay", "ws://127.0.0.1:1", "--quorum", "1", "--listen", "127.0.0.1:0")
	want := "provider-agent keygen --out " + filepath.Join(dir, "identity.key")
	if r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("run without a key = exit %d, stderr %q, want exit 1 saying %q", r.code, r.stderr, want)
	}
}

// TestGrantWithStandbyWithoutPublishWarns: a grant naming standbys that is
// not published never reaches them: grant says so, names the issuer key the
// standbys must trust, and still queues the grant (creating the database).
func TestGrantWithStandbyWithoutPublishWarns(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	self := newKey(t, filepath.Join(dir, "identity.key"))
	standby, _ := nostr.GetPublicKey(nostr.GeneratePrivateKey())
	lease := []string{"--relay", "ws://127.0.0.1:1", "--quorum", "1"}
	r := must(t, nil, append([]string{"workloads", "grant", "--data-dir", dir, "--id", "web-1", "--command", "sleep 100", "--standby", standby}, lease...)...)
	for _, want := range []string{"warning", "--publish", "agent.trusted_issuers", npubOf(t, self)} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("grant --standby without --publish: stderr %q lacks %q", r.stderr, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "provider-agent.db")); err != nil {
		t.Errorf("grant did not create the database: %v", err)
	}
	// Without standbys there is nothing to warn about.
	r = must(t, nil, append([]string{"workloads", "grant", "--data-dir", dir, "--id", "solo", "--command", "sleep 100"}, lease...)...)
	if strings.Contains(r.stderr, "warning") {
		t.Errorf("grant without standbys: stderr %q, want no warning", r.stderr)
	}
}

// TestFlagsAfterPositionalArguments: one parser for every subcommand:
// flags may follow the positional arguments.
func TestFlagsAfterPositionalArguments(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	cfg := filepath.Join(t.TempDir(), "agent.toml")
	if err := os.WriteFile(cfg, []byte("[agent]\ndata_dir = \""+dir+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	primary, _ := nostr.GetPublicKey(nostr.GeneratePrivateKey())
	must(t, nil, "workloads", "grant", "--config", cfg, "--id", "w1", "--primary", primary, "--command", "sleep 100")
	bundle := filepath.Join(t.TempDir(), "bundle")
	if err := os.WriteFile(bundle, []byte("order 7"), 0o600); err != nil {
		t.Fatal(err)
	}
	sent := must(t, nil, "courier", "send", bundle, "--sender", "ops", "--destination", "http", "--config", cfg)
	id := strings.Fields(sent.stdout)[0]
	// The grant is queued, not applied (no agent runs): show parses its
	// arguments and says so.
	for _, args := range [][]string{
		{"workloads", "show", "w1", "--config", cfg},
		{"workloads", "--config", cfg, "show", "w1"},
	} {
		if r := cli(t, nil, args...); r.code != 1 || !strings.Contains(r.stderr, "a grant of it is queued") {
			t.Errorf("provider-agent %s = exit %d %q, want exit 1 saying the grant is queued", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	for _, args := range [][]string{
		{"workloads", "list", "--config", cfg},
		{"workloads", "release", "w1", "--config", cfg},
		{"courier", "show", id, "--config", cfg},
		{"courier", "resend", id, "--config", cfg},
		{"courier", "list", "--state", "pending", "--config", cfg},
		{"tiles", "list", "--config", cfg},
		{"status", "--config", cfg, "--url", "http://127.0.0.1:1/status"},
	} {
		if r := cli(t, nil, args...); r.code != 0 {
			t.Errorf("provider-agent %s = exit %d %q, want 0", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	// "--" ends the flags: what follows is positional.
	if r := cli(t, nil, "workloads", "show", "--config", cfg, "--", "--json"); r.code != 1 || !strings.Contains(r.stderr, `no workload "--json"`) {
		t.Errorf("workloads show -- --json = exit %d %q, want exit 1 naming workload --json", r.code, r.stderr)
	}
	if r := cli(t, nil, "workloads", "show", "w1", "w2", "--config", cfg); r.code != 2 || !strings.Contains(r.stderr, "want one workload ID") {
		t.Errorf("workloads show w1 w2 = exit %d %q, want a usage error", r.code, r.stderr)
	}
}

// TestRunChecksTheListenPortFirst: with the status port taken, run fails
// at once naming it, before it creates the data dir (or dials a relay).
func TestRunChecksTheListenPortFirst(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The "relay" counts the connections made to it.
	relayLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var dials atomic.Int32
	go func() {
		for {
			c, err := relayLn.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			c.Close()
		}
	}()
	defer relayLn.Close()
	dir := filepath.Join(t.TempDir(), "data")
	newKey(t, filepath.Join(t.TempDir(), "identity.key"))
	r := cli(t, nil, "run", "--data-dir", dir, "--relay", "ws://"+relayLn.Addr().String(), "--quorum", "1", "--listen", ln.Addr().String())
	if r.code != 1 || !strings.Contains(r.stderr, ln.Addr().String()) || !strings.Contains(r.stderr, "address already in use") {
		t.Errorf("run on a taken port = exit %d %q, want exit 1 naming %s in use", r.code, r.stderr, ln.Addr())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("run on a taken port created the data dir (stat: %v), want nothing created", err)
	}
	if n := dials.Load(); n != 0 {
		t.Errorf("run on a taken port made %d relay connections, want 0", n)
	}
}

// TestRunWarnsOnANonLoopbackListen: a non-loopback --listen is allowed
// with a WARN that /status and /metrics are unauthenticated; loopback is
// quiet.
func TestRunWarnsOnANonLoopbackListen(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		listen string
		warn   bool
	}{
		{"0.0.0.0:0", true},
		{":0", true},
		{"127.0.0.1:0", false},
		{"localhost:0", false},
	} {
		// No key: run stops right after the listener, which is enough.
		dir := filepath.Join(t.TempDir(), "data")
		r := cli(t, nil, "run", "--data-dir", dir, "--relay", "ws://127.0.0.1:1", "--quorum", "1", "--listen", tt.listen)
		warned := strings.Contains(r.stderr, "level=WARN") && strings.Contains(r.stderr, "without authentication")
		if r.code != 1 || warned != tt.warn {
			t.Errorf("run --listen %s = exit %d, warned %v, want exit 1 (no key), warned %v\nstderr: %s", tt.listen, r.code, warned, tt.warn, r.stderr)
		}
	}
}

// TestTilesUploadToAnUnreachableServerIsAnError: no "outcome: partial"
// when no server can be reached: an error naming the cause, exit 1.
func TestTilesUploadToAnUnreachableServerIsAnError(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	newKey(t, filepath.Join(dir, "identity.key"))
	file := filepath.Join(t.TempDir(), "ckpt.bin")
	if err := os.WriteFile(file, []byte(strings.Repeat("checkpoint ", 500)), 0o600); err != nil {
		t.Fatal(err)
	}
	must(t, nil, "tiles", "add", file, "--workload", "w1", "--data-dir", dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	r := cli(t, nil, "tiles", "upload", "--server", closed, "--data-dir", dir)
	if r.code != 1 || strings.Contains(r.stdout, "outcome:") || !strings.Contains(r.stderr, "unreachable") {
		t.Errorf("tiles upload to %s = exit %d, stdout %q, stderr %q; want exit 1, no outcome, an error naming the unreachable server", closed, r.code, r.stdout, r.stderr)
	}
	if l := must(t, nil, "tiles", "list", "--status", "pending", "--data-dir", dir); !strings.Contains(l.stdout, "w1") {
		t.Errorf("tiles list after the failed upload = %q, want the tiles still pending", l.stdout)
	}
}

// TestMissingCommandShowsItsReason: a workload whose command does not
// exist fails, and status (live and from the database) and workloads show
// say why: the shell's exit 127 and its last words.
func TestMissingCommandShowsItsReason(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "data")
	newKey(t, filepath.Join(dir, "identity.key"))
	relay := relaytest.Start(t)
	cfg := fastConfig(t, tmp, dir, "127.0.0.1:0", []string{relay.URL()}, 1)
	must(t, nil, "workloads", "grant", "--config", cfg, "--id", "broken", "--command", "no-such-tool-4711 --serve", "--restart", "never")
	a := startRun(t, "--config", cfg)
	st := a.waitStatus(t, "workload broken failed", 60*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "broken")
		return ok && w.State == "failed"
	})
	w, _ := workloadIn(st, "broken")
	for _, want := range []string{"exit 127", "command not found", "no-such-tool-4711"} {
		if !strings.Contains(w.Reason, want) {
			t.Errorf("/status reason of the failed workload = %q, want it to contain %q", w.Reason, want)
		}
	}
	live := must(t, nil, "status", "--config", cfg, "--url", a.status)
	if !strings.Contains(live.stdout, "source: agent") || !strings.Contains(live.stdout, "broken: failed: exit 127 (command not found)") {
		t.Errorf("status (live) = %q, want the reason line", live.stdout)
	}
	// The build, as 'provider-agent version' prints it, on /status, in
	// status and in the start log.
	version := strings.TrimPrefix(strings.TrimSpace(must(t, nil, "version").stdout), "provider-agent ")
	if st.Version != version || !strings.Contains(live.stdout, "version "+version) {
		t.Errorf("/status version = %q, status = %q; want %q", st.Version, live.stdout, version)
	}
	if !strings.Contains(a.stderr.String(), `msg="provider-agent starting" version=`) {
		t.Errorf("run's log has no start line with the version:\n%s", a.stderr.String())
	}
	a.stop(t)
	db := must(t, nil, "status", "--config", cfg)
	if !strings.Contains(db.stdout, "broken: failed: exit 127 (command not found)") || !strings.Contains(db.stdout, "no-such-tool-4711") {
		t.Errorf("status (database) = %q, want the reason line", db.stdout)
	}
	show := must(t, nil, "workloads", "show", "broken", "--config", cfg)
	var got struct {
		State  string `json:"state"`
		Reason string `json:"reason"`
		Log    string `json:"log"`
	}
	if err := json.Unmarshal([]byte(show.stdout), &got); err != nil {
		t.Fatalf("workloads show = %q: %v", show.stdout, err)
	}
	if got.State != "failed" || !strings.Contains(got.Reason, "command not found") || !strings.Contains(got.Reason, "no-such-tool-4711") {
		t.Errorf("workloads show = state %q reason %q, want failed with the reason", got.State, got.Reason)
	}
	if _, err := os.Stat(got.Log); err != nil {
		t.Errorf("workloads show log = %q: %v, want the workload's log file", got.Log, err)
	}
}

// TestReadOnlyDataDirReportsTheCause: a data dir that was used and is now
// read-only (remounted, chmod, another owner) makes run, and the operator
// commands, name the cause: the data dir is not writable. Root ignores
// permissions, so as root
// the commands run as nobody (uid 65534) on a data dir it owns.
func TestReadOnlyDataDirReportsTheCause(t *testing.T) {
	t.Parallel()
	base, err := os.MkdirTemp("", "provider-agent-ro-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = filepath.Walk(base, func(p string, _ os.FileInfo, _ error) error { return os.Chmod(p, 0o700) })
		os.RemoveAll(base)
	})
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "data")
	newKey(t, filepath.Join(dir, "identity.key"))
	primary, _ := nostr.GetPublicKey(nostr.GeneratePrivateKey())
	must(t, nil, "workloads", "grant", "--data-dir", dir, "--id", "w1", "--primary", primary, "--command", "sleep 100", "--relay", "ws://127.0.0.1:1", "--quorum", "1")
	// What an earlier run leaves: the lock file and the log dir.
	if err := os.WriteFile(filepath.Join(dir, lockFileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
		err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, 65534, 65534)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	as := func(args ...string) cliResult {
		t.Helper()
		cmd := exec.Command(agentBinary(t), args...)
		cmd.Env = append(runEnv(), "HOME="+base)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		res := cliResult{stdout: out.String(), stderr: errb.String()}
		if ee, ok := err.(*exec.ExitError); ok {
			res.code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("run %v: %v", args, err)
		}
		return res
	}
	// SQLite opens a WAL database only where it can create the -shm file:
	// every command that opens the database says that the data dir is the
	// problem, not "no such file" or SQLite's "readonly database" alone.
	for _, args := range [][]string{
		{"run", "--data-dir", dir, "--relay", "ws://127.0.0.1:1", "--quorum", "1", "--listen", ""},
		{"workloads", "grant", "--data-dir", dir, "--id", "w2", "--primary", primary, "--command", "sleep 100", "--relay", "ws://127.0.0.1:1", "--quorum", "1"},
		{"status", "--data-dir", dir, "--url", "http://127.0.0.1:1/status"},
		{"courier", "list", "--data-dir", dir},
	} {
		r := as(args...)
		want := "data dir " + dir + " is not writable (permission denied)"
		if r.code != 1 || !strings.Contains(r.stderr, want) || strings.Contains(r.stderr, "no such file") {
			t.Errorf("%s on a read-only data dir = exit %d %q, want exit 1 saying %q", args[0], r.code, r.stderr, want)
		}
	}
}

// TestStatusAfterFailover: a primary and a standby, the grant published by
// the primary and trusted by the standby (as the README says to set it
// up). The primary sees its standby alive. The primary is killed; the standby takes over. Its status shows it
// as the holder, the former primary as its standby, none of them alive.
// The former primary is started again: it is fenced by epoch 2 and rejoins
// as the new holder's standby, and the holder's status
// says it has a standby again; the test logs how long after the failover.
func TestStatusAfterFailover(t *testing.T) {
	t.Parallel()
	p := newPair(t)
	pubA, pubB, cfgA, cfgB := p.pubA, p.pubB, p.cfgA, p.cfgB
	must(t, nil, "workloads", "grant", "--config", cfgA, "--id", "web-1", "--command", "sleep 1000",
		"--standby", npubOf(t, pubB), "--publish")

	a := startRun(t, "--config", cfgA)
	b := startRun(t, "--config", cfgB)
	before := waitPrimaryAndStandby(t, a, b, "web-1", 90*time.Second)
	if w, _ := workloadIn(before, "web-1"); w.Primary != pubA || len(w.Standbys) != 1 || w.Standbys[0] != pubB || w.NoStandby {
		t.Errorf("standby's /status before the failover = holder %s standbys %v no_standby %v, want holder %s standbys [%s]",
			w.Primary, w.Standbys, w.NoStandby, pubA, pubB)
	}

	// The primary sees its standby alive within a few heartbeats of the
	// standby's start (no state change of the workload marks the moment).
	a.waitStatus(t, "the primary sees its standby alive", 10*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "web-1")
		return ok && w.State == "live" && !w.NoStandby
	})
	waitMetricLine(t, strings.TrimSuffix(a.status, "/status")+"/metrics", "agent_workloads_without_standby 0")

	a.kill(t)
	after := b.waitStatus(t, "web-1 live on the standby, its former primary not alive", 120*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "web-1")
		return ok && w.State == "live" && w.Primary == pubB && w.NoStandby
	})
	failover := time.Now()
	// The real binary's /status shows each relay's silence evidence: the
	// standby took over by silence counted on N-M+1 of them (2 of 3).
	shown := 0
	for _, r := range after.Relays {
		if !r.WatchedSince.IsZero() && r.SilenceShownUntil.After(r.WatchedSince) {
			shown++
		}
	}
	if shown < len(after.Relays)-1 {
		t.Errorf("/status after the takeover: %d of %d relays show a watched stream with silence shown, want at least %d: %+v", shown, len(after.Relays), len(after.Relays)-1, after.Relays)
	}
	w, _ := workloadIn(after, "web-1")
	if len(w.Standbys) != 1 || w.Standbys[0] != pubA || w.Role != "primary" || w.Epoch != 2 {
		t.Errorf("/status after the failover = standbys %v role %s epoch %d, want [former primary], primary, epoch 2",
			w.Standbys, w.Role, w.Epoch)
	}
	st := must(t, nil, "status", "--config", cfgB, "--url", b.status)
	for _, want := range []string{"source: agent", "(none alive)", "web-1: no standby alive", "SILENCE COUNTS"} {
		if !strings.Contains(st.stdout, want) {
			t.Errorf("status after the failover = %q, want it to contain %q", st.stdout, want)
		}
	}
	// The alert rules' metrics (deploy/prometheus/alerts.yml) say the same,
	// and again once the former primary stands by.
	metricsB := strings.TrimSuffix(b.status, "/status") + "/metrics"
	waitMetricLine(t, metricsB, "agent_workloads_without_standby 1")
	waitMetricLine(t, metricsB, "agent_own_quorum 1")
	if strings.Contains(st.stdout, shortKey(pubB)+"  "+shortKey(pubB)) {
		t.Errorf("status after the failover shows the holder as its own standby: %q", st.stdout)
	}

	// The former primary comes back: it rejoins as a standby.
	a = startRun(t, "--config", cfgA)
	a.waitStatus(t, "web-1 a standby of epoch 2 on the former primary", 90*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "web-1")
		return ok && w.State == "standby" && w.Epoch == 2 && w.Primary == pubB && !w.Running
	})
	b.waitStatus(t, "the holder sees a standby again", 60*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "web-1")
		return ok && w.State == "live" && !w.NoStandby
	})
	t.Logf("the holder had a standby again %v after the failover (the former primary restarted at once)", time.Since(failover).Round(time.Millisecond))
	waitMetricLine(t, metricsB, "agent_workloads_without_standby 0")
	b.stop(t)
	list := must(t, nil, "workloads", "list", "--config", cfgB)
	if !strings.Contains(list.stdout, shortKey(pubA)) {
		t.Errorf("workloads list after the failover = %q, want the former primary as standby", list.stdout)
	}
}
