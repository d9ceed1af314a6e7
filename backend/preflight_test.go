package backend

import (
	"errors"
	"fmt"
	"os"
	"testing"
)

// TestProbeContainment: doctor's probe finds what NewProcess would on this
// host, refuses an unknown mode, and leaves no cgroup directory behind.
func TestProbeContainment(t *testing.T) {
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
