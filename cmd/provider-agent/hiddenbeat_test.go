package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/agent"
	"provideragent/heartbeat"
	"provideragent/internal/cutproxy"
	"provideragent/internal/relaytest"
	"provideragent/relay"
)

// TestHiddenQuorumBeatNoSecondWriter is props' TestOneWipeHidesAQuorumBeat
// with the real binary, real relays and real sockets: two nodes, M=2 of
// N=3, heartbeats every 3 s, takeover_after 20 s. The standby reaches R0
// and R1 only (R2 is cut for it). The primary is cut off R1 and its path
// to R0 stalls (TCP holds its bytes): it keeps R2, loses quorum and turns
// suspect. Then, right after one of the standby's own heartbeats came back
// from R1, the standby is cut off R0, the primary's path to R0 is released
// for one beat (quorum again: Live until another stale+t1+t2 pass) and cut
// for good, R0 restarts empty, and the standby is back on R0 before its
// next heartbeat: its own heartbeats never missed a beat, and nothing it
// can read shows that beat of the primary.
//
// Counting "no beat received from R0" as the primary's silence, the
// standby took over about 20 s after the primary's cut, while the primary
// ran for another 10 s or so: two writers. Now the standby's watch of R0
// starts again with its new connection (lease/watch.go), and it takes over
// only after the primary fenced itself.
func TestHiddenQuorumBeatNoSecondWriter(t *testing.T) {
	t.Parallel()
	relays, urls := relaytest.StartN(t, 3)
	a0, a1 := proxyTo(t, relays[0]), proxyTo(t, relays[1]) // the primary's paths to R0, R1
	b0, b2 := proxyTo(t, relays[0]), proxyTo(t, relays[2]) // the standby's paths to R0, R2
	lt := leaseTimings{T1: 3 * time.Second, T2: 5 * time.Second, Stale: 6 * time.Second, MaxSkew: time.Second,
		RelayDelay: time.Second, ProvisionTimeout: 8 * time.Second, TakeoverAfter: 20 * time.Second, Heartbeat: 3 * time.Second}
	p := newTimedPair(t, lt, urls)
	cfgA, cfgB, pubA, pubB := p.cfgA, p.cfgB, p.pubA, p.pubB
	appendTo(t, cfgA, "stop_grace = \"2s\"\n"+dialVia(urls, map[int]*cutproxy.Proxy{0: a0, 1: a1}))
	appendTo(t, cfgB, "stop_grace = \"2s\"\n"+dialVia(urls, map[int]*cutproxy.Proxy{0: b0, 2: b2}))
	out := filepath.Join(sharedDir(t), "writes.txt")
	must(t, nil, "workloads", "grant", "--config", cfgA, "--id", "w1", "--command", appendLoop(out, "w1"),
		"--standby", npubOf(t, pubB), "--publish")

	// The test's own view of the heartbeats: when R1 accepted one of the
	// standby's, and R0 one of the primary's.
	seen := watchBeats(t, []string{urls[0], urls[1]}, pubA, pubB)

	a := startRun(t, "--config", cfgA)
	b := startRun(t, "--config", cfgB)
	waitPrimaryAndStandby(t, a, b, "w1", 60*time.Second)
	b2.Cut() // the standby watches R0 and R1
	time.Sleep(2 * lt.Heartbeat)

	cut := time.Now()
	a1.Cut()
	a0.Hold() // R0 gets nothing of the primary, and the primary nothing of R0
	// Suspect at about stale + t1 (9 s), evicted at 14 s: come back at 10 s.
	time.Sleep(10 * time.Second)
	seen.drain()
	seen.next(t, urls[1], pubB, 2*lt.Heartbeat) // the standby's own beat just came back from R1
	b0.Cut()
	seen.drain()
	a0.Release()
	seen.next(t, urls[0], pubA, 2*time.Second) // R0 has the primary's beats again (and echoed them)
	time.Sleep(100 * time.Millisecond)
	a0.Cut()
	relays[0].Restart() // empty: in-memory
	if err := b0.Restore(); err != nil {
		t.Fatal(err)
	}
	hidden := time.Since(cut)

	b.waitStatus(t, "w1 live at epoch 2 on the standby", 90*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "w1")
		return ok && w.State == "live" && w.Epoch == 2 && w.Running
	})
	time.Sleep(2 * time.Second)
	ws := readWrites(t, out)
	lastA, firstB := lastWrite(ws, 1), firstWrite(ws, 2)
	t.Logf("the primary's beat hidden %v after its cut; its last write %v after the cut, the standby's first %v after it",
		hidden.Round(time.Millisecond), lastA.Sub(cut).Round(time.Millisecond), firstB.Sub(cut).Round(time.Millisecond))
	if lastA.IsZero() || firstB.IsZero() {
		t.Fatalf("writes: primary last %v, standby first %v: want both", lastA, firstB)
	}
	if !lastA.Before(firstB) {
		t.Fatalf("two writers: the primary wrote until %v, the standby from %v", lastA.Format(time.StampMilli), firstB.Format(time.StampMilli))
	}
}

// beatWatch is a test client's subscription to heartbeats on some relays:
// when each relay delivered one of each author's.
type beatWatch struct {
	ch <-chan relay.Received
}

func watchBeats(t *testing.T, urls []string, authors ...string) *beatWatch {
	t.Helper()
	cfg := relay.DefaultConfig()
	cfg.URLs = urls
	since := nostr.Now()
	p, err := relay.New(cfg, relay.Options{Filters: []nostr.Filter{{
		Kinds: []int{heartbeat.KindHeartbeat, heartbeat.KindHeartbeatEphemeral}, Authors: authors, Since: &since,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return &beatWatch{ch: p.Received()}
}

// drain forgets what was delivered so far.
func (w *beatWatch) drain() {
	for {
		select {
		case <-w.ch:
		default:
			return
		}
	}
}

// next waits for a heartbeat of author delivered by url since the last
// drain.
func (w *beatWatch) next(t *testing.T, url, author string, limit time.Duration) {
	t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case r := <-w.ch:
			if r.Relay == url && r.Event != nil && r.Event.PubKey == author {
				return
			}
		case <-deadline:
			t.Fatalf("no heartbeat of %s from %s within %v", author[:8], url, limit)
		}
	}
}
