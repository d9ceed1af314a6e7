package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"provideragent/agent"
	"provideragent/internal/relaytest"
	"provideragent/internal/unitfile"
)

// installBlock returns the commands of docs/deployment.md's "Install,
// enable, logs" block, one per line, comments and continuation-only
// comment lines dropped.
func installBlock(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "deployment.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)### Install, enable, logs\n\n```sh\n(.*?)```").FindSubmatch(raw)
	if m == nil {
		t.Fatal("docs/deployment.md has no sh block under \"### Install, enable, logs\"")
	}
	var out []string
	for _, l := range strings.Split(string(m[1]), "\n") {
		if i := strings.Index(l, "#"); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// TestDeploymentDocInstall follows docs/deployment.md's install commands in
// their order on a fresh root directory (every absolute path of the block
// moved under it) and reaches a running isolated workload: the binary
// installed, the example config written and edited as the block's
// comment says (local relays), keygen on a data dir whose parents do not
// exist, the unit installed, doctor passing, and the unit's start
// performed as systemd would (its StateDirectory=, UMask=,
// WorkingDirectory=, Environment= and ExecStart=, read from the installed
// unit), then status and a granted workload that runs as a uid of its own.
// A command the test does not know fails it: the block and this test
// change together. Root only (workloads are isolated as other uids).
func TestDeploymentDocInstall(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the documented install runs as root (isolated workloads)")
	}
	t.Parallel()
	root, err := os.MkdirTemp("", "provider-agent-fresh-root-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	// What any host has: the directories the block installs into.
	for _, d := range []string{"", "/usr/local/bin", "/etc/systemd/system", "/var/lib"} {
		if err := os.MkdirAll(root+d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(root+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := agentBinary(t)
	relays := []string{relaytest.Start(t).URL(), relaytest.Start(t).URL()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	moved := strings.NewReplacer("/usr/local/bin", root+"/usr/local/bin", "/etc/", root+"/etc/",
		"/var/lib/provider-agent", root+"/var/lib/provider-agent", "deploy/", repo+"/deploy/")
	cfgFile := root + "/etc/provider-agent/provider-agent.toml"
	env := append(runEnv(), "PATH="+root+"/usr/local/bin:"+os.Getenv("PATH"))
	sh := func(line string) string {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-ec", line)
		cmd.Dir, cmd.Env = filepath.Dir(bin), env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		return string(out)
	}
	var agentRun *exec.Cmd
	for _, line := range installBlock(t) {
		cmdline := moved.Replace(strings.ReplaceAll(strings.TrimPrefix(line, "sudo "), "| sudo ", "| "))
		t.Logf("$ %s", line)
		switch {
		case strings.HasPrefix(line, "sudoedit "):
			// What the block's comment asks: relays, quorum, the data dir;
			// and, on this moved root, the workload dir and a free port.
			raw, err := os.ReadFile(cfgFile)
			if err != nil {
				t.Fatal(err)
			}
			s := string(raw)
			for _, kv := range [][2]string{
				{`(?m)^relays = .*$`, fmt.Sprintf("relays = [%q, %q]", relays[0], relays[1])},
				{`(?m)^quorum = .*$`, "quorum = 2"},
				{`(?m)^data_dir = .*$`, fmt.Sprintf("data_dir = %q", root+"/var/lib/provider-agent/data")},
				{`(?m)^listen = .*$`, fmt.Sprintf("listen = %q", listen)},
				{`(?m)^workload_dir = .*$`, fmt.Sprintf("workload_dir = %q", root+"/var/lib/provider-agent/workloads")},
			} {
				re := regexp.MustCompile(kv[0])
				if !re.MatchString(s) {
					t.Fatalf("the example config has no line matching %s", kv[0])
				}
				s = re.ReplaceAllLiteralString(s, kv[1])
			}
			if err := os.WriteFile(cfgFile, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(line, "sudo systemctl daemon-reload"):
			if _, err := os.Stat(root + "/etc/systemd/system/provider-agent.service"); err != nil {
				t.Fatalf("daemon-reload: the unit is not installed: %v", err)
			}
		case strings.HasPrefix(line, "sudo systemctl enable --now provider-agent"):
			agentRun = startUnit(t, root, root+"/etc/systemd/system/provider-agent.service", moved, env)
		case strings.HasPrefix(line, "systemctl status"), strings.HasPrefix(line, "journalctl "):
			// systemd's views of the same start: the agent's output is
			// checked below.
		case strings.HasPrefix(line, "sudo provider-agent status "):
			out := sh(cmdline)
			if !strings.Contains(out, "source: agent") {
				t.Fatalf("%s = %q, want the running agent's status", line, out)
			}
		case strings.HasPrefix(line, "sudo provider-agent doctor "):
			out := sh(cmdline)
			t.Logf("%s", out)
		case strings.HasPrefix(line, "sudo install "), strings.HasPrefix(line, "provider-agent run --print-example-config"),
			strings.HasPrefix(line, "sudo provider-agent keygen "):
			sh(cmdline)
		default:
			t.Fatalf("docs/deployment.md's install block has %q, which this test does not know how to follow", line)
		}
	}
	if agentRun == nil {
		t.Fatal("the install block never started the unit")
	}
	for path, want := range map[string]os.FileMode{root + "/var/lib/provider-agent": 0o755, root + "/var/lib/provider-agent/data": 0o700} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v, mode %04o; want %04o", path, err, st.Mode().Perm(), want)
		}
	}
	// The README's next step: a workload, which runs isolated.
	sh(fmt.Sprintf("provider-agent workloads grant --config %s --id web-1 --command 'sleep 7411'", cfgFile))
	statusURL := "http://" + listen + "/status"
	r := &runChild{status: statusURL}
	st := r.waitStatus(t, "web-1 running", 60*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "web-1")
		return ok && w.Running
	})
	if st.IsolationWarning != "" || !strings.Contains(st.Isolation, "uids") {
		t.Errorf("/status isolation = %q (%q), want workloads as uids of their own", st.Isolation, st.IsolationWarning)
	}
	if uid := sleepUID(t, "sleep 7411"); uid < 1900000000 {
		t.Errorf("the workload runs as uid %d, want one of backend.workload_uids", uid)
	}
	if err := agentRun.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := agentRun.Wait(); err != nil {
		t.Errorf("the agent after SIGTERM: %v, want exit 0", err)
	}
}

// startUnit starts the agent as systemd would start unit: its
// StateDirectory= made (missing parents 0755) with StateDirectoryMode=,
// then ExecStart= with its Environment=, in WorkingDirectory= under
// UMask=, every path moved under root. It returns once the agent printed
// its first line; the test ends it.
func startUnit(t *testing.T, root, unit string, moved *strings.Replacer, env []string) *exec.Cmd {
	t.Helper()
	set := map[string]string{}
	var environ []string
	for _, l := range unitLines(t, unit) {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		if k == "Environment" {
			environ = append(environ, moved.Replace(v))
		}
		set[k] = moved.Replace(v)
	}
	mode, err := strconv.ParseUint(set["StateDirectoryMode"], 8, 32)
	if err != nil {
		t.Fatalf("StateDirectoryMode=%q: %v", set["StateDirectoryMode"], err)
	}
	state := filepath.Join(root, "var/lib", set["StateDirectory"])
	if err := os.MkdirAll(filepath.Dir(state), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(state, os.FileMode(mode)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, os.FileMode(mode)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "umask "+set["UMask"]+" && exec "+set["ExecStart"])
	cmd.Dir = set["WorkingDirectory"]
	cmd.Env = append(append([]string{}, env...), environ...)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("ExecStart=%s: %v", set["ExecStart"], err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("the agent's log:\n%s", stderr.String())
		}
	})
	first := followLines(out, nil, nil)
	select {
	case line := <-first:
		t.Logf("the unit's agent: %s", line)
	case <-time.After(60 * time.Second):
		t.Fatalf("ExecStart=%s printed nothing in 60 s:\n%s", set["ExecStart"], stderr.String())
	}
	return cmd
}

// unitLines returns a unit file's settings (internal/unitfile).
func unitLines(t *testing.T, path string) []string {
	t.Helper()
	lines, err := unitfile.Settings(path)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// sleepUID returns the uid of the process whose command line is cmdline
// (the workload's main process), waiting briefly for it.
func sleepUID(t *testing.T, cmdline string) int {
	t.Helper()
	want := []byte(strings.ReplaceAll(cmdline, " ", "\x00"))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			c, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err != nil || !bytes.Equal(bytes.TrimRight(c, "\x00"), want) {
				continue
			}
			var st syscall.Stat_t
			if syscall.Stat(fmt.Sprintf("/proc/%d", pid), &st) == nil {
				return int(st.Uid)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no process %q", cmdline)
	return -1
}
