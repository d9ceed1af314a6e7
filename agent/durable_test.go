package agent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/checkpoint"
	"provideragent/identity"
	"provideragent/internal/cutproxy"
	"provideragent/internal/devblossom"
	"provideragent/internal/devblossom/devblossomtest"
	"provideragent/internal/relaytest"
	"provideragent/lease"
	"provideragent/uploader/uploadertest"
)

// counterScript is the durable test workload: it resumes from its
// checkpoint (0 without one), says where it started in starts, counts
// every 10 ms and checkpoints every 20 counts as the contract says
// (another name, then a rename onto checkpoint), and once more on
// SIGTERM, saying so ("final epoch value").
func counterScript(starts string) string {
	return `d=$PROVIDER_AGENT_CHECKPOINT_DIR; n=$(cat "$d/checkpoint" 2>/dev/null || echo 0)
echo "$PROVIDER_AGENT_EPOCH $n" >> ` + starts + `
trap 'echo "$n" > "$d/checkpoint.tmp" && mv "$d/checkpoint.tmp" "$d/checkpoint"; echo "final $PROVIDER_AGENT_EPOCH $n" >> ` + starts + `; exit 0' TERM
i=0
while :; do
  n=$((n + 1)); i=$((i + 1))
  if [ $((i % 20)) -eq 0 ]; then echo "$n" > "$d/checkpoint.tmp" && mv "$d/checkpoint.tmp" "$d/checkpoint"; fi
  sleep 0.01
done`
}

// startsAt reads the value the counter started from at epoch (ok false:
// not started at that epoch yet).
func startsAt(t testing.TB, path string, epoch uint64) (int, bool) {
	t.Helper()
	return counterLine(path, "%d %d", epoch)
}

// counterLine finds the counter's line of the given format ("%d %d":
// epoch and value) for epoch in its file.
func counterLine(path, format string, epoch uint64) (int, bool) {
	data, _ := os.ReadFile(path)
	for _, l := range strings.Split(string(data), "\n") {
		var e uint64
		var n int
		if _, err := fmt.Sscanf(l, format, &e, &n); err == nil && e == epoch {
			return n, true
		}
	}
	return 0, false
}

// publishedValue reads back the counter value of a published checkpoint
// from Blossom, opening it with key (nil: a plaintext one).
func publishedValue(t testing.TB, pub checkpoint.Published, key *checkpoint.Key) int {
	t.Helper()
	var b bytes.Buffer
	r := &checkpoint.Restorer{Blobs: checkpoint.HTTPBlobs{}}
	if err := r.ReadURI(context.Background(), pub.Workload, pub.StateURI, key, pub.Servers, &b); err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(b.String()))
	if err != nil {
		t.Fatalf("published checkpoint %q: %v", b.String(), err)
	}
	return n
}

// TestDurableFailover: a durable workload (a counter checkpointing every
// 200 ms) runs on the primary, whose new checkpoints are published on a
// dev-blossom server and the relays. The primary is cut off from two of
// three relays: it fences itself (SIGTERM), its revocation names the last
// checkpoint it published, and the standby restores it before it starts
// epoch 2: its first value is at least the last one published.
func TestDurableFailover(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workloads run as users of their own: needs root")
	}
	t.Parallel()
	blobs, shared := durableFixtures(t)
	starts := filepath.Join(shared, "starts")

	rs, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	proxies, dial := cutProxies(t, rs, urls, 2)
	primary := startAgent(t, agentOpts{name: "primary", lcfg: lcfg, dial: dial, blossom: []string{blobs.URL()}})
	standby := startAgent(t, agentOpts{name: "standby", lcfg: lcfg, blossom: []string{blobs.URL()}})
	spec := warmSpec("d1", primary.pub, standby.pub, lcfg.Relays)
	spec.Command = []string{"sh", "-c", counterScript(starts)}
	spec.Checkpoint = &lease.CheckpointPolicy{Restore: lease.RestoreRequired, RestoreTimeout: 3 * time.Second}
	ctx := context.Background()
	primary.a.Track(ctx, spec)
	standby.a.Track(ctx, spec)
	primary.waitState("d1", lease.StateLive, 1, 15*time.Second)
	if n, ok := startsAt(t, starts, 1); !ok || n != 0 {
		waitFor(t, 10*time.Second, "the counter started at epoch 1", func() bool { _, ok := startsAt(t, starts, 1); return ok })
	}
	waitFor(t, 20*time.Second, "three checkpoints published by the primary", func() bool {
		return testutil.ToFloat64(primary.a.obs.met.ckptPublished.WithLabelValues("published")) >= 3
	})
	primary.waitListedOnQuorum("d1", 10*time.Second)

	cut := time.Now()
	for _, p := range proxies {
		p.Cut()
	}
	standby.waitState("d1", lease.StateLive, 2, 40*time.Second)
	waitFor(t, 10*time.Second, "the counter started at epoch 2", func() bool { _, ok := startsAt(t, starts, 2); return ok })
	first, _ := startsAt(t, starts, 2)
	last, ok := primary.a.ckpt.publisher.Last("d1")
	if !ok {
		t.Fatal("the primary published nothing")
	}
	lastValue := publishedValue(t, last, nil)
	t.Logf("cut to standby Live at epoch 2: %v; primary's last published checkpoint: seq %d value %d (taken %v before the cut); standby's first value %d",
		time.Since(cut).Round(time.Millisecond), last.Seq, lastValue, cut.Sub(last.TakenAt).Round(time.Millisecond), first)
	if first < lastValue {
		t.Errorf("standby resumed from %d, below the last published checkpoint %d", first, lastValue)
	}
	if got := testutil.ToFloat64(standby.a.obs.met.restores.WithLabelValues("restored")); got < 1 {
		t.Errorf("standby restores restored = %v, want >= 1", got)
	}
	var row WorkloadStatus
	waitFor(t, 5*time.Second, "the standby's /status row of d1 restored, standing on a checkpoint", func() bool {
		for _, w := range standby.a.Status().Workloads {
			if w.ID == "d1" {
				row = w
			}
		}
		return row.Restore == string(lease.RestoreDone) && strings.HasPrefix(row.Checkpoint, "blossom:")
	})
	t.Logf("standby's /status row: restore %s (%s), checkpoint %s", row.Restore, row.RestoreWhy, row.Checkpoint)
	rev, ok := primary.log.find(func(e Event) bool { return e.Kind == "revocation" && e.Workload == "d1" })
	if !ok {
		t.Errorf("the primary queued no revocation")
	} else {
		t.Logf("revocation: %s", rev.Detail)
	}
}

// finalAt reads the value the counter checkpointed on SIGTERM at epoch.
func finalAt(t testing.TB, path string, epoch uint64) (int, bool) {
	t.Helper()
	return counterLine(path, "final %d %d", epoch)
}

// TestDurableMove: workloads move of a durable workload: the primary
// stops the counter (which checkpoints on SIGTERM), publishes that final
// checkpoint, and hands over naming it; the standby restores it and
// resumes exactly there (RPO 0).
func TestDurableMove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workloads run as users of their own: needs root")
	}
	t.Parallel()
	primary, standby, starts := durablePair(t, "m1")
	ctx := context.Background()
	// Checkpoints every 200 ms: the oldest published one is never much
	// older (the gauge is set once a second).
	waitFor(t, 5*time.Second, "agent_checkpoint_age_seconds in (0, 2)", func() bool {
		age := testutil.ToFloat64(primary.a.obs.met.ckptAge)
		return age > 0 && age < 2
	})
	seq, err := QueueMove(ctx, primary.a.data.db, "m1", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	moved := time.Now()
	standby.waitState("m1", lease.StateLive, 2, 30*time.Second)
	waitFor(t, 10*time.Second, "the counter started at epoch 2", func() bool { _, ok := startsAt(t, starts, 2); return ok })
	rto := time.Since(moved)
	final, ok := finalAt(t, starts, 1)
	if !ok {
		t.Fatalf("the counter wrote no final checkpoint at epoch 1")
	}
	first, _ := startsAt(t, starts, 2)
	cmds, err := ListCommands(ctx, primary.a.data.db, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		if c.Seq == seq {
			t.Logf("move command: %s", c.Result)
			if !strings.HasPrefix(c.Result, "moved") {
				t.Errorf("move result = %q, want moved", c.Result)
			}
		}
	}
	t.Logf("move -> standby's counter started at epoch 2 after %v; the primary's final value %d, the standby's first %d", rto.Round(time.Millisecond), final, first)
	if first != final {
		t.Errorf("the standby resumed from %d, want the primary's final value %d (nothing lost)", first, final)
		for _, e := range append(primary.log.snapshot(), standby.log.snapshot()...) {
			if e.Kind == "checkpoint" || e.Kind == "restore" || e.Kind == "move" || e.Kind == "revocation" || e.Kind == "stop" {
				t.Logf("%s %s %s: %s", e.Time.Format("15:04:05.000"), e.Agent, e.Kind, e.Detail)
			}
		}
	}
}

// TestRevocationNamesTheLedgersCheckpointAfterARestart: the checkpoint an
// epoch last stood on is in the agent's database: an agent restarted on
// it still names that checkpoint in the epoch's revocation (and nothing
// for another epoch, or the same epoch of a re-grant; the grant's own
// state_uri for a workload without a checkpoint policy).
func TestRevocationNamesTheLedgersCheckpointAfterARestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agent.db")
	key := nostr.GeneratePrivateKey()
	first := newStepAgent(t, stepOpts{key: key, dbPath: path})
	uri := "blossom:" + strings.Repeat("ab", 32) + ".json?xs=http://b.example"
	grantAt := time.Now().Add(-time.Hour).Truncate(time.Second)
	first.ckpt.published(ctx, checkpoint.Published{Workload: "d1", GrantAt: grantAt, Epoch: 3, Seq: 7, EventID: strings.Repeat("cd", 32), StateURI: uri, CreatedAt: time.Now()})
	_ = first.out.courier.Close()

	again := newStepAgent(t, stepOpts{key: key, dbPath: path})
	durable := lease.Spec{ID: "d1", StateURI: "blossom:grant-seed.bin", Checkpoint: &lease.CheckpointPolicy{}, CreatedAt: grantAt}
	regranted := durable
	regranted.CreatedAt = grantAt.Add(time.Minute)
	for _, c := range []struct {
		e    lease.Effect
		spec lease.Spec
		want string
	}{
		{lease.PublishRevocation{ID: "d1", Epoch: 3}, durable, uri},
		{lease.PublishRevocation{ID: "d1", Epoch: 4}, durable, ""},
		{lease.PublishRevocation{ID: "d1", Epoch: 3}, regranted, ""},
		{lease.PublishRevocation{ID: "d1", Epoch: 3, StateURI: "blossom:final.json"}, durable, "blossom:final.json"},
		{lease.PublishRevocation{ID: "d1", Epoch: 3}, lease.Spec{ID: "d1", StateURI: "blossom:grant-seed.bin"}, "blossom:grant-seed.bin"},
	} {
		if got := again.ckpt.revocationStateURI(c.e, c.spec); got != c.want {
			t.Errorf("revocationStateURI(%v, checkpoint policy %v) = %q, want %q", c.e, c.spec.Checkpoint != nil, got, c.want)
		}
	}
}

// durablePair starts a primary and a standby (demo timings, three relays,
// a dev-blossom server) of the durable counter id, waits until the
// primary published two checkpoints and is listed on quorum, and returns
// them with the counter's log.
func durablePair(t testing.TB, id string) (primary, standby *testAgent, starts string) {
	d := startDurable(t, id, 0, lease.DemoConfig)
	return d.primary, d.standby, d.starts
}

// durableSetup is a durable counter on a primary and a standby.
type durableSetup struct {
	primary, standby *testAgent
	starts           string
	proxies          []*cutproxy.Proxy // between the primary and its first relays
	// key is the grant's checkpoint key: the primary, as the grant's
	// issuer, sealed it to both (the standby trusts it as issuer).
	key *checkpoint.Key
}

// startDurable is durablePair with the primary reaching its first cut
// relays through proxies that can cut it off.
func startDurable(t testing.TB, id string, cut int, profile func([]string) lease.Config) *durableSetup {
	t.Helper()
	return startDurableScript(t, id, cut, profile, counterScript)
}

// startDurableScript is startDurable with the workload script(starts).
func startDurableScript(t testing.TB, id string, cut int, profile func([]string) lease.Config, script func(starts string) string) *durableSetup {
	t.Helper()
	blobs, shared := durableFixtures(t)
	d := &durableSetup{starts: filepath.Join(shared, "starts")}
	rs, urls := relaytest.StartN(t, 3)
	lcfg := profile(urls)
	var dial map[string]string
	if cut > 0 {
		d.proxies, dial = cutProxies(t, rs, urls, cut)
	}
	d.primary = startAgent(t, agentOpts{name: "primary", lcfg: lcfg, dial: dial, blossom: []string{blobs.URL()}})
	d.standby = startAgent(t, agentOpts{name: "standby", lcfg: lcfg, blossom: []string{blobs.URL()}, issuers: []string{d.primary.pub}})
	t.Cleanup(func() {
		if t.Failed() { // the timelines say where a move or a failover stopped
			d.primary.log.dump(t, "primary")
			d.standby.log.dump(t, "standby")
		}
	})
	spec := warmSpec(id, d.primary.pub, d.standby.pub, lcfg.Relays)
	spec.Command = []string{"sh", "-c", script(d.starts)}
	spec.Checkpoint = &lease.CheckpointPolicy{Restore: lease.RestoreRequired, RestoreTimeout: 3 * time.Second}
	spec.Checkpoint.Keys, d.key = sealedKey(t, d.primary, spec)
	ctx := context.Background()
	d.primary.a.Track(ctx, spec)
	d.standby.a.Track(ctx, spec)
	d.primary.waitState(id, lease.StateLive, 1, lcfg.ProvisionTimeout+10*time.Second)
	waitFor(t, 20*time.Second, "two checkpoints published by the primary", func() bool {
		return testutil.ToFloat64(d.primary.a.obs.met.ckptPublished.WithLabelValues("published")) >= 2
	})
	d.primary.waitListedOnQuorum(id, 3*lcfg.HeartbeatInterval+10*time.Second)
	return d
}

// TestDurableDrain: a drain moves the durable workload away with nothing
// lost, leaves the others running, and says so on /status until undone.
func TestDurableDrain(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workloads run as users of their own: needs root")
	}
	t.Parallel()
	primary, standby, starts := durablePair(t, "dr1")
	ctx := context.Background()
	primary.a.Track(ctx, soloSpec("plain", primary.pub))
	primary.waitState("plain", lease.StateLive, 1, 15*time.Second)
	seq, err := QueueDrain(ctx, primary.a.data.db, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	standby.waitState("dr1", lease.StateLive, 2, 30*time.Second)
	waitFor(t, 10*time.Second, "the counter started at epoch 2", func() bool { _, ok := startsAt(t, starts, 2); return ok })
	final, _ := finalAt(t, starts, 1)
	if first, _ := startsAt(t, starts, 2); first != final {
		t.Errorf("after the drain the counter resumed from %d, want its final value %d", first, final)
	}
	// The drain's result says it moves dr1, then, once the primary hears
	// the standby hold it at epoch 2, that it is over (drain --wait).
	var result string
	waitFor(t, 30*time.Second, "the drain's result saying its move is over", func() bool {
		cmds, _ := ListCommands(ctx, primary.a.data.db, false)
		for _, c := range cmds {
			if c.Seq == seq {
				result = c.Result
			}
		}
		return strings.HasPrefix(result, DrainedPrefix)
	})
	t.Logf("drain: %s", result)
	if !strings.Contains(result, "moved 1, each held by its successor: [dr1]") || !strings.Contains(result, "plain") || !DrainMovedAll(result) {
		t.Errorf("drain result %q, want dr1 moved and held by its successor, plain left running", result)
	}
	// The status rows, not the machine: the machine goroutine owns it.
	var dr1 WorkloadStatus
	for _, w := range primary.a.Status().Workloads {
		if w.ID == "dr1" {
			dr1 = w
		}
	}
	if dr1.State != string(lease.StateStandby) || dr1.Epoch != 2 {
		t.Errorf("after the drain dr1 is %q at epoch %d on the primary, want standby at epoch 2", dr1.State, dr1.Epoch)
	}
	if !primary.a.Status().Draining || !primary.backend.Running("plain") {
		t.Errorf("while draining: /status draining %v, plain running %v; want both", primary.a.Status().Draining, primary.backend.Running("plain"))
	}
	if _, err := QueueDrain(ctx, primary.a.data.db, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the drain undone", func() bool { return !primary.a.Status().Draining })
}

// TestCheckpointNeverDelaysAStop: a checkpoint stuck uploading to a slow
// Blossom server does not hold up the workload's stop (a release here):
// the stop cancels the publish, which is abandoned, never announced. (A
// move is refused first: no standby is alive.)
func TestCheckpointNeverDelaysAStop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workloads run as users of their own: needs root")
	}
	t.Parallel()
	slow := uploadertest.NewServer(t)
	slow.SlowPuts(8 * time.Second) // the server's Close waits for it
	shared, err := os.MkdirTemp("", "durable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	_, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	primary := startAgent(t, agentOpts{name: "primary", lcfg: lcfg, blossom: []string{slow.URL}})
	absent, _ := nostr.GetPublicKey(nostr.GeneratePrivateKey()) // a standby that never runs
	spec := warmSpec("s1", primary.pub, absent, lcfg.Relays)
	spec.Command = []string{"sh", "-c", counterScript(filepath.Join(shared, "starts"))}
	spec.Checkpoint = &lease.CheckpointPolicy{Servers: []string{slow.URL}}
	ctx := context.Background()
	primary.a.Track(ctx, spec)
	primary.waitState("s1", lease.StateLive, 1, 15*time.Second)
	waitFor(t, 10*time.Second, "a checkpoint upload in flight", func() bool { return slow.MaxPutsInFlight() >= 1 })
	// Its standby never runs: a move is refused, and nothing stops.
	seq, err := QueueMove(ctx, primary.a.data.db, "s1", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the move refused", func() bool {
		cmds, _ := ListCommands(ctx, primary.a.data.db, false)
		for _, c := range cmds {
			if c.Seq == seq && strings.Contains(c.Result, "no standby alive") {
				return true
			}
		}
		return false
	})
	if !primary.backend.Running("s1") {
		t.Fatalf("a refused move stopped the workload")
	}
	if _, err := QueueRelease(ctx, primary.a.data.db, "s1", time.Now()); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	waitFor(t, 10*time.Second, "the workload stopped", func() bool {
		_, ok := primary.log.find(func(e Event) bool { return e.Kind == "stop" && e.Workload == "s1" })
		return ok && !primary.backend.Running("s1")
	})
	took := time.Since(released)
	t.Logf("release to stopped: %v, with an upload held for 8 s", took.Round(time.Millisecond))
	if took > 4*time.Second {
		t.Errorf("the stop took %v: it waited for the checkpoint upload", took)
	}
	waitFor(t, 10*time.Second, "the publish abandoned", func() bool {
		return testutil.ToFloat64(primary.a.obs.met.ckptPublished.WithLabelValues("abandoned")) >= 1
	})
	if got := testutil.ToFloat64(primary.a.obs.met.ckptPublished.WithLabelValues("published")); got != 0 {
		t.Errorf("checkpoints published = %v, want 0", got)
	}
}

// TestDurableHolderRestart: the holder's agent restarts. On a persistent
// workload dir the counter, stopped with the agent (checkpointing on
// SIGTERM), resumes from that local checkpoint at the same epoch; on a
// temporary one (gone with the agent) the run's last published checkpoint
// is put back before the start, so it resumes from that, not from zero.
// Either way the next record continues the epoch's seq (the ledger).
func TestDurableHolderRestart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workloads run as users of their own: needs root")
	}
	for _, persistent := range []bool{true, false} {
		t.Run(fmt.Sprintf("persistent=%v", persistent), func(t *testing.T) {
			t.Parallel()
			holderRestart(t, persistent, false)
		})
	}
	// A required workload whose published checkpoint cannot be fetched
	// when its holder restarts without its local one (Blossom down): the
	// start fails instead of starting from nothing, which would publish
	// its fresh state over the good checkpoint.
	t.Run("required, blossom down", func(t *testing.T) {
		t.Parallel()
		holderRestart(t, false, true)
	})
}

func holderRestart(t *testing.T, persistent, blossomDown bool) {
	blobs, shared := durableFixtures(t)
	wdir := ""
	if persistent {
		var err error
		if wdir, err = os.MkdirTemp("", "durable-workloads-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(wdir) })
		if err := os.Chmod(wdir, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	starts := filepath.Join(shared, "starts")
	_, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	key, dbPath := nostr.GeneratePrivateKey(), filepath.Join(t.TempDir(), "holder.db")
	opts := agentOpts{name: "holder", key: key, dbPath: dbPath, lcfg: lcfg, blossom: []string{blobs.URL()}, workloadDir: wdir}
	holder := startAgent(t, opts)
	absent, _ := nostr.GetPublicKey(nostr.GeneratePrivateKey())
	spec := warmSpec("r1", holder.pub, absent, lcfg.Relays)
	spec.Command = []string{"sh", "-c", counterScript(starts)}
	spec.Checkpoint = &lease.CheckpointPolicy{}
	if blossomDown {
		spec.Checkpoint = &lease.CheckpointPolicy{Restore: lease.RestoreRequired, RestoreTimeout: 2 * time.Second}
	}
	holder.a.Track(context.Background(), spec)
	holder.waitState("r1", lease.StateLive, 1, 15*time.Second)
	waitFor(t, 20*time.Second, "two checkpoints published", func() bool {
		return testutil.ToFloat64(holder.a.obs.met.ckptPublished.WithLabelValues("published")) >= 2
	})
	holder.stop()
	before, ok := holder.a.ckpt.publisher.Last("r1")
	if !ok {
		t.Fatal("nothing published before the restart")
	}
	final, ok := finalAt(t, starts, 1)
	if !ok {
		t.Fatal("the counter wrote no checkpoint when the agent stopped it")
	}
	want := final // the local checkpoint
	if !persistent {
		want = publishedValue(t, before, nil)
	}
	if blossomDown {
		if err := blobs.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		again := startAgent(t, opts)
		waitFor(t, 30*time.Second, "the start reported failed (r1 respawning or failed)", func() bool {
			_, ok := again.log.find(func(e Event) bool {
				return e.Kind == "state" && e.Workload == "r1" && (e.State == string(lease.StateRespawning) || e.State == string(lease.StateFailed))
			})
			return ok
		})
		if _, failed := again.log.find(func(e Event) bool {
			return e.Kind == "state" && e.Workload == "r1" && e.State == string(lease.StateFailed)
		}); !failed {
			waitFor(t, 30*time.Second, "a respawn attempted", func() bool { return testutil.ToFloat64(again.a.obs.met.respawns) >= 1 })
			time.Sleep(3 * time.Second) // the respawn's own recovery (2 s) ran out
		}
		if got := startsOf(starts, 1); len(got) != 1 {
			t.Fatalf("the counter's starts at epoch 1 = %v, want only the first: a required workload must not start from nothing", got)
		}
		return
	}

	again := startAgent(t, opts)
	again.waitState("r1", lease.StateLive, 1, 20*time.Second)
	var resumed []int
	waitFor(t, 10*time.Second, "the counter started again", func() bool {
		resumed = startsOf(starts, 1)
		return len(resumed) >= 2
	})
	t.Logf("starts at epoch 1: %v; stopped at %d, last published %d", resumed, final, want)
	if len(resumed) != 2 || resumed[1] != want || want == 0 {
		t.Fatalf("the counter's starts at epoch 1 = %v, want 0 then %d", resumed, want)
	}
	waitFor(t, 20*time.Second, "a checkpoint published after the restart", func() bool {
		return testutil.ToFloat64(again.a.obs.met.ckptPublished.WithLabelValues("published")) >= 1
	})
	after, _ := again.a.ckpt.publisher.Last("r1")
	if after.Epoch != 1 || after.Seq <= before.Seq {
		t.Errorf("after the restart the holder published epoch %d seq %d, want epoch 1 and a seq above %d", after.Epoch, after.Seq, before.Seq)
	}
}

// startsOf lists the values the counter started from at epoch, in order.
func startsOf(path string, epoch uint64) []int {
	var out []int
	data, _ := os.ReadFile(path)
	for _, l := range strings.Split(string(data), "\n") {
		var e uint64
		var n int
		if _, err := fmt.Sscanf(l, "%d %d", &e, &n); err == nil && e == epoch {
			out = append(out, n)
		}
	}
	return out
}

// durableFixtures starts a dev-blossom server and makes a directory every
// workload user may write (where the counter logs its starts), both removed
// when t ends.
func durableFixtures(t testing.TB) (*devblossom.Server, string) {
	t.Helper()
	blobs := devblossomtest.Start(t, devblossom.Options{})
	shared, err := os.MkdirTemp("", "durable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(shared) })
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	return blobs, shared
}

// sealedKey makes a checkpoint key for spec's grant, sealed to its
// members by issuer (as 'workloads grant' does with the key file), and
// returns the grant's keys and the key.
func sealedKey(t testing.TB, issuer *testAgent, spec lease.Spec) (map[string]string, *checkpoint.Key) {
	t.Helper()
	keys, err := identity.NewKeys(issuer.key)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := checkpoint.NewGrantKey(keys, checkpoint.GrantMembers(spec.Primary, spec.Standbys))
	if err != nil {
		t.Fatal(err)
	}
	key, err := checkpoint.OpenGrantKey(keys, sealed, []string{issuer.pub})
	if err != nil {
		t.Fatal(err)
	}
	return sealed, &key
}
