package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"provideragent/lease"
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
		{"empty", "", ""},
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

func TestWorkloadView(t *testing.T) {
	const a, b, c = "aaaa", "bbbb", "cccc"
	spec := lease.Spec{ID: "w", Primary: a, Standbys: []string{b, c}}
	tests := []struct {
		name         string
		holder, self string
		state        lease.State
		want         []string
		none         bool
		role         string
	}{
		{"before failover, on the primary", a, a, lease.StateLive, []string{b, c}, false, "primary"},
		{"before failover, on a standby", a, b, lease.StateStandby, []string{b, c}, false, "standby"},
		{"after failover to b", b, b, lease.StateLive, []string{c}, false, "primary"},
		{"read from the database", b, "", lease.StateLive, []string{c}, false, ""},
	}
	for _, tt := range tests {
		w := lease.WorkloadSnapshot{Spec: spec, State: tt.state, Holder: tt.holder, Epoch: 2}
		got := WorkloadView(w, tt.self, true)
		if !slices.Equal(got.Standbys, tt.want) || got.NoStandby != tt.none || got.Role != tt.role || got.Primary != tt.holder {
			t.Errorf("%s: WorkloadView = standbys %v no_standby %v role %q holder %s, want %v %v %q %s",
				tt.name, got.Standbys, got.NoStandby, got.Role, got.Primary, tt.want, tt.none, tt.role, tt.holder)
		}
	}
	one := lease.WorkloadSnapshot{Spec: lease.Spec{ID: "w", Primary: a, Standbys: []string{b}}, State: lease.StateLive, Holder: b}
	if got := WorkloadView(one, b, true); len(got.Standbys) != 0 || !got.NoStandby {
		t.Errorf("WorkloadView(only standby now holds it) = standbys %v no_standby %v, want none left, no_standby", got.Standbys, got.NoStandby)
	}
	solo := lease.WorkloadSnapshot{Spec: lease.Spec{ID: "w", Primary: a}, State: lease.StateLive, Holder: a}
	if got := WorkloadView(solo, a, true); got.NoStandby {
		t.Errorf("WorkloadView(lease without standbys) no_standby = true, want false (there never was one)")
	}
}
