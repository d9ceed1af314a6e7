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

// helperEnv makes the test binary act as an agent that starts one workload
// and then waits to be killed.
const helperEnv = "BACKEND_TEST_AGENT_HELPER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		os.Exit(runHelperAgent(dir))
	}
	os.Exit(m.Run())
}

func runHelperAgent(dir string) int {
	b, err := NewProcess(ProcessConfig{StopGrace: time.Second, LogDir: filepath.Join(dir, "logs")}, nil)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	// The workload's shell forks a grandchild, which Pdeathsig does not
	// cover: only the reaping by the next incarnation does.
	line := `sleep 60 & echo $! > ` + filepath.Join(dir, "grandchild") + `; echo $$ > ` + filepath.Join(dir, "child") + `; wait`
	if err := b.Start(context.Background(), StartSpec{WorkloadID: "w", Command: ShellCommand(line)}); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("started")
	time.Sleep(time.Minute)
	return 0
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitFor(t, path, func() bool {
		data, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	})
	return pid
}

// TestAgentKilledWithSIGKILL runs an agent in a child process, kills it with
// SIGKILL, and checks that its workload dies with it and that the next
// agent on the same data kills the orphaned grandchild.
func TestAgentKilledWithSIGKILL(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
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
	child := readPid(t, filepath.Join(dir, "child"))
	grandchild := readPid(t, filepath.Join(dir, "grandchild"))
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	cmd.Wait()
	waitFor(t, "the workload to die with its agent", func() bool { return !alive(child) })
	if !alive(grandchild) {
		t.Fatal("grandchild died with the agent; this test needs it to survive until the reaping")
	}

	// The restarted agent kills the orphan before it starts anything.
	b := newTestDir(t, filepath.Join(dir, "logs"))
	waitFor(t, "the orphaned grandchild to be killed", func() bool { return !alive(grandchild) })
	if b.Running("w") {
		t.Error("Running(w) in the new backend = true, want false")
	}
}
