package backendtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Targets are what a hostile workload goes after.
type Targets struct {
	// DataDir, Key and DB are the agent's data dir, key file and database.
	DataDir, Key, DB string
	// AgentPid is the agent's pid (as the host names it).
	AgentPid int
	// VictimCheckpoint and VictimLog are another workload's checkpoint
	// directory (holding a file "secret") and log file, as the host names
	// them.
	VictimCheckpoint, VictimLog string
}

// Attempts is how many attempts HostileScript makes.
const Attempts = 11

// HostileScript is a shell line (for sh or busybox sh) that tries, each
// in turn, to read the key file and the database, write into the data dir
// and the database, read the other workload's checkpoint directory and
// log, read the agent's environment, reach the host's root through pid 1
// (its supervisor, in a PID namespace), and signal the agent and pid 1. It
// prints one line per attempt, "ATTEMPT <what> failed: <error>" or
// "ATTEMPT <what> SUCCEEDED: <output>", then "IDS <uid> <gid> <groups>",
// its environment ("ENV ..." lines) and "DONE".
func HostileScript(tg Targets) string {
	attempts := [][2]string{
		{"read-key", "cat " + tg.Key},
		{"read-db", "cat " + tg.DB},
		{"write-data-dir", "echo pwned > " + filepath.Join(tg.DataDir, "pwned")},
		{"write-db", "echo pwned >> " + tg.DB},
		{"list-victim-checkpoint", "ls " + tg.VictimCheckpoint},
		{"read-victim-checkpoint", "cat " + filepath.Join(tg.VictimCheckpoint, "secret")},
		{"read-victim-log", "cat " + tg.VictimLog},
		{"read-agent-environ", "cat /proc/" + strconv.Itoa(tg.AgentPid) + "/environ"},
		{"host-root-via-pid1", "ls /proc/1/root/"},
		{"signal-agent", "kill -KILL " + strconv.Itoa(tg.AgentPid)},
		{"signal-supervisor", "kill -KILL 1"},
	}
	var b strings.Builder
	b.WriteString(`try() { if out=$(eval "$2" 2>&1); then echo "ATTEMPT $1 SUCCEEDED: $out"; else echo "ATTEMPT $1 failed: $out"; fi; }; `)
	for _, a := range attempts {
		b.WriteString("try " + a[0] + " '" + a[1] + "'; ")
	}
	b.WriteString(`echo "IDS $(id -u) $(id -g) $(id -G)"; env | sed 's/^/ENV /'; echo DONE`)
	return b.String()
}

// Errors an attempt may fail with, for CheckHostile's allowed lists.
var (
	// EACCES and EPERM as sh, coreutils and busybox print them.
	EACCES = []string{"Permission denied"}
	EPERM  = []string{"Operation not permitted"}
	// ESRCH: a signal to a process outside the workload's PID namespace.
	ESRCH = []string{"No such process"}
	// ENOENT: inside a container, where no path of the host exists.
	ENOENT = []string{"No such file or directory", "nonexistent directory"}
)

// CheckHostile reads HostileScript's output: every attempt failed, with
// one of the errors allowed[what] (allowed[""] for the others), the
// environment variable secretEnv (set in the agent's environment) did not
// reach the workload, and it ran neither as root nor as the test's user.
func CheckHostile(t testing.TB, out, secretEnv string, allowed map[string][]string) {
	t.Helper()
	if !strings.Contains(out, "\nDONE") {
		t.Fatalf("the hostile workload did not finish: %q", out)
	}
	n := 0
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, "ATTEMPT ")
		if !ok {
			continue
		}
		n++
		what, result, _ := strings.Cut(rest, " ")
		if !strings.HasPrefix(result, "failed: ") {
			t.Errorf("hostile workload: %s", line)
			continue
		}
		want := allowed[what]
		if want == nil {
			want = allowed[""]
		}
		found := false
		for _, w := range want {
			found = found || strings.Contains(result, w)
		}
		if !found {
			t.Errorf("hostile workload: %s: want it refused with one of %q", line, want)
		}
	}
	if n != Attempts {
		t.Errorf("hostile workload made %d attempts, want %d:\n%s", n, Attempts, out)
	}
	if secretEnv != "" && strings.Contains(out, secretEnv) {
		t.Errorf("the agent's environment (%s) reached the workload:\n%s", secretEnv, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if ids, ok := strings.CutPrefix(line, "IDS "); ok {
			for _, id := range strings.Fields(ids) {
				if id == "0" || id == strconv.Itoa(os.Getuid()) {
					t.Errorf("the workload runs with id %s (ids %s), the agent's or root's", id, ids)
				}
			}
		}
	}
}
