package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/relaytest"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// agentBinary builds provider-agent once per test process WITHOUT -race
// (the demo and dev-relay run khatru in-process, which races on its own
// listener slice) and returns its path. TestMain removes it. Its directory
// is world-readable so that a test may run it as another user.
//
// $PROVIDER_AGENT_TEST_BIN, when set, names a binary to run instead (for
// example one built from an older commit, to see a test fail on it).
func agentBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("PROVIDER_AGENT_TEST_BIN"); p != "" {
		return p
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "provider-agent-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "provider-agent")
		if err := os.Chmod(dir, 0o755); err != nil {
			binErr = err
			return
		}
		binErr = buildAgent(binPath)
	})
	if binErr != nil {
		t.Fatalf("build provider-agent: %v", binErr)
	}
	return binPath
}

// buildAgent builds this package's binary at path with the given extra
// go build flags, without -race (whatever GOFLAGS says).
func buildAgent(path string, flags ...string) error {
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", path, ".")...)
	var env []string
	for _, kv := range os.Environ() {
		if v, ok := strings.CutPrefix(kv, "GOFLAGS="); ok {
			kv = "GOFLAGS=" + strings.ReplaceAll(strings.ReplaceAll(v, "-race=true", ""), "-race", "")
		}
		env = append(env, kv)
	}
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return &buildError{err: err, out: string(out)}
	}
	return nil
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

var finalLine = regexp.MustCompile(`^failover: standby Live at epoch 2 after [0-9]+\.[0-9]s$`)

// TestDemoCommand runs `provider-agent demo` as a child process: it must end
// with the failover line and exit 0 within 60 s.
func TestDemoCommand(t *testing.T) {
	t.Parallel()
	bin := agentBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "demo")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		t.Fatalf("provider-agent demo: %v (after %v)\nstdout:\n%s\nstderr:\n%s", err, took, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last := lines[len(lines)-1]
	if !finalLine.MatchString(last) {
		t.Fatalf("last line = %q, want %v\nstdout:\n%s", last, finalLine, stdout.String())
	}
	for _, want := range []string{"CUT", "suspect", "evicted", "FENCE", "revocation", "promoting", "live (epoch 2)"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("demo timeline lacks %q:\n%s", want, stdout.String())
		}
	}
	if took > 60*time.Second {
		t.Errorf("demo took %v, want under 60 s", took)
	}
	t.Logf("demo took %v; %s", took, last)
}

// TestDevRelayCommand starts `provider-agent dev-relay` on a free port,
// publishes an event to it over a real websocket, and stops it with SIGINT.
func TestDevRelayCommand(t *testing.T) {
	t.Parallel()
	bin := agentBinary(t)
	cmd := exec.Command(bin, "dev-relay", "--listen", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatalf("dev-relay printed nothing")
	}
	line := sc.Text()
	m := regexp.MustCompile(`ws://127\.0\.0\.1:[0-9]+`).FindString(line)
	if m == "" {
		t.Fatalf("dev-relay first line = %q, want its ws:// URL", line)
	}
	c := relaytest.Dial(t, m)
	defer c.Close()
	ev := nostr.Event{Kind: 1, CreatedAt: nostr.Now(), Content: "hello", Tags: nostr.Tags{}}
	if err := ev.Sign(nostr.GeneratePrivateKey()); err != nil {
		t.Fatal(err)
	}
	c.Send(nostr.EventEnvelope{Event: ev})
	env, err := c.Read(5 * time.Second)
	if err != nil {
		t.Fatalf("read OK: %v", err)
	}
	ok, isOK := env.(*nostr.OKEnvelope)
	if !isOK || !ok.OK || ok.EventID != ev.ID {
		t.Fatalf("reply = %v, want OK true for %s", env, ev.ID)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for sc.Scan() {
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("dev-relay exit = %v, want 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("dev-relay did not stop within 10 s of SIGINT")
	}
}
