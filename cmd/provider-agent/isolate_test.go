package main

import (
	"os"
	"testing"
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
