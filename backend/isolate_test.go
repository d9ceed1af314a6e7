package backend

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"provideragent/backend/backendtest"
)

// sharedDir returns a directory every workload user may write (mode
// 1777), for the files a test's workloads write and the test reads: an
// isolated workload cannot write into t.TempDir(), which is root's alone.
func sharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "backend-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// reachableDir returns a directory for backend.workload_dir that workload
// users can reach (t.TempDir() is root's alone).
func reachableDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "backend-workloads-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: workloads run as other users only when the agent is root")
	}
}

// agentFiles is what a hostile workload goes after: a data dir as run
// makes it (0700) holding a key file and a database (0600), and the log
// dir inside it.
type agentFiles struct {
	dataDir, key, db, logDir string
	sums                     map[string][32]byte
}

func newAgentFiles(t *testing.T) *agentFiles {
	t.Helper()
	f := &agentFiles{dataDir: filepath.Join(t.TempDir(), "data")}
	f.key, f.db, f.logDir = filepath.Join(f.dataDir, "identity.key"), filepath.Join(f.dataDir, "provider-agent.db"), filepath.Join(f.dataDir, "logs")
	if err := os.Mkdir(f.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for path, body := range map[string]string{f.key: "nsec1secretsecretsecret\n", f.db: "SQLite format 3\x00 the agent's lease state"} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.sums = f.snapshot(t)
	return f
}

// snapshot hashes every file of the data dir (logs excepted: the
// workloads' own output goes there).
func (f *agentFiles) snapshot(t *testing.T) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	ents, err := os.ReadDir(f.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == "logs" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(f.dataDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = sha256.Sum256(data)
	}
	return out
}

// checkUnchanged: the data dir holds the same files with the same bytes.
func (f *agentFiles) checkUnchanged(t *testing.T) {
	t.Helper()
	now := f.snapshot(t)
	for name, sum := range f.sums {
		if now[name] != sum {
			t.Errorf("the workload changed %s in the data dir", name)
		}
	}
	for name := range now {
		if _, ok := f.sums[name]; !ok {
			t.Errorf("the workload created %s in the data dir", name)
		}
	}
}

// hostileLine is backendtest.HostileScript against f.
func hostileLine(f *agentFiles, agentPid int, victimCheckpoint, victimLog string) string {
	return backendtest.HostileScript(backendtest.Targets{DataDir: f.dataDir, Key: f.key, DB: f.db, AgentPid: agentPid,
		VictimCheckpoint: victimCheckpoint, VictimLog: victimLog})
}

// agentSecretEnv is set in the test binary's environment (TestMain): the
// agent's, which no isolated workload may see.
const agentSecretEnv = "AGENT_ONLY_SECRET"

// checkHostile is backendtest.CheckHostile with the agent's secret.
func checkHostile(t *testing.T, out string, allowed map[string][]string) {
	t.Helper()
	backendtest.CheckHostile(t, out, agentSecretEnv, allowed)
}

// TestIsolatedWorkloadReachesNothing: a hostile workload, run by a process
// backend with its defaults (isolation on), cannot read the agent's key
// file or database, write into its data dir, read another workload's
// checkpoint directory or log, or signal the agent or its supervisor: each
// attempt fails with EACCES or EPERM (ESRCH for the agent, which is not in
// the workload's PID namespace; EPERM without one), and the data dir is
// unchanged. The victim workload keeps its checkpoint.
func TestIsolatedWorkloadReachesNothing(t *testing.T) {
	needRoot(t)
	t.Parallel()
	for _, c := range []containCase{{"auto", ContainAuto, 0, ""}, {"none", ContainNone, 0, ""}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newAgentFiles(t)
			cfg := DefaultProcessConfig()
			cfg.StopGrace, cfg.LogDir, cfg.WorkloadDir, cfg.Containment = time.Second, f.logDir, reachableDir(t), c.mode
			b, err := NewProcess(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Close(context.Background()) })
			if iso := b.Isolation(); !iso.Active || iso.Warning != "" {
				t.Fatalf("Isolation() = %+v, want active without a warning", iso)
			}
			ctx := context.Background()
			victim := `echo "checkpoint $PROVIDER_AGENT_CHECKPOINT_DIR"; echo victim-secret > "$PROVIDER_AGENT_CHECKPOINT_DIR/secret"; echo ready; exec sleep 1000`
			if err := b.Start(ctx, StartSpec{WorkloadID: "victim", Epoch: 3, Command: ShellCommand(victim)}); err != nil {
				t.Fatal(err)
			}
			var ckpt string
			waitFor(t, "the victim's checkpoint", func() bool {
				data, _ := os.ReadFile(b.LogPath("victim"))
				for _, l := range strings.Split(string(data), "\n") {
					if p, ok := strings.CutPrefix(l, "checkpoint "); ok {
						ckpt = p
					}
				}
				return strings.Contains(string(data), "\nready\n")
			})
			if want := filepath.Join(b.iso.WorkloadDir, "victim", "checkpoint", "3"); ckpt != want {
				t.Errorf("the victim's PROVIDER_AGENT_CHECKPOINT_DIR = %q, want %q", ckpt, want)
			}
			if err := b.Start(ctx, StartSpec{WorkloadID: "hostile", Epoch: 1, Command: ShellCommand(hostileLine(f, os.Getpid(), ckpt, b.LogPath("victim")))}); err != nil {
				t.Fatal(err)
			}
			if e := nextExit(t, b); e.WorkloadID != "hostile" {
				t.Fatalf("exit %+v, want the hostile workload's", e)
			}
			out, _ := os.ReadFile(b.LogPath("hostile"))
			signalAgent := backendtest.ESRCH
			if c.mode == ContainNone {
				signalAgent = backendtest.EPERM
			}
			checkHostile(t, string(out), map[string][]string{
				"":             backendtest.EACCES,
				"signal-agent": signalAgent,
				// pid 1 is its supervisor (root) in a PID namespace, the
				// host's init without one.
				"signal-supervisor": backendtest.EPERM,
			})
			f.checkUnchanged(t)
			if data, err := os.ReadFile(filepath.Join(ckpt, "secret")); err != nil || string(data) != "victim-secret\n" {
				t.Errorf("the victim's checkpoint secret = %q, %v; want it as the victim wrote it", data, err)
			}
			if !b.Running("victim") {
				t.Errorf("the victim no longer runs")
			}
			t.Logf("hostile workload:\n%s", out)
		})
	}
}

// TestWorkloadUIDs: each workload runs as a uid of its own from the range,
// owns its home and checkpoint directories (0700), and keeps its uid in a
// backend started later on the same workload dir; with workload_user every
// workload runs as that user.
func TestWorkloadUIDs(t *testing.T) {
	needRoot(t)
	t.Parallel()
	dir := reachableDir(t)
	logs := filepath.Join(t.TempDir(), "logs")
	uidOf := func(b *Process, id string) (uid int, home string) {
		t.Helper()
		if err := b.Start(context.Background(), StartSpec{WorkloadID: id, Epoch: 1, Command: ShellCommand(`echo "uid $(id -u) gid $(id -g) groups $(id -G) home $HOME pwd $(pwd)"`)}); err != nil {
			t.Fatal(err)
		}
		nextExit(t, b)
		data, _ := os.ReadFile(b.LogPath(id))
		var gid, groups int
		var pwd string
		for _, l := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(l, "uid ") {
				_, _ = fmt.Sscanf(l, "uid %d gid %d groups %d home %s pwd %s", &uid, &gid, &groups, &home, &pwd)
			}
		}
		if gid != uid || groups != uid || pwd != home {
			t.Errorf("workload %s: %q, want gid and groups %d and pwd its home", id, data, uid)
		}
		var st syscall.Stat_t
		for _, d := range []string{home, filepath.Join(filepath.Dir(home), "checkpoint", "1")} {
			if err := syscall.Stat(d, &st); err != nil || int(st.Uid) != uid || st.Mode&0o777 != 0o700 {
				t.Errorf("%s: uid %d mode %o (%v), want uid %d mode 0700", d, st.Uid, st.Mode&0o777, err, uid)
			}
		}
		return uid, home
	}
	cfg := DefaultProcessConfig()
	cfg.LogDir, cfg.WorkloadDir = logs, dir
	cfg.Containment = ContainNone // about users, not containment: no probes
	cfg.WorkloadUIDs = UIDRange{First: 1900000100, Last: 1900000101}
	b, err := NewProcess(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	a1, _ := uidOf(b, "a")
	b1, _ := uidOf(b, "b")
	if a1 != 1900000100 || b1 != 1900000101 {
		t.Errorf("uids of workloads a, b = %d, %d, want 1900000100, 1900000101", a1, b1)
	}
	if err := b.Start(context.Background(), StartSpec{WorkloadID: "c", Command: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "every uid") {
		t.Errorf("Start of a third workload with two uids = %v, want the range exhausted", err)
	}
	_ = b.Close(context.Background())

	b2, err := NewProcess(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := uidOf(b2, "b"); got != b1 {
		t.Errorf("uid of b in a new backend = %d, want %d as before", got, b1)
	}
	_ = b2.Close(context.Background())

	cfg.WorkloadUser = "65534"
	b3, err := NewProcess(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b3.Close(context.Background())
	if got, _ := uidOf(b3, "d"); got != 65534 {
		t.Errorf("uid with workload_user 65534 = %d, want 65534", got)
	}
	if iso := b3.Isolation(); !strings.Contains(iso.Users, "65534") {
		t.Errorf("Isolation().Users = %q, want the configured user", iso.Users)
	}
	cfg.WorkloadUser = "0"
	if _, err := NewProcess(cfg, nil); err == nil {
		t.Errorf("NewProcess with workload_user root = nil error, want one")
	}
}

// TestUnprivilegedAgentCannotIsolate: an agent that is not root cannot run
// workloads as other users: with isolation on it says so at start and
// starts nothing (ErrNotIsolated, naming backend.isolation = none).
func TestUnprivilegedAgentCannotIsolate(t *testing.T) {
	needRoot(t)
	t.Parallel()
	const nobody = 65534
	dir := sharedDir(t)
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "backend.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir, helperLineEnv+"=true", helperModeEnv+"=auto,0,")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, _ := cmd.CombinedOutput()
	for _, want := range []string{"workloads are not isolated", "not root", "workload isolation not available", "backend.isolation = none"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("helper agent as uid %d: %q, want it to say %q", nobody, out, want)
		}
	}
}

// TestUnreachableWorkloadDirIsAnError: a workload dir below a directory
// others may not search (t.TempDir() here) is refused at start, naming it.
func TestUnreachableWorkloadDirIsAnError(t *testing.T) {
	needRoot(t)
	t.Parallel()
	cfg := DefaultProcessConfig()
	cfg.Containment = ContainNone
	cfg.WorkloadDir = filepath.Join(t.TempDir(), "workloads")
	_, err := NewProcess(cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "could not reach") {
		t.Errorf("NewProcess(workload dir in t.TempDir()) = %v, want an error saying workload users could not reach it", err)
	}
	cfg.Isolation = IsolateNone
	b, err := NewProcess(cfg, nil)
	if err != nil {
		t.Fatalf("NewProcess(isolation none) = %v, want nil", err)
	}
	defer b.Close(context.Background())
	if iso := b.Isolation(); iso.Active || !strings.Contains(iso.Warning, "unsafe") {
		t.Errorf("Isolation() with isolation none = %+v, want inactive with a warning", iso)
	}
}
