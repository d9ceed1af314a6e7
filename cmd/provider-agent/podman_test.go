package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"provideragent/agent"
	"provideragent/backend"
	"provideragent/backend/backendtest"
)

// podmanSection is the [backend] section of a podman agent: fastConfig's
// workload dir, this host's podman options, and stop_grace.
func podmanSection(t *testing.T, grace time.Duration) string {
	t.Helper()
	return fmt.Sprintf("kind = \"podman\"\nstop_grace = %q\npodman_run_args = [%s]\n", grace.String(), quoteList(backendtest.RunArgs))
}

// containerProcs lists the host pids of the processes that run workload
// id at epoch (found by the PROVIDER_AGENT_* variables of their
// environment, as a container's processes have them).
func containerProcs(id string, epoch uint64) []int {
	want := [][]byte{[]byte("PROVIDER_AGENT_WORKLOAD_ID=" + id), []byte("PROVIDER_AGENT_EPOCH=" + strconv.FormatUint(epoch, 10))}
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		all := true
		for _, w := range want {
			found := false
			for _, kv := range bytes.Split(env, []byte{0}) {
				found = found || bytes.Equal(kv, w)
			}
			all = all && found
		}
		// The container's, not its supervisor's (a provider-agent-shim).
		if comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm"); all && !strings.HasPrefix(string(comm), "provider-agent") && !strings.HasPrefix(string(comm), "exe") {
			out = append(out, pid)
		}
	}
	return out
}

// TestRunPodmanFailover is the failover with backend.kind =
// podman over the real binary: a primary and a standby, the grant naming
// an OCI image, published. kill -9 of the primary agent: its container is
// gone within stop_grace (sampled every 20 ms), and the standby's
// container of the same image starts only after that, at epoch 2. The
// container record the primary left is removed when it starts again
// (before its database opens).
func TestRunPodmanFailover(t *testing.T) {
	t.Parallel()
	image := backendtest.Busybox(t)
	const grace = 2 * time.Second
	// containerProcs finds a workload's processes by its id and epoch in
	// every process's environment: an id of this test's own, since other
	// tests run a "web-1" at epoch 2 beside it (CI counted one of theirs as
	// the standby's container, 2026-11-29).
	const id = "podman-failover"
	p := newPair(t)
	dirA, dirB, pubB, cfgA, cfgB := p.dirA, p.dirB, p.pubB, p.cfgA, p.cfgB
	appendTo(t, cfgA, podmanSection(t, grace)) // fastConfig ends in [backend]
	appendTo(t, cfgB, podmanSection(t, grace))
	t.Cleanup(func() {
		for _, d := range []string{dirA, dirB} {
			_, _ = backend.KillPodmanLeftovers(t.Context(), "podman", filepath.Join(d, "logs"), nil)
		}
	})
	must(t, nil, "workloads", "grant", "--config", cfgA, "--id", id, "--image", image,
		"--command", `echo "epoch $PROVIDER_AGENT_EPOCH up"; while :; do sleep 0.05; done`, "--standby", npubOf(t, pubB), "--publish")

	a := startRun(t, "--config", cfgA)
	b := startRun(t, "--config", cfgB)
	waitPrimaryAndStandby(t, a, b, id, 90*time.Second)
	var first []int
	deadline := time.Now().Add(60 * time.Second)
	for len(first) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no process of the primary's container (epoch 1) within 60 s")
		}
		time.Sleep(50 * time.Millisecond)
		first = containerProcs(id, 1)
	}

	a.kill(t)
	killed := time.Now()
	var gone, started time.Duration
	for started == 0 {
		now := time.Since(killed)
		old, second := anyRunning(first), containerProcs(id, 2)
		if old && len(second) > 0 {
			t.Fatalf("%v after kill -9 of the primary, its container (%v) and the standby's (%v) both run", now, first, second)
		}
		if !old && gone == 0 {
			gone = now
		}
		if old && now > grace {
			t.Fatalf("the primary's container %v still runs %v after kill -9 of its agent, want it gone within stop_grace (%v)", first, now, grace)
		}
		if len(second) > 0 {
			started = now
		}
		if now > 120*time.Second {
			t.Fatalf("the standby's container did not start within 120 s of the kill")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("after kill -9 of the primary agent: its container gone after %v, the standby's started after %v",
		gone.Round(time.Millisecond), started.Round(time.Millisecond))
	st := b.waitStatus(t, id+" live on the standby at epoch 2", 30*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, id)
		return ok && w.State == "live" && w.Epoch == 2 && w.Running
	})
	if w, _ := workloadIn(st, id); w.Primary != pubB {
		t.Errorf("holder after the failover = %s, want the standby %s", w.Primary, pubB)
	}
	// podman run may still be creating the container when the supervisor
	// reports it started (seconds on a loaded machine): wait for it to run
	// and print its line.
	var out []byte
	var log []byte
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, err = exec.Command("podman", "ps", "--filter", "label="+backend.PodmanLabelWorkload+"="+id,
			"--filter", "label="+backend.PodmanLabelEpoch+"=2", "--format", "{{.Image}}").Output()
		log, _ = os.ReadFile(filepath.Join(dirB, "logs", id+".log"))
		if (err == nil && strings.TrimSpace(string(out)) == image && strings.Contains(string(log), "epoch 2 up")) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || strings.TrimSpace(string(out)) != image {
		t.Errorf("image of the standby's running container = %q (%v), want %s", out, err, image)
	}
	if !strings.Contains(string(log), "epoch 2 up") {
		t.Errorf("the standby's container log lacks its line at epoch 2 after 30 s:\n%s", log)
	}
	// The primary's container record is left (its processes died with
	// their supervisor); its next run removes it before the database opens.
	again := startRun(t, "--config", cfgA)
	if !strings.Contains(again.stderr.String(), "removed containers left by a previous agent") {
		t.Errorf("the restarted primary's log does not say it removed its leftover container:\n%s", again.stderr.String())
	}
	again.stop(t)
	b.stop(t)
}

// anyRunning reports whether any of pids runs.
func anyRunning(pids []int) bool {
	for _, p := range pids {
		if running(p) {
			return true
		}
	}
	return false
}
