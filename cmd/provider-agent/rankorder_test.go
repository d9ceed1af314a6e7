package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"provideragent/agent"
	"provideragent/internal/cutproxy"
	"provideragent/internal/relaytest"
)

// TestStandbysClaimInRankOrderRealRelays is props'
// TestStandbysClaimInRankOrder with the real binary and real relays: a
// primary A and two standbys, B (rank 0) and C (rank 1), on three relays;
// B and C reach every relay through proxies that delay what the relays
// send them (Delay). Until A is killed, B hears everything 3 s late (so it
// counts A's silence from 3 s after C does); after A's last beat reached
// C, C hears everything 3 s late too (so B's claim reaches it 3 s after it
// was published). Both delays are within relay_delay (4 s). With a rank
// stagger of claim_retry_base alone (1 s here) C fell due before B's claim
// reached it, and both claimed; with claim_retry_base + 2 x relay_delay
// (9 s) C sees B's claim first and stands by: B publishes the only claim
// and wins it at the first try.
func TestStandbysClaimInRankOrderRealRelays(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	relays, urls := relaytest.StartN(t, 3)
	proxies := func() map[int]*cutproxy.Proxy {
		ps := map[int]*cutproxy.Proxy{}
		for i, r := range relays {
			ps[i] = proxyTo(t, r)
		}
		return ps
	}
	toB, toC := proxies(), proxies()
	delay := func(ps map[int]*cutproxy.Proxy, d time.Duration) {
		for _, p := range ps {
			p.Delay(d)
		}
	}
	// The takeover floor: t1+t2+stale+max_skew+relay_delay+1s = 20 s.
	lt := leaseTimings{T1: 3 * time.Second, T2: 5 * time.Second, Stale: 6 * time.Second, MaxSkew: time.Second,
		RelayDelay: 4 * time.Second, ProvisionTimeout: 8 * time.Second, TakeoverAfter: 22 * time.Second, Heartbeat: 3 * time.Second}
	const late = 3 * time.Second // each delay, within relay_delay
	dirA, dirB, dirC := filepath.Join(tmp, "a"), filepath.Join(tmp, "b"), filepath.Join(tmp, "c")
	pubA := newKey(t, filepath.Join(dirA, "identity.key"))
	pubB := newKey(t, filepath.Join(dirB, "identity.key"))
	pubC := newKey(t, filepath.Join(dirC, "identity.key"))
	cfgA := timedConfig(t, lt, tmp, dirA, "127.0.0.1:0", urls, 2)
	cfgB := timedConfig(t, lt, tmp, dirB, "127.0.0.1:0", urls, 2, npubOf(t, pubA))
	cfgC := timedConfig(t, lt, tmp, dirC, "127.0.0.1:0", urls, 2, npubOf(t, pubA))
	for _, cfg := range []string{cfgB, cfgC} {
		// The relays' OKs come back late too: wait for them (a claim's
		// publish waits min(publish_timeout, claim_timeout/2)).
		replaceIn(t, cfg, `publish_timeout = "2s"`, `publish_timeout = "8s"`)
		replaceIn(t, cfg, `claim_timeout = "5s"`, `claim_timeout = "16s"`)
	}
	appendTo(t, cfgA, "stop_grace = \"2s\"\n")
	appendTo(t, cfgB, "stop_grace = \"2s\"\n"+dialVia(urls, toB)+"\n[log]\nlevel = \"debug\"\n")
	appendTo(t, cfgC, "stop_grace = \"2s\"\n"+dialVia(urls, toC)+"\n[log]\nlevel = \"debug\"\n")
	out := filepath.Join(sharedDir(t), "writes.txt")
	must(t, nil, "workloads", "grant", "--config", cfgA, "--id", "w1", "--command", appendLoop(out, "w1"),
		"--standby", npubOf(t, pubB), "--standby", npubOf(t, pubC), "--publish")

	a := startRun(t, "--config", cfgA)
	b := startRun(t, "--config", cfgB)
	c := startRun(t, "--config", cfgC)
	waitPrimaryAndStandby(t, a, b, "w1", 60*time.Second)
	waitPrimaryAndStandby(t, a, c, "w1", 60*time.Second)
	delay(toB, late)
	time.Sleep(2 * lt.Heartbeat) // B's view of A is now 3 s behind C's
	killed := time.Now()
	a.kill(t)
	time.Sleep(late) // A's last beat reached B too
	delay(toC, late)

	b.waitStatus(t, "w1 live at epoch 2 on B", 2*time.Minute, func(st agent.Status) bool {
		w, ok := workloadIn(st, "w1")
		return ok && w.State == "live" && w.Epoch == 2 && w.Running
	})
	c.waitStatus(t, "C following B at epoch 2", 30*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "w1")
		return ok && w.State == "standby" && w.Epoch == 2
	})
	claims := func(r *runChild, outcome string) float64 {
		return metricValue(t, r.metricsURL(), `agent_promotions_total{outcome="`+outcome+`"}`)
	}
	bClaimed, bWithdrawn, cClaimed, cWithdrawn := claims(b, "claimed"), claims(b, "withdrawn"), claims(c, "claimed"), claims(c, "withdrawn")
	t.Logf("B Live at epoch 2 %v after A's kill; claims published / withdrawn: B %v / %v, C %v / %v",
		time.Since(killed).Round(time.Second), bClaimed, bWithdrawn, cClaimed, cWithdrawn)
	if bClaimed != 1 || bWithdrawn != 0 || cClaimed != 0 || cWithdrawn != 0 {
		t.Fatalf("claims published / withdrawn: B %v / %v, C %v / %v; want B's one claim only (C, rank 1, claimed beside B, rank 0)",
			bClaimed, bWithdrawn, cClaimed, cWithdrawn)
	}
}

// replaceIn replaces old, which must be there, with new in the file at path.
func replaceIn(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s has no %q", path, old)
	}
	if err := os.WriteFile(path, bytes.Replace(b, []byte(old), []byte(new), 1), 0o600); err != nil {
		t.Fatal(err)
	}
}
