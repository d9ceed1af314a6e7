package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"provideragent/agent"
	"provideragent/config"
	"provideragent/identity"
	"provideragent/internal/relaytest"
)

// runChild is `provider-agent run` in a child process.
type runChild struct {
	cmd    *exec.Cmd
	stdout *lockedBuffer
	stderr *lockedBuffer
	status string // its /status URL, from its first line
	done   chan error
	exited bool
}

// startRun starts `provider-agent run args...` and waits for its first
// line, which names its /status endpoint. The child is killed when the
// test ends if it still runs; its output is logged when the test failed.
func startRun(t *testing.T, args ...string) *runChild {
	t.Helper()
	return startRunWrapped(t, nil, args...)
}

// startRunWrapped is startRun with run's command prefixed by wrap (a
// netlab node's ip netns exec: run then lives in that namespace).
func startRunWrapped(t *testing.T, wrap []string, args ...string) *runChild {
	t.Helper()
	r := &runChild{stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	argv := append(append(slices.Clone(wrap), agentBinary(t), "run"), args...)
	r.cmd = exec.Command(argv[0], argv[1:]...)
	r.cmd.Env = runEnv()
	r.cmd.Stderr = r.stderr
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := followLines(out, func(line string) { r.stdout.Write([]byte(line + "\n")) }, func() { r.done <- r.cmd.Wait() })
	t.Cleanup(func() {
		if !r.exited {
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		if t.Failed() {
			t.Logf("run %v stdout:\n%s\nstderr:\n%s", args, r.stdout.String(), r.stderr.String())
		}
	})
	select {
	case line := <-first:
		m := statusURL.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("run's first line = %q, want %v", line, statusURL)
		}
		r.status = m[1]
	case err := <-r.done:
		r.exited = true
		t.Fatalf("run exited before starting: %v\nstderr: %s", err, r.stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("run printed nothing within 60 s")
	}
	return r
}

// stop sends SIGTERM and waits for run to exit 0.
func (r *runChild) stop(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.done:
		r.exited = true
		if err != nil {
			t.Fatalf("run after SIGTERM = %v, want exit 0\nstderr: %s", err, r.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("run did not exit within 60 s of SIGTERM")
	}
}

// kill ends run with SIGKILL (a crash: nothing is sent on the way out).
func (r *runChild) kill(t *testing.T) {
	t.Helper()
	_ = r.cmd.Process.Kill()
	<-r.done
	r.exited = true
}

// metricsURL is the child's /metrics URL.
func (r *runChild) metricsURL() string { return strings.TrimSuffix(r.status, "/status") + "/metrics" }

// fetchStatus reads the agent's /status.
func (r *runChild) fetchStatus() (agent.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.status, nil)
	if err != nil {
		return agent.Status{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return agent.Status{}, err
	}
	defer resp.Body.Close()
	var st agent.Status
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// waitStatus polls /status until cond holds (a bound on a hang, not a
// timing assertion) and returns the document that satisfied it.
func (r *runChild) waitStatus(t *testing.T, what string, limit time.Duration, cond func(agent.Status) bool) agent.Status {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last agent.Status
	var lastErr error
	for time.Now().Before(deadline) {
		st, err := r.fetchStatus()
		if err == nil && cond(st) {
			return st
		}
		last, lastErr = st, err
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := json.MarshalIndent(last, "", "  ")
	t.Fatalf("waiting %v for %s: last /status (err %v):\n%s", limit, what, lastErr, b)
	return agent.Status{}
}

// waitPrimaryAndStandby waits until workload id is live and running on
// primary, listed on quorum (its /status quorum_at set, so a revocation
// lets the standby claim at once), and watched (state standby) by standby;
// it returns the
// standby's /status document that showed it.
func waitPrimaryAndStandby(t *testing.T, primary, standby *runChild, id string, limit time.Duration) agent.Status {
	t.Helper()
	// quorum_at: a heartbeat listing it came back from M relays, so a
	// revocation from now on lets the standby claim at once.
	primary.waitStatus(t, id+" live and running on the primary, listed on quorum (quorum_at)", limit, func(st agent.Status) bool {
		w, ok := workloadIn(st, id)
		return ok && w.State == "live" && w.Running && !w.QuorumAt.IsZero()
	})
	return standby.waitStatus(t, id+" watched by the standby", limit, func(st agent.Status) bool {
		w, ok := workloadIn(st, id)
		return ok && w.State == "standby"
	})
}

// pair is a primary and a standby on three local relays of the test's,
// with fastConfig's settings (quorum 2; the standby trusts the primary as
// an issuer of grants), not started.
type pair struct {
	tmp, dirA, dirB, pubA, pubB, cfgA, cfgB string
	relays                                  []string
}

// newPair makes a pair's relays, keys and configs.
func newPair(t *testing.T) pair {
	t.Helper()
	var relays []string
	for range 3 {
		relays = append(relays, relaytest.Start(t).URL())
	}
	return newTimedPair(t, demoTimings, relays)
}

// newTimedPair is a pair on the given relays with the given lease timings.
func newTimedPair(t *testing.T, lt leaseTimings, relays []string) pair {
	t.Helper()
	p := pair{tmp: t.TempDir(), relays: relays}
	p.dirA, p.dirB = filepath.Join(p.tmp, "primary"), filepath.Join(p.tmp, "standby")
	p.pubA = newKey(t, filepath.Join(p.dirA, "identity.key"))
	p.pubB = newKey(t, filepath.Join(p.dirB, "identity.key"))
	p.cfgA = timedConfig(t, lt, p.tmp, p.dirA, "127.0.0.1:0", p.relays, 2)
	p.cfgB = timedConfig(t, lt, p.tmp, p.dirB, "127.0.0.1:0", p.relays, 2, npubOf(t, p.pubA))
	return p
}

// workloadIn returns workload id of st.
func workloadIn(st agent.Status, id string) (agent.WorkloadStatus, bool) {
	for _, w := range st.Workloads {
		if w.ID == id {
			return w, true
		}
	}
	return agent.WorkloadStatus{}, false
}

// fastConfig writes a config file with the demo's short lease timings
// (failover within about 15 s), the given relays and quorum, data dir and
// listen address, trusting issuers, and a workload dir of the test's; it
// returns its path. Its last section is [backend]: a caller may append
// settings of that section, or other sections.
func fastConfig(t *testing.T, dir, dataDir, listen string, relays []string, quorum int, issuers ...string) string {
	t.Helper()
	return timedConfig(t, demoTimings, dir, dataDir, listen, relays, quorum, issuers...)
}

// leaseTimings are the [lease] and [heartbeat] timings of a test config.
type leaseTimings struct {
	T1, T2, Stale, MaxSkew, RelayDelay, ProvisionTimeout, TakeoverAfter, Heartbeat time.Duration
}

// demoTimings are the demo's (lease.DemoConfig).
var demoTimings = leaseTimings{T1: 2 * time.Second, T2: 3 * time.Second, Stale: 3 * time.Second, MaxSkew: time.Second,
	RelayDelay: time.Second, ProvisionTimeout: 5 * time.Second, TakeoverAfter: 12 * time.Second, Heartbeat: time.Second}

// timedConfig is fastConfig with other lease timings.
func timedConfig(t *testing.T, lt leaseTimings, dir, dataDir, listen string, relays []string, quorum int, issuers ...string) string {
	t.Helper()
	q := func(ss []string) string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = fmt.Sprintf("%q", s)
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	body := fmt.Sprintf(`[agent]
data_dir = %q
listen = %q
trusted_issuers = %s
publish_timeout = "2s"

[lease]
relays = %s
quorum = %d
t1 = %q
t2 = %q
stale = %q
max_skew = %q
relay_delay = %q
provision_timeout = %q
takeover_after = %q
restart_backoff_initial = "500ms"
restart_backoff_max = "2s"
claim_retry_base = "1s"
claim_retry_max = "4s"
claim_timeout = "5s"

[heartbeat]
interval = %q

[courier]
backoff_initial = "200ms"
backoff_cap = "1s"

[backend]
workload_dir = %q
`, dataDir, listen, q(issuers), q(relays), quorum, lt.T1, lt.T2, lt.Stale, lt.MaxSkew, lt.RelayDelay, lt.ProvisionTimeout,
		lt.TakeoverAfter, lt.Heartbeat, workloadDir(t))
	path := filepath.Join(dir, filepath.Base(dataDir)+".toml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// newKey writes a key file at path (its directory created) and returns
// its hex public key.
func newKey(t testing.TB, path string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	pub, err := config.GenerateKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// npubOf encodes a hex public key as npub.
func npubOf(t *testing.T, hex string) string {
	t.Helper()
	n, err := identity.EncodeNpub(hex)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// followLines reads a child's output line by line until EOF, passing each
// line to each (when not nil) and calling atEOF (when not nil) after the
// last; the returned channel gets the first line.
func followLines(out io.Reader, each func(line string), atEOF func()) <-chan string {
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if each != nil {
				each(sc.Text())
			}
			select {
			case first <- sc.Text():
			default:
			}
		}
		if atEOF != nil {
			atEOF()
		}
	}()
	return first
}
