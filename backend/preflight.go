package backend

import (
	"fmt"
	"os"
)

// ProbeContainment resolves mode on this host as NewProcess would, for a
// process with this one's user and cgroup, without starting a backend: no
// leftover is killed and no log dir is made. Its cgroup probe works in a
// directory of its own (provider-agent-doctor-<pid>, removed again), never
// in a running agent's. An explicit mode that is not available is an error
// (ErrNoContainment); with auto, Warning says what is missing. The binary
// must call RunShimIfRequested at the start of main (ErrNoShim): the probe
// starts it as the supervisors are started.
func ProbeContainment(mode ContainMode) (Containment, error) {
	if err := mode.Validate(); err != nil {
		return Containment{}, err
	}
	if !shimHooked.Load() {
		return Containment{}, ErrNoShim
	}
	c, err := detectContainment(mode, fmt.Sprintf("doctor-%d", os.Getpid()), 0)
	if err != nil {
		return Containment{}, err
	}
	c.close()
	out := *c
	out.tree = nil
	return out, nil
}

// ProbeIsolation resolves cfg's isolation settings on this host as
// NewProcess (and so NewPodman) would, for a process with this one's user,
// without starting a backend: it runs the same start-up probe (true(1) as
// the first workload uid, or as workload_user), resolves workload_user and
// checks that workload users can reach cfg.WorkloadDir, and makes no
// directory. A setting the backend would refuse (an unknown or privileged
// workload_user, an unreachable workload dir) is an error; a host that
// cannot isolate is an Isolation that is not Active, with Mode user and a
// Warning that says no workload starts; Mode none has a Warning too. The
// probe takes about a millisecond. The binary must call
// RunShimIfRequested at the start of main (ErrNoShim), as for NewProcess.
func ProbeIsolation(cfg ProcessConfig) (Isolation, error) {
	if err := cfg.Validate(); err != nil {
		return Isolation{}, err
	}
	if !shimHooked.Load() {
		return Isolation{}, ErrNoShim
	}
	var label string
	if cfg.LogDir != "" {
		m, err := markerFor(cfg.LogDir)
		if err != nil {
			return Isolation{}, err
		}
		label = m
	}
	iso, dirs, err := detectIsolation(isolationConfig{mode: cfg.Isolation, user: cfg.WorkloadUser, uids: cfg.WorkloadUIDs,
		dir: cfg.WorkloadDir, label: label})
	if err != nil {
		return Isolation{}, err
	}
	dirs.close()
	return *iso, nil
}
