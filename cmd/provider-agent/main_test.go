package main

import (
	"os"
	"path/filepath"
	"testing"

	"provideragent/backend"
)

// TestMain lets the process backend re-execute this test binary as a
// workload supervisor (the demo and run start workloads in-process), lets a
// test run it as another process that holds a SQLite write lock
// (holdWriteLockIfRequested), and removes the provider-agent binary the
// child-process tests built.
func TestMain(m *testing.M) {
	backend.RunShimIfRequested()
	holdWriteLockIfRequested()
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}
