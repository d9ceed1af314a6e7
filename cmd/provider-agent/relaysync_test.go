package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/agent"
	"provideragent/heartbeat"
	"provideragent/internal/cutproxy"
	"provideragent/internal/relaytest"
)

// TestRestartBehindCutRelaysHandsOn is rule 11's eviction with the real
// binary (agent's TestRestartDuringRelayOutageHandsOn in process): a
// primary A and its standby B on three relays, A reaching two of them
// through cut proxies. Both stop (SIGTERM); the proxies are cut and A
// starts again: it syncs one relay of the two it needs, and at
// provision_timeout (5 s) its workload is evicted, not failed: it is
// stopped and handed on with a revocation saying the relay sync timed
// out. When the relays come back and nobody else claims (B is down), A
// takes the workload back by the retake rule at epoch 2 and runs it.
// Before rule 11 evicted, the workload failed there for good. T2 is 20 s
// (takeover_after 30 s), so that quorum loss's own eviction (T1+T2 after
// A's last quorum before its stop) comes well after the provision
// timeout and does not decide instead.
func TestRestartBehindCutRelaysHandsOn(t *testing.T) {
	t.Parallel()
	relays, urls := relaytest.StartN(t, 3)
	cut := map[int]*cutproxy.Proxy{0: proxyTo(t, relays[0]), 1: proxyTo(t, relays[1])}
	lt := demoTimings
	lt.T2, lt.TakeoverAfter = 20*time.Second, 30*time.Second
	p := newTimedPair(t, lt, urls)
	cfgA, cfgB, pubA, pubB := p.cfgA, p.cfgB, p.pubA, p.pubB
	appendTo(t, cfgA, dialVia(urls, cut))
	out := filepath.Join(sharedDir(t), "writes.txt")
	must(t, nil, "workloads", "grant", "--config", cfgA, "--id", "w1", "--command", appendLoop(out, "a"),
		"--standby", npubOf(t, pubB), "--publish")
	a := startRun(t, "--config", cfgA)
	b := startRun(t, "--config", cfgB)
	waitPrimaryAndStandby(t, a, b, "w1", 60*time.Second)
	b.stop(t)
	a.stop(t)

	for _, p := range cut {
		p.Cut()
	}
	restarted := time.Now()
	a = startRun(t, "--config", cfgA)
	st := a.waitStatus(t, "w1 evicted or failed after the relay sync timeout", lt.ProvisionTimeout+15*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "w1")
		return ok && (w.State == "evicted" || w.State == "failed" || w.State == "fenced")
	})
	w, _ := workloadIn(st, "w1")
	t.Logf("restarted behind two cut relays: w1 %s at epoch %d %v later", w.State, w.Epoch, time.Since(restarted).Round(time.Millisecond))
	if w.State == "failed" {
		t.Fatalf("w1 failed after the relay sync timeout, want evicted (handed on, to be taken back)")
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		reason, ok := revocationOn(t, urls[2], pubA, "w1")
		if ok && strings.Contains(reason, "relay sync timeout") {
			t.Logf("A's revocation on the relay it still reaches: %q", reason)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no revocation of w1 by A saying the relay sync timed out on %s within 10 s (last: %q, %v)", urls[2], reason, ok)
		}
	}

	for _, p := range cut {
		if err := p.Restore(); err != nil {
			t.Fatal(err)
		}
	}
	healed := time.Now()
	a.waitStatus(t, "w1 taken back: live and running at epoch 2", lt.TakeoverAfter+45*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "w1")
		return ok && w.State == "live" && w.Epoch == 2 && w.Running
	})
	t.Logf("relays back -> w1 live and running again at epoch 2 after %v", time.Since(healed).Round(time.Millisecond))
}

// revocationOn is the reason of the newest revocation of workload by
// signer stored on the relay at url (ok false: none).
func revocationOn(t *testing.T, url, signer, workload string) (reason string, ok bool) {
	t.Helper()
	c := relaytest.Dial(t, url)
	defer c.Close()
	c.Send(nostr.ReqEnvelope{SubscriptionID: "rev", Filters: nostr.Filters{{Kinds: []int{heartbeat.KindRevocation}, Authors: []string{signer}}}})
	var newest nostr.Timestamp
	for {
		env, err := c.Read(5 * time.Second)
		if err != nil {
			t.Fatalf("reading revocations from %s: %v", url, err)
		}
		switch env := env.(type) {
		case *nostr.EventEnvelope:
			r, err := heartbeat.DecodeRevocation(&env.Event)
			if err == nil && r.WorkloadID == workload && env.Event.CreatedAt >= newest {
				newest, reason, ok = env.Event.CreatedAt, r.Reason, true
			}
		case *nostr.EOSEEnvelope, *nostr.ClosedEnvelope:
			return reason, ok
		}
	}
}
