package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"provideragent/agent"
	"provideragent/backend/backendtest"
	"provideragent/config"
	"provideragent/internal/relaytest"
)

// sharedDir returns a directory every workload user may write (mode
// 1777), for the files a test's workloads write and the test reads: an
// isolated workload runs as a user of its own and cannot write into
// t.TempDir(), which is the test's alone.
func sharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "provider-agent-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// workloadDir returns a backend.workload_dir for a test's agent: one the
// workload users can reach (t.TempDir() is the test's alone), removed at
// cleanup, instead of the default under /var/lib.
func workloadDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "provider-agent-workloads-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// hostileConfig writes the config of a hostile-workload run: fastConfig's
// on one relay, with the [backend] section given (a binary older than
// backend.workload_dir, run to see the test fail on it, gets none).
func hostileConfig(t *testing.T, tmp, dataDir, relay, backendSection string) string {
	t.Helper()
	cfg := fastConfig(t, tmp, dataDir, "127.0.0.1:0", []string{relay}, 1)
	data, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	base, _, _ := strings.Cut(string(data), "\n[backend]\n")
	if err := os.WriteFile(cfg, []byte(base+"\n"+backendSection), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestRunHostileWorkloadReachesNothing is a hostile workload over
// the real binary, on both backends, with the agent's defaults (isolation
// on): a workload granted to the running agent tries to read its key file
// and database, write into its data dir and database, read another
// workload's checkpoint directory and log, read the agent's environment,
// reach the host's root through pid 1, and signal the agent and its own
// supervisor. Every attempt fails: with the process backend with EACCES
// (ESRCH for the agent, outside the workload's PID namespace; EPERM for
// its supervisor); in a container the agent's paths do not exist (ENOENT).
// The key file is unchanged, nothing was written into the data dir, the
// agent runs on and the other workload keeps its checkpoint. A binary
// without isolation (PROVIDER_AGENT_TEST_BIN) fails it: its
// workloads run as the agent's user and read the key file.
func TestRunHostileWorkloadReachesNothing(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("workloads run as other users only when the agent is root")
	}
	for _, kind := range []string{"process", "podman"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			tmp := t.TempDir()
			dir := filepath.Join(tmp, "data")
			newKey(t, filepath.Join(dir, "identity.key"))
			relay := relaytest.Start(t)
			var victimLine, section string
			allowed := map[string][]string{"": backendtest.EACCES, "signal-agent": backendtest.ESRCH, "signal-supervisor": backendtest.EPERM}
			wdir := workloadDir(t)
			if knowsSetting(t, "workload_dir") {
				section = fmt.Sprintf("[backend]\nworkload_dir = %q\n", wdir)
			}
			grantImage := func(args ...string) []string { return args }
			if kind == "podman" {
				image := backendtest.Busybox(t)
				section = fmt.Sprintf("[backend]\nkind = \"podman\"\nworkload_dir = %q\npodman_run_args = [%s]\n", wdir, quoteList(backendtest.RunArgs))
				allowed = map[string][]string{"": backendtest.ENOENT, "host-root-via-pid1": backendtest.EACCES,
					"signal-agent": backendtest.ESRCH, "signal-supervisor": backendtest.EPERM}
				grantImage = func(args ...string) []string { return append(args, "--image", image) }
			}
			// ${VAR:?}: an agent that sets no checkpoint directory (today's)
			// must not make the victim write at the root.
			victimLine = `echo "checkpoint $PROVIDER_AGENT_CHECKPOINT_DIR"; echo victim-secret > "${PROVIDER_AGENT_CHECKPOINT_DIR:?}/secret" && echo ready; exec sleep 1000`
			cfg := hostileConfig(t, tmp, dir, relay.URL(), section)
			keyBefore, err := os.ReadFile(filepath.Join(dir, "identity.key"))
			if err != nil {
				t.Fatal(err)
			}
			must(t, nil, grantImage("workloads", "grant", "--config", cfg, "--id", "victim", "--command", victimLine)...)
			r := startRun(t, "--config", cfg)
			r.waitStatus(t, "the victim running", 60*time.Second, func(st agent.Status) bool {
				w, ok := workloadIn(st, "victim")
				return ok && w.Running
			})
			victimLog := filepath.Join(dir, "logs", "victim.log")
			var ckpt string
			deadline := time.Now().Add(30 * time.Second)
			for ckpt == "" && time.Now().Before(deadline) {
				data, _ := os.ReadFile(victimLog)
				if strings.Contains(string(data), "\nready\n") {
					// The host's path of its checkpoint directory: under
					// the hash of the agent's log dir.
					sum := sha256.Sum256([]byte(filepath.Join(dir, "logs")))
					ckpt = filepath.Join(wdir, hex.EncodeToString(sum[:8]), "victim", "checkpoint", "1")
				}
				if strings.Contains(string(data), "PROVIDER_AGENT_CHECKPOINT_DIR: parameter not set") {
					ckpt = filepath.Join(wdir, "none") // an agent without checkpoint directories
				}
				time.Sleep(50 * time.Millisecond)
			}
			if ckpt == "" {
				data, _ := os.ReadFile(victimLog)
				t.Fatalf("the victim did not write its checkpoint within 30 s:\n%s", data)
			}
			line := backendtest.HostileScript(backendtest.Targets{DataDir: dir, Key: filepath.Join(dir, "identity.key"),
				DB: filepath.Join(dir, config.DBFileName), AgentPid: r.cmd.Process.Pid, VictimCheckpoint: ckpt, VictimLog: victimLog})
			must(t, nil, grantImage("workloads", "grant", "--config", cfg, "--id", "hostile", "--restart", "never", "--command", line)...)
			var out []byte
			deadline = time.Now().Add(60 * time.Second)
			for !strings.Contains(string(out), "=== provider-agent: hostile ended") {
				if time.Now().After(deadline) {
					t.Fatalf("the hostile workload did not end within 60 s:\n%s", out)
				}
				time.Sleep(50 * time.Millisecond)
				out, _ = os.ReadFile(filepath.Join(dir, "logs", "hostile.log"))
			}
			backendtest.CheckHostile(t, string(out), "", allowed)
			t.Logf("the hostile workload (%s backend):\n%s", kind, out)

			// Nothing of the agent changed: it runs, its key is the same,
			// nothing was written into its data dir or database.
			if _, err := r.fetchStatus(); err != nil {
				t.Errorf("the agent's /status after the hostile workload: %v", err)
			}
			if keyAfter, _ := os.ReadFile(filepath.Join(dir, "identity.key")); string(keyAfter) != string(keyBefore) {
				t.Errorf("the key file changed")
			}
			if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
				t.Errorf("the hostile workload wrote into the data dir")
			}
			if db, _ := os.ReadFile(filepath.Join(dir, config.DBFileName)); strings.Contains(string(db), "pwned") {
				t.Errorf("the hostile workload wrote into the database")
			}
			if data, err := os.ReadFile(filepath.Join(ckpt, "secret")); err != nil || string(data) != "victim-secret\n" {
				t.Errorf("the victim's checkpoint secret = %q, %v; want it as the victim wrote it", data, err)
			}
			r.stop(t)
		})
	}
}

// knowsSetting reports whether the binary under test has the backend
// setting key (its example config names it).
func knowsSetting(t *testing.T, key string) bool {
	t.Helper()
	return strings.Contains(must(t, nil, "run", "--print-example-config").stdout, "\n"+key+" = ")
}

// quoteList writes ss as the items of a TOML array.
func quoteList(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return strings.Join(out, ", ")
}
