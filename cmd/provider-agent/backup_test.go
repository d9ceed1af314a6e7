package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"provideragent/agent"
)

// TestRestoredBackupDoesNotRunTheOldEpoch is "Backup and restore" of
// docs/operations.md over the real binary: a primary and a standby (as
// TestStatusAfterFailover sets them up); the primary's database is backed
// up while it runs and holds web-1 at epoch 1 (provider-agent backup:
// mode 0600, no overwrite); the primary is killed and the standby takes
// over at epoch 2. The backup is then restored on the former primary as
// the runbook says (agent stopped, the copy put in place, its -wal and
// -shm removed) and the agent started on it: the database says it holds
// web-1 live at epoch 1, but the agent waits for its relays and sees epoch
// 2, so it never starts web-1 again (its log has the one start of epoch
// 1) and stands by for the new holder, which keeps it live.
func TestRestoredBackupDoesNotRunTheOldEpoch(t *testing.T) {
	t.Parallel()
	p := newPair(t)
	tmp, dirA, pubB, cfgA, cfgB := p.tmp, p.dirA, p.pubB, p.cfgA, p.cfgB
	must(t, nil, "workloads", "grant", "--config", cfgA, "--id", "web-1", "--command", "sleep 7414",
		"--standby", npubOf(t, pubB), "--publish")
	a := startRun(t, "--config", cfgA)
	b := startRun(t, "--config", cfgB)
	waitPrimaryAndStandby(t, a, b, "web-1", 90*time.Second)

	backup := filepath.Join(tmp, "backup.db")
	r := must(t, nil, "backup", "--config", cfgA, "--out", backup)
	if !strings.Contains(r.stdout, "1 workloads; integrity ok") {
		t.Errorf("backup = %q, want the copy checked with its one workload", r.stdout)
	}
	if st, err := os.Stat(backup); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	if r := cli(t, nil, "backup", "--config", cfgA, "--out", backup); r.code != 1 || !strings.Contains(r.stderr, "refusing to overwrite") {
		t.Errorf("backup over an existing file = exit %d %q, want a refusal", r.code, r.stderr)
	}

	a.kill(t)
	b.waitStatus(t, "web-1 live at epoch 2 on the standby", 120*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "web-1")
		return ok && w.State == "live" && w.Primary == pubB && w.Epoch == 2 && w.Running
	})

	// Restore, as docs/operations.md says: the agent is stopped (killed
	// here), the copy replaces the database, its -wal and -shm go.
	db := filepath.Join(dirA, "provider-agent.db")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(db + suffix); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	restored := must(t, nil, "workloads", "list", "--config", cfgA)
	if !strings.Contains(restored.stdout, "live") {
		t.Fatalf("the restored database = %q, want web-1 live at epoch 1 as when it was backed up", restored.stdout)
	}

	a = startRun(t, "--config", cfgA)
	a.waitStatus(t, "web-1 a standby of epoch 2 on the restored former primary", 90*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "web-1")
		return ok && w.State == "standby" && w.Epoch == 2 && w.Primary == pubB && !w.Running
	})
	// A while longer: the old epoch never starts.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		st, err := a.fetchStatus()
		if w, ok := workloadIn(st, "web-1"); err == nil && ok && (w.Running || w.Epoch < 2) {
			t.Fatalf("the restored former primary runs web-1 (or went back to epoch %d): %+v", w.Epoch, w)
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, err := os.ReadFile(filepath.Join(dirA, "logs", "web-1.log"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), "=== provider-agent: start web-1 "); n != 1 || !strings.Contains(string(log), "start web-1 epoch 1 ") {
		t.Errorf("the former primary's web-1 log has %d starts, want only the one of epoch 1 before the failover:\n%s", n, log)
	}
	if st, err := b.fetchStatus(); err != nil {
		t.Error(err)
	} else if w, _ := workloadIn(st, "web-1"); w.State != "live" || w.Epoch != 2 || !w.Running {
		t.Errorf("the holder after the restore = %+v, want web-1 live at epoch 2, running", w)
	}
	a.stop(t)
	b.stop(t)
}
