package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cliResult is what one child-process run of provider-agent did.
type cliResult struct {
	code           int
	stdout, stderr string
}

// cli runs the real provider-agent binary (built once, without -race) with
// args in a child process, with the test's environment minus any
// PROVIDER_AGENT_* setting plus env, and returns its exit code and output.
// A run is bounded by two minutes (a hang fails the test, it measures
// nothing).
func cli(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, agentBinary(t), args...)
	cmd.Env = append(runEnv(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := cliResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		t.Fatalf("run provider-agent %v: %v", args, err)
	}
	return res
}

// must runs cli and fails the test unless it exits 0.
func must(t *testing.T, env []string, args ...string) cliResult {
	t.Helper()
	r := cli(t, env, args...)
	if r.code != 0 {
		t.Fatalf("provider-agent %s = exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// TestChildBinaryIsRemoved runs one child-process test of this package in
// a test binary of its own with a fresh temp dir, and checks that the
// provider-agent binary it built (in a provider-agent-bin-* directory) is
// gone when that test binary exits.
func TestChildBinaryIsRemoved(t *testing.T) {
	if os.Getenv("PROVIDER_AGENT_TEST_CHILD") != "" {
		t.Skip("inside the child test binary")
	}
	t.Parallel()
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestKeygenCreatesTheDirectory$", "-test.count", "1")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "PROVIDER_AGENT_TEST_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child test binary: %v\n%s", err, out)
	}
	left, err := filepath.Glob(filepath.Join(tmp, "provider-agent-bin-*"))
	if err != nil || len(left) != 0 {
		t.Errorf("after the child test binary exited, %s holds %v (%v), want no provider-agent-bin-* directory", tmp, left, err)
	}
}
