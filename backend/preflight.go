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
