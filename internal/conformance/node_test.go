package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNodeImplementation runs the second implementation
// (node/check.mjs, on nostr-tools from npm): it verifies every vector's id
// and signature as its sig_valid says, and builds one event of every kind
// and form from the NIP's text, which this test then judges: each must be
// accepted in the NIP's example context and read as the NIP's example of
// it is read. A machine without node fails the test (it is not skipped).
func TestNodeImplementation(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	dir := filepath.Join(root, "internal", "conformance", "node")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found on PATH (this test needs Node.js 20 and npm; it is not skipped): %v", err)
	}
	if err := npmCI(dir); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "built.json")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "check.mjs", "--vectors", filepath.Join(root, VectorsDir), "--out", out)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node check.mjs: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	t.Log(strings.TrimSpace(stdout.String()))

	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var built []struct {
		Example string          `json:"example"`
		Event   json.RawMessage `json:"event"`
	}
	if err := json.Unmarshal(b, &built); err != nil {
		t.Fatal(err)
	}
	files, err := LoadFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := FixedKeys()
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, e := range built {
		file, name, _ := strings.Cut(e.Example, "#")
		var want *Vector
		for _, v := range files[file].Vectors {
			if v.Name == name {
				want = &v
			}
		}
		if want == nil {
			t.Errorf("node built %s: no such vector", e.Example)
			continue
		}
		got, err := Judge(context.Background(), ExampleContext(keys), e.Event)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Accepted {
			t.Errorf("node's %s refused: %v\n%s", e.Example, got.Err, e.Event)
			continue
		}
		covered[fmt.Sprint(got.Kind)+"/"+file] = true
		if got.Kind != files[file].Kind {
			t.Errorf("node's %s has kind %d, want %d", e.Example, got.Kind, files[file].Kind)
		}
		if g, w := canonical(t, got.Reads), canonical(t, want.Reads); g != w {
			t.Errorf("node's %s reads\n%s\nthe NIP's example reads\n%s", e.Example, g, w)
		}
	}
	for name, f := range files {
		if !covered[fmt.Sprint(f.Kind)+"/"+name] {
			t.Errorf("node built no event of %s (kind %d)", name, f.Kind)
		}
	}
}

// npmCI installs dir's packages with npm ci, once per package-lock.json
// change, under dir/.npm-ci.lock: test binaries and .ci/run may try at
// the same time.
func npmCI(dir string) error {
	lock, err := os.OpenFile(filepath.Join(dir, ".npm-ci.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("lock %s: %w", dir, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", dir, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck
	lockInfo, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return err
	}
	if hidden, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err == nil && !hidden.ModTime().Before(lockInfo.ModTime()) {
		return nil
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("npm ci in %s: %w\n%s", dir, err, out)
	}
	return nil
}
