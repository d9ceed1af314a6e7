package main

import (
	"os"
	"testing"

	"provideragent/agent/backend"
)

// TestMain lets the process backend re-execute this test binary as a
// workload supervisor (the demo and run start workloads in-process).
func TestMain(m *testing.M) {
	backend.RunShimIfRequested()
	os.Exit(m.Run())
}
