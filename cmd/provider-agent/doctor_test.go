package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"provideragent/backend"
	"provideragent/backend/backendtest"
	"provideragent/config"
	"provideragent/internal/devblossom"
	"provideragent/internal/relaytest"
)

// doctorReport is doctor's --json output.
type doctorReport struct {
	OK     bool          `json:"ok"`
	Checks []checkResult `json:"checks"`
}

// find returns the check named check (and target, when not "").
func (r doctorReport) find(t *testing.T, check, target string) checkResult {
	t.Helper()
	for _, c := range r.Checks {
		if c.Check == check && (target == "" || c.Target == target) {
			return c
		}
	}
	t.Fatalf("no %s check for %q in %+v", check, target, r.Checks)
	return checkResult{}
}

// doctorJSON runs doctor --json in-process with environ as its environment
// and now as its clock.
func doctorJSON(t *testing.T, environ []string, now func() time.Time, args ...string) (doctorReport, error) {
	t.Helper()
	var out bytes.Buffer
	err := runDoctor(context.Background(), append(args, "--json"), &out, doctorEnv{now: now, environ: environ})
	var rep doctorReport
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
		t.Fatalf("doctor --json printed %q: %v (err %v)", out.String(), jerr, err)
	}
	return rep, err
}

// closedPort is a ws:// URL on which nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "ws://" + addr
}

// TestDoctor runs doctor against two good local relays (the passing
// baseline), then once per failing check with one thing wrong: the config,
// the key file, the data dir, a relay that refuses our events, one with
// tiny NIP-11 limits, one unreachable, the clock, the containment, the
// isolation (turned off; a workload dir workload users cannot reach), a
// Blossom server and the disk. Each failure must fail its own check (and
// exit non-zero) and name the fix or the cause.
func TestDoctor(t *testing.T) {
	good1, good2 := relaytest.Start(t).URL(), relaytest.Start(t).URL()
	refusing := relaytest.Start(t, "--reject-writes", "--reject-reason", "blocked: not on the allow list").URL()
	tiny := relaytest.Start(t, "--max-message-length", "1024", "--max-content-length", "256").URL()
	unreachable := closedPort(t)
	blossom, err := devblossom.New(devblossom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := blossom.Start(context.Background(), "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blossom.Shutdown(context.Background()) })

	// A host that cannot contain workloads (no root, no user namespaces,
	// no cgroup to write) fails the containment check whatever else holds.
	uncontained := false
	if c, err := probeContainment(backend.ContainAuto); err != nil || c.Warning != "" {
		uncontained = true
		t.Logf("this host cannot contain workloads (%v %s): the containment check is expected to fail", err, c.Warning)
	}
	// One that cannot isolate them (not root) fails the isolation check.
	unisolated := !canIsolateHere(t)
	hostFails := func(c checkResult) bool {
		return (uncontained && c.Check == "containment") || (unisolated && c.Check == "isolation")
	}
	expected := func(c checkResult, check, target string) bool {
		return (c.Check == check && (target == "" || c.Target == target)) || hostFails(c)
	}

	tmp := t.TempDir()
	data := filepath.Join(tmp, "data")
	newKey(t, filepath.Join(data, "identity.key"))
	base := []string{"--data-dir", data, "--relay", good1, "--relay", good2, "--quorum", "2",
		"--timeout", "5s", "--workloads", "100", "--min-free-mib", "1"}

	t.Run("all pass", func(t *testing.T) {
		rep, err := doctorJSON(t, []string{"PROVIDER_AGENT_UPLOADER_SERVERS=" + blossom.URL()}, time.Now, base...)
		if (err != nil || !rep.OK) && !uncontained && !unisolated {
			t.Fatalf("doctor = %v, ok %v, want nil, true: %+v", err, rep.OK, rep.Checks)
		}
		for _, c := range rep.Checks {
			if c.Status != checkOK && !hostFails(c) && (c.Check != "podman" || c.Status != checkSkip) {
				t.Errorf("%s %s = %s (%s), want ok", c.Check, c.Target, c.Status, c.Detail)
			}
		}
		if c := rep.find(t, "relay", good1); !strings.Contains(c.Detail, "a beat of 100 workloads: 2 events") {
			t.Errorf("relay detail = %q, want the beat's size", c.Detail)
		}
	})

	type tcase struct {
		name    string
		environ []string
		now     func() time.Time
		extra   []string // appended to base
		prepare func(t *testing.T) (args []string)
		check   string
		target  string
		want    string // in the failed check's detail
		root    bool   // only where workloads can be isolated (as root)
	}
	cases := []tcase{
		{name: "config", extra: []string{"--quorum", "3"}, check: "config", want: "lease.quorum = 3"},
		{name: "key file missing", prepare: func(t *testing.T) []string {
			return []string{"--key-file", filepath.Join(tmp, "none.key")}
		}, check: "key file", want: "provider-agent keygen --out"},
		{name: "key file mode", prepare: func(t *testing.T) []string {
			key := filepath.Join(tmp, "open.key")
			newKey(t, key)
			if err := os.Chmod(key, 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{"--key-file", key}
		}, check: "key file", want: "chmod 600"},
		{name: "data dir mode", prepare: func(t *testing.T) []string {
			dir := filepath.Join(tmp, "open")
			newKey(t, filepath.Join(dir, "identity.key"))
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			return []string{"--data-dir", dir}
		}, check: "data dir", want: "chmod 700"},
		{name: "relay refuses", extra: []string{"--relay", refusing},
			check: "relay", target: refusing, want: "test event rejected: blocked: not on the allow list"},
		{name: "relay tiny limits", extra: []string{"--relay", tiny},
			check: "relay", target: tiny, want: "do not fit its limits"},
		{name: "relay unreachable", extra: []string{"--relay", unreachable},
			check: "relay", target: unreachable, want: "connection refused"},
		{name: "clock", now: func() time.Time { return time.Now().Add(-time.Hour) },
			check: "clock", want: "local clock 1h0m0s behind the relays"},
		{name: "containment", environ: []string{"PROVIDER_AGENT_BACKEND_CONTAINMENT=none"},
			check: "containment", want: "containment is off"},
		{name: "isolation none", environ: []string{"PROVIDER_AGENT_BACKEND_ISOLATION=none"},
			check: "isolation", want: "isolation is off (backend.isolation = none)"},
		{name: "isolation workload dir unreachable", environ: []string{"PROVIDER_AGENT_BACKEND_WORKLOAD_DIR=" + filepath.Join(tmp, "workloads")},
			check: "isolation", want: "workload users could not reach their directories", root: true},
		{name: "blossom", environ: []string{"PROVIDER_AGENT_UPLOADER_SERVERS=" + strings.Replace(closedPort(t), "ws:", "http:", 1)},
			check: "blossom", want: "unreachable"},
		{name: "disk", extra: []string{"--min-free-mib", "1000000000000"}, check: "disk", want: "below --min-free-mib"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && unisolated {
				t.Skip("the workload dir is checked only where workloads can be isolated")
			}
			args := append(append([]string(nil), base...), tc.extra...)
			if tc.prepare != nil {
				args = append(args, tc.prepare(t)...)
			}
			now := tc.now
			if now == nil {
				now = time.Now
			}
			rep, err := doctorJSON(t, tc.environ, now, args...)
			if err == nil || rep.OK {
				t.Errorf("doctor = %v, ok %v, want a failure", err, rep.OK)
			}
			c := rep.find(t, tc.check, tc.target)
			t.Log(c.line())
			if c.Status != checkFail || !strings.Contains(c.Detail, tc.want) {
				t.Errorf("%s %s = %s %q, want fail naming %q", c.Check, c.Target, c.Status, c.Detail, tc.want)
			}
			for _, o := range rep.Checks {
				if o.Status == checkFail && !expected(o, tc.check, tc.target) {
					t.Errorf("%s %s failed too: %s", o.Check, o.Target, o.Detail)
				}
			}
		})
	}
}

// canIsolateHere reports whether this process can run workloads as
// other users (root), as doctor's isolation check finds it.
func canIsolateHere(t *testing.T) bool {
	t.Helper()
	iso, err := backend.ProbeIsolation(backend.ProcessConfig{StopGrace: time.Second, WorkloadDir: os.TempDir()})
	if err != nil {
		t.Fatalf("ProbeIsolation: %v", err)
	}
	if !iso.Active {
		t.Logf("this host cannot isolate workloads (%s): the isolation check is expected to fail", iso.Warning)
	}
	return iso.Active
}

// TestDoctorIsolation: the isolation check names the users workloads
// would run as: a uid of their own from the range (the default), or the
// one backend.workload_user; and, run by a user that is not root (the
// real binary as uid 65534 here), that no workload can start and how to
// fix it.
func TestDoctorIsolation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: workloads run as other users only when the agent is root")
	}
	t.Parallel()
	relay := closedPort(t)
	base := []string{"--data-dir", filepath.Join(t.TempDir(), "data"), "--relay", relay, "--quorum", "1", "--timeout", "1s"}
	for _, tc := range []struct {
		name    string
		environ []string
		want    string
	}{
		{"a uid per workload", nil, "workloads run as uids 1900000000-1900065535, one per workload, directories under " +
			config.DefaultIsolatedWorkloadDir + "/"},
		{"workload_user", []string{"PROVIDER_AGENT_BACKEND_WORKLOAD_USER=65534", "PROVIDER_AGENT_BACKEND_WORKLOAD_UIDS=1900000000-1900000009"},
			"workloads run as user nobody (uid 65534), shared by every workload"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, _ := doctorJSON(t, tc.environ, time.Now, base...)
			c := rep.find(t, "isolation", "")
			t.Log(c.line())
			if c.Status != checkOK || !strings.HasPrefix(c.Detail, tc.want) {
				t.Errorf("isolation = %s %q, want ok %q", c.Status, c.Detail, tc.want)
			}
		})
	}

	t.Run("not root", func(t *testing.T) {
		cmd := exec.Command(agentBinary(t), append(append([]string{"doctor"}, base...), "--json")...)
		cmd.Env = append(runEnv(), "HOME=/")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var rep doctorReport
		if jerr := json.Unmarshal(out, &rep); jerr != nil {
			t.Fatalf("doctor --json as uid 65534 printed %q: %v (err %v, stderr %q)", out, jerr, err, stderr.String())
		}
		c := rep.find(t, "isolation", "")
		t.Log(c.line())
		for _, want := range []string{"uid 65534, not root", "no workload starts", "Run the agent as root", "backend.isolation = \"none\""} {
			if c.Status != checkFail || !strings.Contains(c.Detail, want) {
				t.Errorf("isolation as uid 65534 = %s %q, want fail naming %q", c.Status, c.Detail, want)
			}
		}
		if err == nil || rep.OK {
			t.Errorf("doctor as uid 65534 = %v, ok %v, want a failure", err, rep.OK)
		}
	})
}

// TestDoctorText checks the line format, the summary and --help.
func TestDoctorText(t *testing.T) {
	good := relaytest.Start(t).URL()
	data := filepath.Join(t.TempDir(), "data")
	newKey(t, filepath.Join(data, "identity.key"))
	if c, err := probeContainment(backend.ContainAuto); err != nil || c.Warning != "" {
		t.Skipf("this host cannot contain workloads (%v %s): doctor cannot pass here", err, c.Warning)
	}
	if !canIsolateHere(t) {
		t.Skip("this host cannot isolate workloads: doctor cannot pass here")
	}
	var out bytes.Buffer
	err := runDoctor(context.Background(), []string{"--data-dir", data, "--relay", good, "--quorum", "1", "--min-free-mib", "1"},
		&out, doctorEnv{now: time.Now})
	if err != nil {
		t.Fatalf("doctor = %v, want nil:\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 11 || lines[10] != "doctor: all 10 checks passed" {
		t.Errorf("doctor printed %d lines:\n%s\nwant 10 checks and the summary", len(lines), out.String())
	}
	if !strings.HasPrefix(lines[3], "ok    relay        "+good+": connected in ") {
		t.Errorf("relay line = %q", lines[3])
	}
	out.Reset()
	if err := runDoctor(context.Background(), []string{"--help"}, &out, doctorEnv{now: time.Now}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("doctor --help = %v, want flag.ErrHelp", err)
	}
	if !strings.Contains(out.String(), "Example:\n  provider-agent doctor --config") {
		t.Errorf("doctor --help printed no example:\n%s", out.String())
	}
}

// TestDoctorPodman: with backend.kind = podman, doctor runs a throwaway
// container as run would: it passes with the run args this host needs,
// and fails naming the cause with a podman that is not there, a runtime
// that is not there, and (on hosts whose limits podman's defaults exceed,
// as this project's CI machines) with no run args, naming the OCI
// runtime's own error rather than conmon's "no logs".
func TestDoctorPodman(t *testing.T) {
	backendtest.Busybox(t) // root, podman, runc
	tmp := t.TempDir()
	data := filepath.Join(tmp, "data")
	newKey(t, filepath.Join(data, "identity.key"))
	base := []string{"--data-dir", data, "--relay", closedPort(t), "--quorum", "1", "--timeout", "1s", "--min-free-mib", "1"}
	env := func(podman string, args ...string) []string {
		return []string{"PROVIDER_AGENT_BACKEND_KIND=podman", "PROVIDER_AGENT_BACKEND_PODMAN=" + podman,
			"PROVIDER_AGENT_BACKEND_PODMAN_RUN_ARGS=" + strings.Join(args, ",")}
	}
	for _, tt := range []struct {
		name    string
		environ []string
		ok      bool
		want    string
	}{
		{"the host's run args", env("podman", backendtest.RunArgs...), true, "a throwaway container ran"},
		{"no podman", env("/nonexistent/podman"), false, "/nonexistent/podman"},
		{"no such runtime", env("podman", "--runtime", "no-such-runtime"), false, "no-such-runtime"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rep, _ := doctorJSON(t, tt.environ, time.Now, base...)
			c := rep.find(t, "podman", "")
			if (c.Status == checkOK) != tt.ok || !strings.Contains(c.Detail, tt.want) {
				t.Errorf("podman check = %s %q, want ok %v mentioning %q", c.Status, c.Detail, tt.ok, tt.want)
			}
		})
	}
	t.Run("no run args", func(t *testing.T) {
		rep, _ := doctorJSON(t, env("podman"), time.Now, base...)
		c := rep.find(t, "podman", "")
		t.Logf("podman check without run args on this host: %s %s", c.Status, c.Detail)
		if c.Status == checkFail && (strings.Contains(c.Detail, "no logs from conmon") || !strings.Contains(c.Detail, "podman_run_args")) {
			t.Errorf("podman check = %q, want the runtime's own error and the podman_run_args fix", c.Detail)
		}
	})
}
