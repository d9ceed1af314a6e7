package backend

import (
	"bytes"
	"io"
	"os"
	"strings"
)

// reasonTail bounds how much of a workload's log ExitReason reads.
const reasonTail = 16 << 10

// logMarker starts the lines the process backend appends to a workload's
// log ("=== provider-agent: <id> ended: exit 127", "=== provider-agent:
// start failed: ...", "=== provider-agent: start <id> epoch N at ...").
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
		} else if !strings.HasPrefix(what, "start failed:") {
			continue // a run's start line: its end, if any, is after it
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
			if out != "" && !uninformative(out) {
				return what + ": " + oneLine(out, 300)
			}
		}
		return what
	}
	return ""
}

// uninformativeLines are podman's words for a failure whose cause is on a
// line before them: "Error: ... container create failed (no logs from
// conmon): ..." follows the OCI runtime's own line ("error setting rlimit
// type 7: operation not permitted"), which is the reason to show.
var uninformativeLines = []string{"no logs from conmon"}

// uninformative reports whether a line of output names no cause of its own.
func uninformative(line string) bool {
	for _, u := range uninformativeLines {
		if strings.Contains(line, u) {
			return true
		}
	}
	return false
}

// oneLine folds white space and truncates s to n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}
