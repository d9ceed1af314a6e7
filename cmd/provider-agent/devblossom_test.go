package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDevBlossomUploadRestore: the checkpoint walk-through of
// docs/uploader.md against 'provider-agent dev-blossom' in a child process:
// tiles add, tiles upload, tiles restore give back the file; SIGINT stops
// the server.
func TestDevBlossomUploadRestore(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	blobs, data := filepath.Join(tmp, "blobs"), filepath.Join(tmp, "data")
	cmd := exec.Command(agentBinary(t), "dev-blossom", "--listen", "127.0.0.1:0", "--dir", blobs)
	cmd.Env = runEnv()
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 4)
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		done <- cmd.Wait()
	}()
	exited := false
	defer func() {
		if !exited {
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	var url string
	select {
	case l := <-lines:
		url = regexp.MustCompile(`http://127\.0\.0\.1:[0-9]+`).FindString(l)
		if url == "" || !strings.Contains(l, "blobs in "+blobs) {
			t.Fatalf("dev-blossom first line = %q, want its URL and blob dir", l)
		}
	case err := <-done:
		exited = true
		t.Fatalf("dev-blossom exited: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("dev-blossom printed nothing within 60 s")
	}

	newKey(t, filepath.Join(data, "identity.key"))
	file := filepath.Join(tmp, "ckpt.bin")
	content := make([]byte, 3<<20+1234)
	_, _ = rand.Read(content)
	if err := os.WriteFile(file, content, 0o600); err != nil {
		t.Fatal(err)
	}
	must(t, nil, "tiles", "add", file, "--workload", "job-7", "--data-dir", data)
	up := must(t, nil, "tiles", "upload", "--server", url, "--data-dir", data)
	if !strings.Contains(up.stdout, "outcome: success") || !strings.Contains(up.stdout, "accepted: 4") {
		t.Errorf("tiles upload = %q, want 4 tiles accepted", up.stdout)
	}
	restored := filepath.Join(tmp, "restored.bin")
	must(t, nil, "tiles", "restore", file+".manifest.json", "--out", restored, "--server", url)
	got, err := os.ReadFile(restored)
	if err != nil || !bytes.Equal(got, content) {
		t.Errorf("restored file = %d bytes (%v), want the %d bytes uploaded", len(got), err, len(content))
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		exited = true
		if err != nil {
			t.Fatalf("dev-blossom after SIGINT = %v, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dev-blossom did not stop within 30 s of SIGINT")
	}
	last := ""
	for len(lines) > 0 {
		last = <-lines
	}
	if !strings.Contains(last, "stopped (4 blobs") {
		t.Errorf("dev-blossom last line = %q, want it to count the 4 blobs", last)
	}
	if n, _ := filepath.Glob(filepath.Join(blobs, "*")); len(n) != 4 {
		t.Errorf("blob dir holds %v, want the 4 tiles", n)
	}
	if r := cli(t, nil, "dev-blossom", "--help"); r.code != 0 || !strings.Contains(r.stdout, "Example:") {
		t.Errorf("dev-blossom --help = exit %d %q, want the usage with an example", r.code, r.stdout)
	}
}
