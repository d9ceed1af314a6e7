package backend

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProbeContainment: doctor's probe finds what NewProcess would on this
// host, refuses an unknown mode, and leaves no cgroup directory behind.
func TestProbeContainment(t *testing.T) {
	t.Parallel()
	want, err := detectContainment(ContainAuto, fmt.Sprintf("probe-test-%d", os.Getpid()), 0)
	if err != nil {
		t.Fatal(err)
	}
	want.close()
	got, err := ProbeContainment(ContainAuto)
	if err != nil || got.Summary == "" || got.PIDNamespace != want.PIDNamespace || (got.Cgroup != "") != (want.Cgroup != "") {
		t.Fatalf("ProbeContainment(auto) = %+v, %v; want what detectContainment finds: %+v", got, err, want)
	}
	for _, tr := range cgroupTrees(fmt.Sprintf("doctor-%d", os.Getpid())) {
		if _, err := os.Stat(tr.dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("ProbeContainment left %s behind (%v)", tr.dir, err)
		}
	}
	if got, err := ProbeContainment(ContainNone); err != nil || got.Warning == "" {
		t.Errorf("ProbeContainment(none) = %+v, %v; want the containment-off warning", got, err)
	}
	if _, err := ProbeContainment("sometimes"); err == nil {
		t.Errorf("ProbeContainment(sometimes) = nil error, want the mode refused")
	}
}

// TestProbeIsolation: doctor's probe resolves the isolation settings as
// NewProcess would (the users, the warnings, the errors) and makes no
// directory.
func TestProbeIsolation(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(reachableDir(t), "workloads")
	cfg := DefaultProcessConfig()
	cfg.LogDir, cfg.WorkloadDir = filepath.Join(t.TempDir(), "logs"), dir
	got, err := ProbeIsolation(cfg)
	if err != nil {
		t.Fatalf("ProbeIsolation(default) = %v", err)
	}
	if os.Geteuid() == 0 {
		marker, _ := markerFor(cfg.LogDir)
		if !got.Active || got.Warning != "" || !strings.Contains(got.Users, "uids 1900000000-1900065535, one per workload") ||
			got.WorkloadDir != filepath.Join(dir, marker) {
			t.Errorf("ProbeIsolation(default) as root = %+v, want active with a uid per workload under %s", got, filepath.Join(dir, marker))
		}
	} else if got.Active || !strings.Contains(got.Warning, "not root") || !strings.Contains(got.Warning, "no workload starts") {
		t.Errorf("ProbeIsolation(default) as uid %d = %+v, want inactive: not root, no workload starts", os.Geteuid(), got)
	}
	for _, p := range []string{dir, cfg.LogDir} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("ProbeIsolation made %s (%v), want nothing made", p, err)
		}
	}

	none := cfg
	none.Isolation = IsolateNone
	if got, err := ProbeIsolation(none); err != nil || got.Active || !strings.Contains(got.Warning, "unsafe") {
		t.Errorf("ProbeIsolation(none) = %+v, %v; want inactive with the unsafe warning", got, err)
	}
	if _, err := ProbeIsolation(ProcessConfig{StopGrace: time.Second, Isolation: "sometimes"}); err == nil {
		t.Errorf("ProbeIsolation(isolation sometimes) = nil error, want the mode refused")
	}
	if os.Geteuid() != 0 {
		return
	}
	one := cfg
	one.WorkloadUser = "65534"
	if got, err := ProbeIsolation(one); err != nil || !got.Active || !strings.Contains(got.Users, "(uid 65534), shared by every workload") {
		t.Errorf("ProbeIsolation(workload_user 65534) = %+v, %v; want active as that one user", got, err)
	}
	one.WorkloadUser = "0"
	if _, err := ProbeIsolation(one); err == nil || !strings.Contains(err.Error(), "the agent's or root") {
		t.Errorf("ProbeIsolation(workload_user 0) = %v, want root refused", err)
	}
	hidden := cfg
	hidden.WorkloadDir = filepath.Join(t.TempDir(), "workloads")
	if _, err := ProbeIsolation(hidden); err == nil || !strings.Contains(err.Error(), "could not reach") {
		t.Errorf("ProbeIsolation(workload dir in t.TempDir()) = %v, want it unreachable", err)
	}
}
