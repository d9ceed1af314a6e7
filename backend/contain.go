package backend

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ContainMode says how a Process backend holds each workload's processes
// together, so that none outlives the workload's supervisor, whatever it
// does to its environment, session or process group.
type ContainMode string

const (
	// ContainAuto uses a PID namespace when the kernel lets the agent
	// create one, and a cgroup when the agent may write one, and warns
	// about what is missing. The default.
	ContainAuto ContainMode = "auto"
	// ContainPIDNS requires a PID namespace whose init is the supervisor
	// (CLONE_NEWPID; with a user namespace when the agent is not root):
	// when the supervisor dies, however it dies, the kernel kills every
	// process of the workload. No cgroup.
	ContainPIDNS ContainMode = "pidns"
	// ContainCgroup requires a cgroup per workload (v2, or the v1
	// freezer), killed whole when the supervisor dies while the agent
	// runs, and at the next start when both died. No PID namespace.
	ContainCgroup ContainMode = "cgroup"
	// ContainNone uses neither: a process that clears its environment and
	// leaves the supervisor's process tree can outlive it (the backend
	// warns).
	ContainNone ContainMode = "none"
)

// ContainModes lists the modes, for help texts and validation.
var ContainModes = []ContainMode{ContainAuto, ContainPIDNS, ContainCgroup, ContainNone}

// ErrNoContainment means the containment a config requires is not
// available on this host (the error says what is missing).
var ErrNoContainment = errors.New("workload containment not available")

// Validate checks m ("" counts as auto).
func (m ContainMode) Validate() error {
	if m == "" {
		return nil
	}
	for _, k := range ContainModes {
		if m == k {
			return nil
		}
	}
	return fmt.Errorf("backend: containment = %q: want auto, pidns, cgroup or none", string(m))
}

// Containment is how a backend contains its workloads, resolved on this
// host. It is reusable by any backend that starts a supervisor per
// workload: Apply sets the supervisor's clone flags, NewGroup makes a
// workload's cgroup (which the supervisor joins before it starts
// anything), and KillLeftovers finds what a crashed agent left by its
// cgroups.
type Containment struct {
	// PIDNamespace: each supervisor is the init of a new PID namespace.
	PIDNamespace bool `json:"pid_namespace"`
	// UserNamespace: that namespace is created inside a new user namespace
	// (the agent is not root); the workload keeps the agent's uid and gid.
	UserNamespace bool `json:"user_namespace,omitempty"`
	// Cgroup is the directory holding one cgroup per workload start ("":
	// none); CgroupVersion is 2, or 1 for the v1 freezer hierarchy.
	Cgroup        string `json:"cgroup,omitempty"`
	CgroupVersion int    `json:"cgroup_version,omitempty"`
	// Warning says what a workload can get away with on this host; "" when
	// a workload's processes cannot outlive its supervisor.
	Warning string `json:"warning,omitempty"`
	// Summary is String's text, for a reader that has only the value.
	Summary string `json:"summary"`

	tree *cgroupTree
	// cloneInto: supervisors are born in their cgroup (clone3 with
	// CLONE_INTO_CGROUP, cgroup v2 since Linux 5.7) instead of moving
	// themselves there, which costs a few milliseconds per start on v2
	// (moving a multi-threaded process waits for an RCU grace period).
	cloneInto bool
}

// String describes the containment for logs and /status: "pid namespace +
// cgroup v2 /sys/fs/cgroup/provider-agent-…", "none".
func (c *Containment) String() string {
	if c == nil {
		return "none"
	}
	var parts []string
	if c.PIDNamespace {
		s := "pid namespace"
		if c.UserNamespace {
			s += " (in a user namespace)"
		}
		parts = append(parts, s)
	}
	if c.Cgroup != "" {
		v := "cgroup v2"
		if c.CgroupVersion == 1 {
			v = "cgroup v1 freezer"
		}
		parts = append(parts, v+" "+c.Cgroup)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " + ")
}

// Apply sets the clone flags (and the user namespace's id maps) that make
// the process attr describes the init of a new PID namespace.
func (c *Containment) Apply(attr *syscall.SysProcAttr) {
	if c == nil || !c.PIDNamespace {
		return
	}
	attr.Cloneflags |= syscall.CLONE_NEWPID
	if c.UserNamespace {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
}

// newGroup makes the cgroup of one workload start (nil without cgroups).
func (c *Containment) newGroup(name string) (*cgroupGroup, error) {
	if c == nil || c.tree == nil {
		return nil, nil
	}
	return c.tree.newGroup(name)
}

// place arranges for the supervisor to be in cgroup g (nil: none): born
// there (attr's cgroup fd; the returned file must stay open until the
// process was started, then be closed), or by moving itself there before
// it starts anything (join).
func (c *Containment) place(g *cgroupGroup, attr *syscall.SysProcAttr) (dir *os.File, join bool, err error) {
	if g == nil {
		return nil, false, nil
	}
	if !c.cloneInto {
		return nil, true, nil
	}
	dir, err = os.Open(g.dir)
	if err != nil {
		return nil, false, fmt.Errorf("open cgroup: %w", err)
	}
	attr.UseCgroupFD, attr.CgroupFD = true, int(dir.Fd())
	return dir, false, nil
}

// close removes the backend's cgroup directory once its workloads' cgroups
// are gone (best effort).
func (c *Containment) close() {
	if c != nil && c.tree != nil {
		c.tree.remove()
	}
}

// probeEnvValue is shimEnv's value that makes the binary a containment
// probe: it joins the cgroup whose cgroup.procs follows the comma, if
// any, or with ",uid=N" drops to uid and gid N (the isolation probe), and
// exits 0 (or 3, saying why on stderr).
const probeEnvValue = "probe"

// runProbe is the probe's main.
func runProbe(v string) int {
	if id, ok := strings.CutPrefix(v, probeEnvValue+",uid="); ok {
		n, err := strconv.ParseUint(id, 10, 32)
		if err == nil {
			err = probeDropTo(uint32(n))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		return 0
	}
	if procs, ok := strings.CutPrefix(v, probeEnvValue+","); ok && procs != "" {
		if err := joinCgroup(procs); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
	}
	return 0
}

// probe starts this binary as a probe with attr's clone flags, joining
// the cgroup procs (if not ""), and reports why it failed.
func probe(attr *syscall.SysProcAttr, procs string) error {
	v := probeEnvValue
	if procs != "" {
		v += "," + procs
	}
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        []string{shimArgv0 + "-probe"},
		Env:         []string{shimEnv + "=" + v},
		SysProcAttr: attr,
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			if msg := strings.TrimSpace(stderr.String()); msg != "" {
				return errors.New(msg)
			}
			return err
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return errors.New("probe did not exit within 30 s")
	}
}

// detectContainment resolves mode on this host. marker names the
// backend's cgroup directory ("" means no cgroup: a backend without a log
// dir has no stable name to find leftovers by). cgroupVersion, when not 0,
// restricts cgroups to that version (tests). An explicit mode that is not
// available is an error (ErrNoContainment).
func detectContainment(mode ContainMode, marker string, cgroupVersion int) (*Containment, error) {
	if mode == "" {
		mode = ContainAuto
	}
	c := &Containment{}
	var nsWhy, cgWhy string
	if mode == ContainAuto || mode == ContainPIDNS {
		c.PIDNamespace, c.UserNamespace = true, os.Geteuid() != 0
		attr := &syscall.SysProcAttr{}
		c.Apply(attr)
		if err := probe(attr, ""); err != nil {
			c.PIDNamespace, c.UserNamespace = false, false
			nsWhy = pidnsWhy(err)
		}
	}
	if (mode == ContainAuto || mode == ContainCgroup) && marker != "" {
		cgWhy = "no cgroup hierarchy (v2, or v1 with the freezer) is mounted"
		for _, t := range cgroupTrees(marker) {
			if cgroupVersion != 0 && t.version != cgroupVersion {
				continue
			}
			if err := probeCgroup(c, t); err != nil {
				cgWhy = err.Error()
				continue
			}
			tt := t
			c.tree, c.Cgroup, c.CgroupVersion = &tt, t.dir, t.version
			cgWhy = ""
			break
		}
	} else if mode == ContainAuto || mode == ContainCgroup {
		cgWhy = "the backend has no log dir to name its cgroup by"
	}
	switch mode {
	case ContainPIDNS:
		if !c.PIDNamespace {
			return nil, fmt.Errorf("backend: containment = pidns: %s: %w", nsWhy, ErrNoContainment)
		}
	case ContainCgroup:
		if c.tree == nil {
			return nil, fmt.Errorf("backend: containment = cgroup: %s: %w", cgWhy, ErrNoContainment)
		}
	}
	switch {
	case mode == ContainNone:
		c.Warning = "workload containment is off (backend.containment = none): " + escapeRisk
	case c.PIDNamespace:
		// Nothing of a workload outlives its supervisor.
	case c.tree != nil:
		if nsWhy == "" {
			nsWhy = "backend.containment = cgroup"
		}
		c.Warning = "no PID namespace (" + nsWhy + "): a workload process that leaves its supervisor's process tree " +
			"is killed with the workload's cgroup when the supervisor dies while the agent runs, but when agent and supervisor " +
			"die together it runs on until the agent starts again"
	default:
		c.Warning = "no PID namespace (" + nsWhy + ") and no cgroup (" + cgWhy + "): " + escapeRisk +
			"; run the agent as root, allow it user namespaces, or give it a cgroup it may write (systemd: Delegate=yes)"
	}
	c.Summary = c.String()
	return c, nil
}

// escapeRisk is what an uncontained workload can do.
const escapeRisk = "a workload process that clears its environment and leaves its supervisor's process tree " +
	"(env -i ... setsid) outlives a killed supervisor and a killed agent, and can run beside the copy a restart " +
	"or a standby starts"

// probeCgroup checks that this process may create cgroups under t and
// move a process (a probe, started as the supervisors are, with c's clone
// flags) into one.
func probeCgroup(c *Containment, t cgroupTree) error {
	if err := t.create(); err != nil {
		return fmt.Errorf("cgroup v%d: %w", t.version, err)
	}
	g, err := t.newGroup(fmt.Sprintf("probe-%d", os.Getpid()))
	if err != nil {
		t.remove()
		return fmt.Errorf("cgroup v%d: %w", t.version, err)
	}
	attr := &syscall.SysProcAttr{}
	c.Apply(attr)
	// The tree is made again by the first workload's cgroup.
	defer t.remove()
	if t.version == 2 {
		// Born in the cgroup, where the kernel can.
		c.cloneInto = true
		dir, _, err := c.place(g, attr)
		if err == nil {
			err = probe(attr, "")
			dir.Close()
		}
		if err == nil && len(g.pids()) == 0 {
			_ = g.remove()
			return nil
		}
		c.cloneInto = false
		attr = &syscall.SysProcAttr{}
		c.Apply(attr)
	}
	err = probe(attr, g.procsFile())
	_, _ = g.kill()
	_ = g.remove()
	if err != nil {
		return fmt.Errorf("cgroup v%d %s: %w", t.version, t.dir, err)
	}
	return nil
}

// pidnsWhy says why a PID namespace could not be made.
func pidnsWhy(err error) string {
	switch {
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		if os.Geteuid() == 0 {
			return "creating one is not permitted here: " + err.Error()
		}
		return "not root, and unprivileged user namespaces are not permitted here: " + err.Error()
	case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EUSERS):
		return "the kernel refused one: " + err.Error()
	}
	return err.Error()
}
