package backend

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// helperEnv makes the test binary act as an agent that starts the workload
// line in helperLineEnv and then waits to be killed.
const (
	helperEnv     = "BACKEND_TEST_AGENT_HELPER"
	helperLineEnv = "BACKEND_TEST_AGENT_LINE"
)

func TestMain(m *testing.M) {
	RunShimIfRequested()
	if dir := os.Getenv(helperEnv); dir != "" {
		os.Exit(runHelperAgent(dir, os.Getenv(helperLineEnv)))
	}
	os.Exit(m.Run())
}

func runHelperAgent(dir, line string) int {
	b, err := NewProcess(ProcessConfig{StopGrace: time.Second, LogDir: filepath.Join(dir, "logs")}, nil)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	if err := b.Start(context.Background(), StartSpec{WorkloadID: "w", Command: ShellCommand(line)}); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("started")
	time.Sleep(time.Minute)
	return 0
}

// recordPid is a shell command that appends its own pid to file and then
// becomes argv (exec, same pid).
func recordPid(file, argv string) string {
	return `sh -c 'echo $$ >> ` + file + `; exec ` + argv + `'`
}

// readPids waits until file lists n pids and returns them.
func readPids(t *testing.T, file string, n int) []int {
	t.Helper()
	var pids []int
	waitFor(t, fmt.Sprintf("%d pids in %s", n, file), func() bool {
		data, _ := os.ReadFile(file)
		pids = pids[:0]
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return len(pids) >= n
	})
	return pids
}

// TestWorkloadTreeDiesWithKilledAgent runs an agent in a child process
// with a workload of each shape a shell line can take, kills the agent
// with SIGKILL, and checks that every process of the workload dies with
// it, without any later agent's help: a shell pipeline (the shell forks
// each element: grandchildren of the agent), and a double fork whose
// setsid'ed daemon leaves the shell's session and is reparented.
func TestWorkloadTreeDiesWithKilledAgent(t *testing.T) {
	tests := []struct {
		name string
		line func(pids string) string
		n    int // processes that record their pid
	}{
		{"pipeline", func(pids string) string {
			return `echo $$ >> ` + pids + `; ` + recordPid(pids, "sleep 1000") + ` | ` + recordPid(pids, "cat")
		}, 3},
		{"double fork", func(pids string) string {
			return `(setsid ` + recordPid(pids, "sleep 1000") + ` &); echo $$ >> ` + pids + `; ` + recordPid(pids, "sleep 1000")
		}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "pids")
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+dir, helperLineEnv+"="+tt.line(pidFile))
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, _ := bufio.NewReader(out).ReadString('\n')
			if strings.TrimSpace(line) != "started" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("helper agent said %q, want started", line)
			}
			pids := readPids(t, pidFile, tt.n)
			marker, _ := markerFor(filepath.Join(dir, "logs"))
			t.Cleanup(func() { killOurs(pids, marker) })
			for _, pid := range pids {
				if !alive(pid) {
					t.Fatalf("workload process %d is not running before the kill", pid)
				}
			}
			if err := cmd.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
			cmd.Wait()
			waitFor(t, "every workload process to die with the agent", func() bool {
				for _, pid := range pids {
					if alive(pid) {
						return false
					}
				}
				return true
			})
		})
	}
}

// killOurs SIGKILLs those of pids that still run with the marker in their
// environment (cleanup of a failed test; a pid alone may have been reused).
func killOurs(pids []int, marker string) {
	for _, pid := range pids {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err == nil && hasEnvEntry(env, []byte(MarkerEnv+"="+marker)) {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
	}
}
