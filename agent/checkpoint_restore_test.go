package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/checkpoint"
	"provideragent/heartbeat"
	"provideragent/internal/devblossom"
	"provideragent/internal/devblossom/devblossomtest"
	"provideragent/internal/logcapture"
	"provideragent/internal/relaytest"
	"provideragent/lease"
	"provideragent/uploader"
)

// TestRestoreCountedAsTheMachineActs: a restore attempt that fails is
// counted as the machine then acts: fresh for a best-effort workload (it
// starts from nothing, as docs/durable.md says), failed for a required
// one (the attempt is retried). (The step agent's backend gives no
// checkpoint directory: every attempt fails.)
func TestRestoreCountedAsTheMachineActs(t *testing.T) {
	for _, c := range []struct {
		mode lease.RestoreMode
		want string
	}{{lease.RestoreBestEffort, "fresh"}, {lease.RestoreRequired, "failed"}} {
		t.Run(string(c.mode), func(t *testing.T) {
			a := newStepAgent(t, stepOpts{pool: &recPool{}})
			e := lease.RestoreCheckpoint{ID: "w1", Epoch: 2, Attempt: 1, Mode: c.mode, Timeout: 2 * time.Second}
			if err := commitEffects(context.Background(), a, time.Now(), e); err != nil {
				t.Fatal(err)
			}
			a.claims.wg.Wait()
			for _, r := range RestoreResults {
				want := 0.0
				if r == c.want {
					want = 1
				}
				if got := testutil.ToFloat64(a.obs.met.restores.WithLabelValues(r)); got != want {
					t.Errorf("agent_checkpoint_restores_total{result=%q} = %v, want %v", r, got, want)
				}
			}
		})
	}
}

// TestBadCopyCountedPerServer: a durable workload's checkpoints are on
// two dev-blossom servers; one then serves its manifest with a byte
// changed. Putting that checkpoint back (as a restarted run does) takes
// the manifest from the other server, and the agent says which server
// served wrong bytes: a WARN and
// agent_checkpoint_blobs_refused_total{server,reason="hash_mismatch"}.
func TestBadCopyCountedPerServer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workloads run as users of their own: needs root")
	}
	t.Parallel()
	var servers []string
	var dirs []string
	for range 2 {
		dir := t.TempDir()
		s := devblossomtest.Start(t, devblossom.Options{Dir: dir})
		servers, dirs = append(servers, s.URL()), append(dirs, dir)
	}
	_, shared := durableFixtures(t)
	_, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	logs := logcapture.New(slog.LevelWarn)
	holder := startAgent(t, agentOpts{name: "holder", lcfg: lcfg, blossom: servers, logger: slog.New(logs)})
	spec := soloSpec("bc1", holder.pub)
	spec.Relays, spec.Quorum = lcfg.Relays, lcfg.M
	spec.Command = []string{"sh", "-c", counterScript(filepath.Join(shared, "starts"))}
	spec.Checkpoint = &lease.CheckpointPolicy{Servers: servers}
	holder.a.Track(context.Background(), spec)
	waitFor(t, 20*time.Second, "a checkpoint published on both servers", func() bool {
		pub, ok := holder.a.ckpt.publisher.Last("bc1")
		return ok && len(pub.Servers) == 2
	})
	pub, _ := holder.a.ckpt.publisher.Last("bc1")
	path := filepath.Join(dirs[0], pub.Manifest)
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	body[len(body)/2] ^= 0x01
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := holder.a.ckpt.restorer.PlaceURI(context.Background(), "bc1", pub.StateURI, nil, nil, checkpoint.Dir{Path: dir, UID: os.Getuid(), GID: os.Getgid()}); err != nil {
		t.Fatalf("PlaceURI with one good copy = %v, want the checkpoint placed", err)
	}
	bad := uploader.ServerKey(servers[0])
	if got := testutil.ToFloat64(holder.a.obs.met.badCopies.WithLabelValues(bad, checkpoint.RefuseHashMismatch)); got != 1 {
		t.Errorf("agent_checkpoint_blobs_refused_total{server=%q,reason=hash_mismatch} = %v, want 1", bad, got)
	}
	if got := testutil.ToFloat64(holder.a.obs.met.badCopies.WithLabelValues(uploader.ServerKey(servers[1]), checkpoint.RefuseHashMismatch)); got != 0 {
		t.Errorf("the good server counted %v bad copies, want 0", got)
	}
	lines := logs.Find("checkpoint blob refused: the server served wrong bytes")
	if len(lines) != 1 || lines[0].String("server") != bad || lines[0].String("blob") != pub.Manifest || lines[0].String("workload") != "bc1" {
		t.Errorf("WARN lines %+v, want one naming %s, the manifest %s and bc1", lines, bad, pub.Manifest)
	}
}

// TestStartCancelsTheRestoreInFlight: a best-effort restore still running
// at provision_timeout (its restore_timeout is longer) is ended by the
// machine, which starts the workload; the start cancels the attempt, so
// that nothing it fetches is placed once the workload runs. The three
// relays answer record queries 2 minutes late: the attempt would go on
// for most of its minute; it ends with the start, at the demo's 5 s
// provision timeout.
func TestStartCancelsTheRestoreInFlight(t *testing.T) {
	t.Parallel()
	slow := []string{"--query-delay", "2m", "--query-delay-kinds", strconv.Itoa(heartbeat.KindCheckpoint)}
	var urls []string
	for range 3 {
		urls = append(urls, relaytest.Start(t, slow...).URL())
	}
	lcfg := lease.DemoConfig(urls)
	logs := logcapture.New(slog.LevelWarn)
	ag := startAgent(t, agentOpts{name: "solo", lcfg: lcfg, logger: slog.New(logs)})
	spec := soloSpec("w1", ag.pub)
	spec.Relays, spec.Quorum = lcfg.Relays, lcfg.M
	spec.Checkpoint = &lease.CheckpointPolicy{Servers: []string{"http://127.0.0.1:9"}, Restore: lease.RestoreBestEffort, RestoreTimeout: time.Minute}
	ag.a.Track(context.Background(), spec)
	ag.waitState("w1", lease.StateLive, 1, lcfg.ProvisionTimeout+15*time.Second)
	live := time.Now()
	waitFor(t, 15*time.Second, "the restore attempt ended by the start", func() bool {
		return len(logs.Find("checkpoint restore failed")) > 0
	})
	t.Logf("the attempt ended %v after the workload went live: %v", time.Since(live).Round(time.Millisecond), logs.Find("checkpoint restore failed")[0])
}
