package agent

import (
	"bytes"
	"io"
	"os"
	"slices"
	"strings"

	"provideragent/lease"
)

// WorkloadView renders one workload as /status and the CLI show it. self is
// this agent's hex key ("" when unknown: the CLI reading the database while
// the agent is down; Role is then left empty).
//
// Standbys are the providers that can still take the workload over: the
// lease's standbys without the current holder. After a failover the
// promoted standby holds the workload and is no longer anyone's standby;
// a lease that named one standby then has none (NoStandby).
func WorkloadView(w lease.WorkloadSnapshot, self string, running bool) WorkloadStatus {
	ws := WorkloadStatus{
		ID: w.Spec.ID, State: string(w.State), Epoch: w.Epoch, Primary: w.Holder,
		Standbys: StandbysOf(w), Running: running,
	}
	ws.NoStandby = len(ws.Standbys) == 0 && len(w.Spec.Standbys) > 0
	if self != "" {
		ws.Role = "standby"
		if w.Holder == self || w.State == lease.StatePromoting {
			ws.Role = "primary"
		}
	}
	return ws
}

// StandbysOf returns the lease's standbys that can still take w over: all
// but the current holder, in rank order.
func StandbysOf(w lease.WorkloadSnapshot) []string {
	out := make([]string, 0, len(w.Spec.Standbys))
	for _, s := range w.Spec.Standbys {
		if s != w.Holder {
			out = append(out, s)
		}
	}
	return out
}

// withReasons returns ws with the Reason of every failed or respawning
// workload filled in from its log file, when the backend keeps one (a
// copy: ws is the shared status document).
func (a *Agent) withReasons(ws []WorkloadStatus) []WorkloadStatus {
	lp, ok := a.backend.(interface{ LogPath(id string) string })
	if !ok {
		return ws
	}
	var out []WorkloadStatus
	for i, w := range ws {
		if !needsReason(w.State) {
			continue
		}
		if out == nil {
			out = slices.Clone(ws)
		}
		out[i].Reason = ExitReason(lp.LogPath(w.ID))
	}
	if out == nil {
		return ws
	}
	return out
}

// needsReason reports whether a workload in state st is shown with the
// reason its process last ended: it failed, or it is being respawned.
func needsReason(st string) bool {
	return st == string(lease.StateFailed) || st == string(lease.StateRespawning)
}

// reasonTail bounds how much of a workload's log ExitReason reads.
const reasonTail = 16 << 10

// logMarker starts the lines the process backend appends to a workload's
// log (agent/backend: "=== provider-agent: <id> ended: exit 127",
// "=== provider-agent: start failed: ...").
const logMarker = "=== provider-agent: "

// ExitReason reads the end of a workload's log file and says why its last
// run ended: the backend's line about it, with the shell's meaning of exit
// statuses 126 and 127, and the workload's last line of output before it,
// e.g. `exit 127 (command not found): sh: 1: no-such-tool: not found`. It
// returns "" when the file does not exist or holds no such line.
func ExitReason(logPath string) string {
	if logPath == "" {
		return ""
	}
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > reasonTail {
		if _, err := f.Seek(-reasonTail, io.SeekEnd); err != nil {
			return ""
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, reasonTail))
	if err != nil {
		return ""
	}
	lines := strings.Split(string(bytes.ToValidUTF8(data, []byte("?"))), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, logMarker) {
			continue
		}
		what := strings.TrimPrefix(l, logMarker)
		if _, after, ok := strings.Cut(what, " ended: "); ok {
			what = after
		}
		switch {
		case strings.HasPrefix(what, "exit 127"):
			what += " (command not found)"
		case strings.HasPrefix(what, "exit 126"):
			what += " (command not executable)"
		}
		for j := i - 1; j >= 0; j-- {
			out := strings.TrimSpace(lines[j])
			if strings.HasPrefix(out, logMarker) {
				break // the previous run's end: this run printed nothing
			}
			if out != "" {
				return what + ": " + oneLine(out, 300)
			}
		}
		return what
	}
	return ""
}

// oneLine folds white space and truncates s to n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}
