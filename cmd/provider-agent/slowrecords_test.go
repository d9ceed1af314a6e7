package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"provideragent/agent"
	"provideragent/heartbeat"
	"provideragent/internal/devblossom"
	"provideragent/internal/devblossom/devblossomtest"
	"provideragent/internal/relaytest"
)

// TestMoveRestoresTheHintFromSlowRelays is the planned move that lost its
// final state in the fleet benchmark at 48 providers, with the real
// binary: two real agents, three relays, a dev-blossom server, the counter
// granted durable with a best-effort restore. Two of the three relays
// answer checkpoint-record queries 6 s late (--query-delay: relays under
// load that take and forward events but answer stored queries slowly), so
// the successor's record query (2 s, min(publish_timeout, claim_timeout/2))
// hears one relay where it needs N-M+1 = 2. `workloads move` on the
// primary: the successor restores the state_uri of the primary's
// revocation without its record and resumes at exactly the value the
// primary checkpointed on SIGTERM (RPO 0). Before the restorer took the
// hint without records, every try failed for want of relays and the
// best-effort attempt started the counter from 0. Run with a
// restore_timeout below provision_timeout (5 s) and above it: above it,
// the first holder's restore (epoch 1, the records unread as well) was
// handed on unrun at provision_timeout, and by every next holder, the
// epochs climbing and nobody running the counter; it now starts without a
// checkpoint, as a best-effort restore that timed out does.
func TestMoveRestoresTheHintFromSlowRelays(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workloads run as users of their own: needs root")
	}
	t.Parallel()
	for _, timeout := range []string{"4s", "8s"} {
		t.Run("restore_timeout="+timeout, func(t *testing.T) {
			t.Parallel()
			moveFromSlowRelays(t, timeout)
		})
	}
}

// moveFromSlowRelays runs the test with the grant's restore timeout. One
// longer than provision_timeout (5 s) is ended by the primary's machine,
// which starts the counter of epoch 1 without a checkpoint: the start
// cancels the attempt still in flight (it says "context canceled", where
// its own deadline would say "deadline exceeded" 2 s later), so that
// nothing it fetches is placed under the running counter.
func moveFromSlowRelays(t *testing.T, restoreTimeout string) {
	tmp := t.TempDir()
	slow := []string{"--query-delay", "6s", "--query-delay-kinds", strconv.Itoa(heartbeat.KindCheckpoint)}
	relays := []string{relaytest.Start(t, slow...).URL(), relaytest.Start(t, slow...).URL(), relaytest.Start(t).URL()}
	blobs := devblossomtest.Start(t, devblossom.Options{Dir: filepath.Join(tmp, "blobs")})
	d := startDurablePair(t, tmp, relays, []string{"--restore", "best-effort", "--restore-timeout", restoreTimeout}, blobs.URL())
	if rt, _ := time.ParseDuration(restoreTimeout); rt > demoTimings.ProvisionTimeout {
		ended := ""
		for _, l := range strings.Split(d.a.stderr.String(), "\n") {
			if strings.Contains(l, `msg="checkpoint restore failed"`) && strings.Contains(l, "epoch=1 ") {
				ended = l
			}
		}
		if !strings.Contains(ended, "context canceled") {
			t.Errorf("the primary's restore of epoch 1 ended %q, want it cancelled by the counter's start at provision_timeout", ended)
		}
	}

	moved := time.Now()
	res := must(t, nil, "workloads", "move", "ctr", "--config", d.cfgA, "--wait")
	t.Logf("workloads move: %s", strings.TrimSpace(res.stdout))
	st := d.b.waitStatus(t, "ctr live on the successor at epoch 2", 60*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "ctr")
		return ok && w.State == "live" && w.Epoch == 2 && w.Running
	})
	resumed := waitValue(t, startValue, d.starts, 2, "the counter's start")
	took := time.Since(moved)
	final := waitValue(t, finalValue, d.starts, 1, "the counter's final checkpoint")
	w, _ := workloadIn(st, "ctr")
	t.Logf("workloads move -> the counter started at epoch 2 after %v; epoch 1's final value %d, epoch 2 started from %d; restore: %s (%s)",
		took.Round(time.Millisecond), final, resumed, w.Restore, w.RestoreWhy)
	if resumed != final {
		t.Errorf("after the move the counter resumed from %d, want epoch 1's final value %d (RPO 0)", resumed, final)
	}
	if !strings.Contains(w.RestoreWhy, "without its record") {
		t.Errorf("restore_why = %q, want the revocation's state_uri restored without its record (the slow relays' records unread)", w.RestoreWhy)
	}
}
