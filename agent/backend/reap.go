package backend

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// MarkerEnv is the environment variable that tags every process a Process
// backend with a LogDir starts; its value identifies the LogDir. A restarted
// agent uses it to find and kill workloads its previous incarnation left.
const MarkerEnv = "PROVIDER_AGENT_BACKEND"

// reapLeftovers SIGKILLs every process (and its process group) whose
// environment carries this backend's marker. It runs before the backend
// starts anything, so each such process is a leftover of an earlier agent
// that died without stopping its workloads. Processes it may not inspect
// are skipped. It returns the number of processes killed.
func (b *Process) reapLeftovers() int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	want := []byte(MarkerEnv + "=" + b.marker)
	self := os.Getpid()
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid <= 1 {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !hasEnvEntry(env, want) {
			continue
		}
		if pgid := procPgid(pid); pgid > 1 && pgid != syscall.Getpgrp() {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
			b.logger.Warn("killed leftover workload process", "pid", pid)
		}
	}
	return n
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
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state ppid pgrp ...
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return 0
	}
	pgid, err := strconv.Atoi(f[2])
	if err != nil {
		return 0
	}
	return pgid
}
