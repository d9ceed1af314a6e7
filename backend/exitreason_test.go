package backend

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExitReason(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, log, want string
	}{
		{"missing command", "sh: 1: no-such-tool: not found\n=== provider-agent: w ended: exit 127\n",
			"exit 127 (command not found): sh: 1: no-such-tool: not found"},
		{"not executable", "sh: 1: ./tool: Permission denied\n=== provider-agent: w ended: exit 126\n",
			"exit 126 (command not executable): sh: 1: ./tool: Permission denied"},
		{"signal, no output", "=== provider-agent: w ended: exit 0 (stopped: x)\n=== provider-agent: w ended: signal SIGKILL\n",
			"signal SIGKILL"},
		{"start failed", "=== provider-agent: start failed: exec: \"tool\": executable file not found in $PATH\n",
			"start failed: exec: \"tool\": executable file not found in $PATH"},
		{"last run only", "old output\n=== provider-agent: w ended: exit 3\nnew   output\n\n=== provider-agent: w ended: exit 1\n",
			"exit 1: new output"},
		{"no end line", "still running\n", ""},
		{"respawn started", "boom\n=== provider-agent: w ended: exit 1\n=== provider-agent: start w epoch 2 at 2026-11-23T09:00:00Z: [\"sh\" \"-c\" \"x\"]\n",
			"exit 1: boom"},
		{"empty", "", ""},
		{"podman: the OCI runtime's line, not conmon's", "=== provider-agent: start c epoch 1 at 2026-11-28T09:00:00Z: image localhost/bb:1 [\"sleep\" \"9\"]\n" +
			"error setting rlimit type 7: operation not permitted\n" +
			"Error: OCI runtime error: crun: container create failed (no logs from conmon): conmon bytes \"\": readObjectStart: expect { or n, but found \x00\n" +
			"=== provider-agent: c ended: exit 126\n",
			"exit 126 (command not executable): error setting rlimit type 7: operation not permitted"},
		{"only conmon's line", "Error: container create failed (no logs from conmon)\n=== provider-agent: c ended: exit 126\n",
			"exit 126 (command not executable)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".log")
			if err := os.WriteFile(p, []byte(tt.log), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := ExitReason(p); got != tt.want {
				t.Errorf("ExitReason(%q) = %q, want %q", tt.log, got, tt.want)
			}
		})
	}
	if got := ExitReason(filepath.Join(dir, "absent.log")); got != "" {
		t.Errorf("ExitReason(missing file) = %q, want empty", got)
	}
	// Only the tail of a long log is read.
	long := strings.Repeat("noise line\n", 20000) + "boom\n=== provider-agent: w ended: exit 2\n"
	p := filepath.Join(dir, "long.log")
	if err := os.WriteFile(p, []byte(long), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := ExitReason(p); got != "exit 2: boom" {
		t.Errorf("ExitReason(long log) = %q, want %q", got, "exit 2: boom")
	}
}

// TestAppendLogAfterAnOpenLine: a workload killed mid-line leaves no
// newline at its log's end; the end line the backend appends still starts
// a line of its own, so ExitReason reads it.
func TestAppendLogAfterAnOpenLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "w.log")
	if err := os.WriteFile(p, []byte("yyyyyyyy\nyyyy"), 0o600); err != nil {
		t.Fatal(err)
	}
	appendLog(p, logMarker+"w ended: signal SIGKILL (over workload_dir_max_mib)\n")
	if got := ExitReason(p); !strings.Contains(got, "workload_dir_max_mib") {
		t.Errorf("ExitReason after an open line = %q, want the end line's reason", got)
	}
	// After a complete line nothing is added before it.
	appendLog(p, logMarker+"w ended: exit 1\n")
	data, _ := os.ReadFile(p)
	if strings.Contains(string(data), "\n\n") {
		t.Errorf("log = %q: an empty line was added after a complete one", data)
	}
}
