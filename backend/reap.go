package backend

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// MarkerEnv is the environment variable that tags every process a Process
// backend with a LogDir starts (its supervisors and their workloads); its
// value identifies the LogDir, and names the backend's cgroups. A
// restarted agent uses it to find and kill what its previous incarnation
// left. A workload can clear its environment: the tag finds supervisors
// (which a PID namespace makes enough), not workloads.
const MarkerEnv = "PROVIDER_AGENT_BACKEND"

// markerFor returns the MarkerEnv value of a backend using logDir.
func markerFor(logDir string) (string, error) {
	abs, err := filepath.Abs(logDir)
	if err != nil {
		return "", fmt.Errorf("backend: log dir: %w", err)
	}
	sum := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(sum[:8]), nil
}

// KillLeftovers SIGKILLs every process that a Process backend with this
// LogDir started and that is still running: what a crashed agent's
// supervisors could not kill (a supervisor SIGSTOPped, or killed together
// with the agent where no PID namespace holds its workload). It kills the
// backend's cgroups whole (every process in them, whatever its
// environment; then removes them), then every process that carries the
// backend's tag in its environment (supervisors, and workload processes
// where there is no cgroup). Killing a supervisor that is a PID
// namespace's init kills its whole namespace. It must run before anything
// starts workloads on logDir and, in the daemon, as early as possible:
// before opening the database, whose failure must not leave an earlier
// agent's workloads running. The caller must make sure no live agent uses
// logDir (the daemon holds the data dir lock). Processes it may not
// inspect are skipped. It returns the number of processes killed.
func KillLeftovers(logDir string, logger *slog.Logger) (int, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	marker, err := markerFor(logDir)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, t := range cgroupTrees(marker) {
		for _, g := range t.groups() {
			k, err := g.kill()
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if k > 0 {
				logger.Warn("killed a leftover workload cgroup", "cgroup", g.dir, "processes", k)
			}
			n += k
			if err := g.remove(); err != nil {
				logger.Warn("could not remove a leftover workload cgroup", "err", err)
			}
		}
		t.remove() // if empty; a new backend makes it again
	}
	k, err := killMarked(logger, MarkerEnv+"="+marker)
	n += k
	if err != nil {
		errs = append(errs, err)
	}
	if n > 0 {
		logger.Warn("killed workload processes left running by a previous agent", "processes", n, "log_dir", logDir)
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("backend: kill leftovers: %w", err)
	}
	return n, nil
}

// killMarked SIGKILLs every process whose environment holds every one of
// entries ("KEY=value"), and its process group.
func killMarked(logger *slog.Logger, entries ...string) (int, error) {
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	want := make([][]byte, len(entries))
	for i, e := range entries {
		want[i] = []byte(e)
	}
	self := os.Getpid()
	n := 0
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid <= 1 {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		all := true
		for _, w := range want {
			all = all && hasEnvEntry(env, w)
		}
		if !all {
			continue
		}
		if pgid := procPgid(pid); pgid > 1 && pgid != syscall.Getpgrp() {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
			logger.Warn("killed leftover workload process", "pid", pid)
		}
	}
	return n, nil
}

// hasEnvEntry reports whether the NUL-separated environ holds entry exactly.
func hasEnvEntry(environ, entry []byte) bool {
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if bytes.Equal(kv, entry) {
			return true
		}
	}
	return false
}

// procPgid reads the process group of pid from /proc/<pid>/stat (0 when it
// cannot).
func procPgid(pid int) int {
	st, ok := readStat(pid)
	if !ok {
		return 0
	}
	return st.pgrp
}
