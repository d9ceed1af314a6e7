package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/cutproxy"
	"provideragent/internal/relaytest"
	"provideragent/relay"
)

func signedNote(t *testing.T, sk string, content string) *nostr.Event {
	t.Helper()
	ev := &nostr.Event{Kind: 1, CreatedAt: nostr.Now(), Content: content, Tags: nostr.Tags{}}
	if err := ev.Sign(sk); err != nil {
		t.Fatalf("sign: %v", err)
	}
	return ev
}

// TestRelayPoolPublishSubscribeAndCut checks the adapter over relay
// and the Proxy the demo uses to cut a path with real sockets.
func TestRelayPoolPublishSubscribeAndCut(t *testing.T) {
	good := relaytest.Start(t)
	rejecting := relaytest.Start(t, "--reject-writes")
	viaProxy := relaytest.Start(t)
	proxy, err := cutproxy.New(viaProxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()

	since := nostr.Now()
	cfg := relay.DefaultConfig()
	cfg.URLs = []string{good.URL(), rejecting.URL(), viaProxy.URL()}
	cfg.DialAddrs = map[string]string{viaProxy.URL(): proxy.URL()}
	cfg.BackoffInitial = 50 * time.Millisecond
	cfg.BackoffMax = 200 * time.Millisecond
	rc, err := newRelayPool(cfg, relay.Options{
		Filters: []nostr.Filter{{Kinds: []int{1}, Since: &since}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan relay.Received, 64)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = rc.Run(ctx, out) }()
	defer func() { cancel(); wg.Wait() }()

	waitFor(t, 10*time.Second, "3 relays EOSE", func() bool { return eoseCount(rc) == 3 })

	sk := nostr.GeneratePrivateKey()
	ev := signedNote(t, sk, "hello")
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	res := rc.Publish(pctx, ev)
	pcancel()
	if len(res.Accepted) != 2 || len(res.Rejected) != 1 {
		t.Fatalf("Publish() = %+v, want 2 accepted and 1 rejected", res)
	}
	if res.Rejected[0].Relay != rejecting.URL() {
		t.Fatalf("Publish().Rejected = %v, want %s", res.Rejected, rejecting.URL())
	}
	got := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case re := <-out:
			if re.Event != nil && re.Event.ID == ev.ID { // (markers too: EOSE, Gap)
				got[re.Relay] = true
			}
		case <-deadline:
			t.Fatalf("received from %v, want the 2 accepting relays", got)
		}
	}
	if !got[viaProxy.URL()] {
		t.Fatalf("events from the proxied relay labelled %v, want canonical %s", got, viaProxy.URL())
	}

	qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
	evs, eose := rc.Query(qctx, nostr.Filter{IDs: []string{ev.ID}})
	qcancel()
	if len(evs) != 2 || eose != 3 {
		t.Fatalf("Query() = %d events, %d EOSE, want 2 and 3", len(evs), eose)
	}

	// Cut the proxied relay: its connection drops, publishes time out there.
	proxy.Cut()
	waitFor(t, 10*time.Second, "proxied relay down", func() bool {
		for _, s := range rc.Status() {
			if s.URL == viaProxy.URL() {
				return !s.Connected
			}
		}
		return false
	})
	pctx, pcancel = context.WithTimeout(ctx, 2*time.Second)
	res = rc.Publish(pctx, signedNote(t, sk, "after cut"))
	pcancel()
	if len(res.Accepted) != 1 || len(res.TimedOut) != 1 || res.TimedOut[0].Relay != viaProxy.URL() {
		t.Fatalf("Publish() after cut = %+v, want 1 accepted and %s timed out", res, viaProxy.URL())
	}
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "reconnect after restore", func() bool { return eoseCount(rc) == 3 })
}

// waitFor polls cond (for conditions driven by real sockets, not timers).
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRelayPoolEOSEWaitsForTheEventsBeforeIt: a relay counts as synced
// (rule 10) only once every stored event it served before its EOSE has been
// handed to the agent. relay marks EOSE as soon as the frame arrives,
// while the events ahead of it may still wait in its receive buffer.
func TestRelayPoolEOSEWaitsForTheEventsBeforeIt(t *testing.T) {
	r := relaytest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := relay.DefaultConfig()
	cfg.URLs = []string{r.URL()}
	pub, err := newRelayPool(cfg, relay.Options{}) // go-nostr's own client races in Close
	if err != nil {
		t.Fatal(err)
	}
	sk := nostr.GeneratePrivateKey()
	const stored = 20
	for i := range stored {
		if res := pub.Publish(ctx, signedNote(t, sk, fmt.Sprintf("stored %d", i))); res.AcceptedCount() != 1 {
			t.Fatalf("storing event %d: %s", i, res.Refusals())
		}
	}
	pub.p.Close()

	rc, err := newRelayPool(cfg, relay.Options{Filters: []nostr.Filter{{Kinds: []int{1}}}})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan relay.Received) // nobody reads yet: the agent is busy
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = rc.Run(ctx, out) }()
	defer func() { cancel(); wg.Wait() }()

	waitFor(t, 10*time.Second, "the relay layer's EOSE", func() bool {
		st := rc.p.Status()
		return len(st) == 1 && st[0].EOSESeen
	})
	if n := eoseCount(rc); n != 0 {
		t.Fatalf("relay counted as synced (EOSE) with its %d stored events still unread, want not yet", stored)
	}
	for i := 0; i < stored; {
		select {
		case re := <-out:
			if re.Event != nil {
				i++ // (the connection's Gap marker comes first)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("got %d of %d stored events", i, stored)
		}
	}
	waitFor(t, 10*time.Second, "EOSE once the stored events were handed over", func() bool { return eoseCount(rc) == 1 })
}
