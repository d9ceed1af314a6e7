package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/agent"
	"provideragent/checkpoint"
	"provideragent/config"
	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/internal/devblossom"
	"provideragent/internal/devblossom/devblossomtest"
	"provideragent/internal/relaytest"
	"provideragent/relay"
)

// counterLine is the durable test workload (a counter): it
// resumes from its checkpoint (0 without one), appends "epoch value" to
// starts when it starts, counts every 10 ms and checkpoints every 100
// counts (about a second) the contract's way: another name, then a rename
// onto checkpoint; on SIGTERM it checkpoints once more and appends "final
// epoch value".
func counterLine(starts string) string {
	return `d=$PROVIDER_AGENT_CHECKPOINT_DIR; n=$(cat "$d/checkpoint" 2>/dev/null || echo 0); ` +
		`echo "$PROVIDER_AGENT_EPOCH $n" >> ` + starts + `; ` +
		`trap 'echo "$n" > "$d/checkpoint.tmp" && mv "$d/checkpoint.tmp" "$d/checkpoint"; echo "final $PROVIDER_AGENT_EPOCH $n" >> ` + starts + `; exit 0' TERM; i=0; ` +
		`while :; do n=$((n + 1)); i=$((i + 1)); ` +
		`if [ $((i % 100)) -eq 0 ]; then echo "$n" > "$d/checkpoint.tmp" && mv "$d/checkpoint.tmp" "$d/checkpoint"; fi; ` +
		`sleep 0.01; done`
}

// startValue is the value the counter started from at epoch.
func startValue(path string, epoch uint64) (int, bool) { return counterLog(path, "%d %d", epoch) }

// finalValue is the value the counter checkpointed on SIGTERM at epoch.
func finalValue(path string, epoch uint64) (int, bool) { return counterLog(path, "final %d %d", epoch) }

func counterLog(path, format string, epoch uint64) (int, bool) {
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

// waitValue waits for a counter log line of epoch.
func waitValue(t *testing.T, read func(string, uint64) (int, bool), path string, epoch uint64, what string) int {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if n, ok := read(path, epoch); ok {
			return n
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(path)
			t.Fatalf("%s at epoch %d: not in the counter's log within 20 s:\n%s", what, epoch, data)
		}
	}
}

// metricValue reads one sample of a metric from a /metrics URL (-1: none).
func metricValue(t *testing.T, url, sample string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(l, sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// lastPublished reads the newest checkpoint record holder published for
// workload at epoch from the relays, and the counter value it holds from
// Blossom, opened with the checkpoint key of the workload's grant (which
// holder issued, and keyFile holds holder's secret for).
func lastPublished(t *testing.T, relays []string, holder, keyFile, workload string, epoch uint64) (*heartbeat.CheckpointRecord, int) {
	t.Helper()
	cfg := relay.DefaultConfig()
	cfg.URLs = relays
	pool, err := relay.New(cfg, relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var key *checkpoint.Key
	secret, err := config.LoadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := identity.NewKeys(secret)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range pool.Query(ctx, nostr.Filter{Kinds: []int{heartbeat.KindLeaseGrant}, Authors: []string{holder}, Tags: nostr.TagMap{"d": {heartbeat.LeaseDTag(workload)}}}) {
		for i := range r.Events {
			g, err := heartbeat.DecodeLeaseGrant(&r.Events[i])
			if err != nil || g.Spec.Checkpoint == nil {
				continue
			}
			k, err := checkpoint.OpenGrantKey(keys, g.Spec.Checkpoint.Keys, []string{holder})
			if err != nil {
				t.Fatalf("the grant's checkpoint key: %v", err)
			}
			key = &k
		}
	}
	if key == nil {
		t.Fatalf("no grant of %s with a checkpoint key by %s on the relays", workload, holder)
	}
	var newest *heartbeat.CheckpointRecord
	for _, r := range pool.Query(ctx, checkpoint.RecordsFilter(workload, epoch, nil, []string{holder})) {
		for i := range r.Events {
			rec, err := heartbeat.DecodeCheckpointRecord(&r.Events[i])
			if err != nil || rec.Epoch != epoch {
				continue
			}
			if newest == nil || rec.Seq > newest.Seq {
				newest = rec
			}
		}
	}
	if newest == nil {
		t.Fatalf("no checkpoint record of %s epoch %d by %s on the relays", workload, epoch, holder)
	}
	var b bytes.Buffer
	r := &checkpoint.Restorer{Blobs: checkpoint.HTTPBlobs{}}
	if err := r.ReadURI(ctx, workload, newest.StateURI, key, newest.Servers, &b); err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(b.String()))
	if err != nil {
		t.Fatalf("checkpoint %q: %v", b.String(), err)
	}
	return newest, n
}

// durablePair is two real agents on relays, a primary and its standby,
// the counter workload granted durable by the primary (with the given
// restore flags and checkpoint servers), its starts logged to starts.
type durablePair struct {
	a, b       *runChild
	cfgA, cfgB string
	pubA, pubB string
	keyA       string // the primary's key file: it issued the grant
	starts     string
}

// requiredRestore are the grant's restore flags of most durable tests:
// the counter may not start without its checkpoint.
var requiredRestore = []string{"--restore", "required", "--restore-timeout", "3s"}

// startDurablePair starts it and returns once the primary published four
// checkpoints.
func startDurablePair(t *testing.T, tmp string, relays, restore []string, servers ...string) *durablePair {
	t.Helper()
	d := &durablePair{starts: filepath.Join(sharedDir(t), "starts")}
	dirA, dirB := filepath.Join(tmp, "primary"), filepath.Join(tmp, "standby")
	d.keyA = filepath.Join(dirA, "identity.key")
	d.pubA = newKey(t, d.keyA)
	d.pubB = newKey(t, filepath.Join(dirB, "identity.key"))
	d.cfgA = fastConfig(t, tmp, dirA, "127.0.0.1:0", relays, 2)
	d.cfgB = fastConfig(t, tmp, dirB, "127.0.0.1:0", relays, 2, npubOf(t, d.pubA))
	args := []string{"workloads", "grant", "--config", d.cfgA, "--id", "ctr", "--command", counterLine(d.starts),
		"--standby", npubOf(t, d.pubB), "--publish"}
	args = append(args, restore...)
	for _, s := range servers {
		args = append(args, "--checkpoint-server", s)
	}
	must(t, nil, args...)
	d.a = startRun(t, "--config", d.cfgA)
	d.b = startRun(t, "--config", d.cfgB)
	waitPrimaryAndStandby(t, d.a, d.b, "ctr", 90*time.Second)
	published := `agent_checkpoints_published_total{outcome="published"}`
	for deadline := time.Now().Add(30 * time.Second); metricValue(t, d.a.metricsURL(), published) < 4; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the primary published %v checkpoints in 30 s, want 4", metricValue(t, d.a.metricsURL(), published))
		}
	}
	return d
}

// TestDurableKill9AndMove (the durable workload end to end): two real
// agents, three relays, a dev-blossom server and the counter workload,
// granted durable by the primary (published, trusted by the standby).
// The primary publishes a checkpoint about every second. kill -9 of the
// primary: the standby takes over, restores the newest checkpoint the
// primary published and starts the counter from it: its first value is
// at least the last published one. The former primary then rejoins as
// the standby and `workloads move` hands the counter back: it resumes at
// exactly the value it checkpointed on SIGTERM. The test logs RPO and RTO
// of both.
func TestDurableKill9AndMove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workloads run as users of their own: needs root")
	}
	t.Parallel()
	tmp := t.TempDir()
	var relays []string
	for range 3 {
		relays = append(relays, relaytest.Start(t).URL())
	}
	blobs := devblossomtest.Start(t, devblossom.Options{Dir: filepath.Join(tmp, "blobs")})
	d := startDurablePair(t, tmp, relays, requiredRestore, blobs.URL())
	a, b, cfgA, cfgB, pubA, starts := d.a, d.b, d.cfgA, d.cfgB, d.pubA, d.starts
	a.kill(t)
	killed := time.Now()
	rec, lastValue := lastPublished(t, relays, pubA, d.keyA, "ctr", 1)
	b.waitStatus(t, "ctr live on the standby at epoch 2", 120*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "ctr")
		return ok && w.State == "live" && w.Epoch == 2 && w.Running
	})
	first := waitValue(t, startValue, starts, 2, "the counter's start")
	rto := time.Since(killed)
	t.Logf("kill -9 -> standby's counter started at epoch 2 after %v (RTO, incl. up to 20 ms polling); the primary's last published checkpoint: seq %d, value %d, taken %v before the kill; the standby started from %d",
		rto.Round(time.Millisecond), rec.Seq, lastValue, killed.Sub(rec.TakenAt).Round(time.Millisecond), first)
	if first < lastValue {
		t.Errorf("the standby resumed from %d, below the primary's last published checkpoint %d", first, lastValue)
	}
	if first == 0 {
		t.Errorf("the standby started fresh")
	}
	metricsB := b.metricsURL()
	if got := metricValue(t, metricsB, `agent_checkpoint_restores_total{result="restored"}`); got < 1 {
		t.Errorf("standby agent_checkpoint_restores_total{result=restored} = %v, want >= 1", got)
	}

	// The former primary comes back as the standby of epoch 2; then a
	// planned move hands the counter back to it with nothing lost.
	a = startRun(t, "--config", cfgA)
	a.waitStatus(t, "ctr a standby of epoch 2 on the former primary", 90*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "ctr")
		return ok && w.State == "standby" && w.Epoch == 2
	})
	b.waitStatus(t, "the holder sees its standby alive", 60*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "ctr")
		return ok && w.State == "live" && !w.NoStandby
	})
	time.Sleep(2 * time.Second) // a heartbeat listing ctr on quorum: the revocation carries quorum_at
	moved := time.Now()
	res := must(t, nil, "workloads", "move", "ctr", "--config", cfgB, "--wait")
	t.Logf("workloads move: %s", strings.TrimSpace(res.stdout))
	a.waitStatus(t, "ctr live on the former primary at epoch 3", 60*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "ctr")
		return ok && w.State == "live" && w.Epoch == 3 && w.Running
	})
	resumed := waitValue(t, startValue, starts, 3, "the counter's start")
	moveRTO := time.Since(moved)
	final := waitValue(t, finalValue, starts, 2, "the counter's final checkpoint")
	t.Logf("workloads move -> the counter started at epoch 3 after %v (RTO); epoch 2's final value %d, epoch 3 started from %d",
		moveRTO.Round(time.Millisecond), final, resumed)
	if resumed != final {
		t.Errorf("after the move the counter resumed from %d, want epoch 2's final value %d (RPO 0)", resumed, final)
	}
}
