package relaytest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/relaytest"
)

var testKey = strings.Repeat("02", 32)

func note(t *testing.T, content string) nostr.Event {
	t.Helper()
	ev := nostr.Event{Kind: 1, Content: content, CreatedAt: nostr.Now(), Tags: nostr.Tags{}}
	if err := ev.Sign(testKey); err != nil {
		t.Fatalf("sign: %v", err)
	}
	return ev
}

// untilEOSE reads c until the EOSE of sub.
func untilEOSE(t *testing.T, c *relaytest.Conn, sub string) {
	t.Helper()
	for {
		env, err := c.Read(10 * time.Second)
		if err != nil {
			t.Fatalf("waiting for EOSE of %s: %v", sub, err)
		}
		if e, ok := env.(*nostr.EOSEEnvelope); ok && string(*e) == sub {
			return
		}
	}
}

// readEvent reads c until an EVENT (skipping other frames).
func readEvent(c *relaytest.Conn, limit time.Duration) (*nostr.EventEnvelope, error) {
	deadline := time.Now().Add(limit)
	for {
		env, err := c.Read(time.Until(deadline))
		if err != nil {
			return nil, err
		}
		if e, ok := env.(*nostr.EventEnvelope); ok {
			return e, nil
		}
	}
}

func publishOK(c *relaytest.Conn, ev nostr.Event, limit time.Duration) error {
	c.Send(nostr.EventEnvelope{Event: ev})
	deadline := time.Now().Add(limit)
	for {
		env, err := c.Read(time.Until(deadline))
		if err != nil {
			return fmt.Errorf("no OK for %s within %v: %w", ev.ID, limit, err)
		}
		if ok, isOK := env.(*nostr.OKEnvelope); isOK && ok.EventID == ev.ID {
			if !ok.OK {
				return fmt.Errorf("OK false for %s: %s", ev.ID, ok.Reason)
			}
			return nil
		}
	}
}

func TestStallProxyStallsSilently(t *testing.T) {
	r := relaytest.Start(t)
	p := relaytest.NewStallProxy(t, r.Addr())
	c := relaytest.Dial(t, p.URL())
	c.Send(nostr.ReqEnvelope{SubscriptionID: "a", Filters: nostr.Filters{{Kinds: []int{1}, Limit: 1}}})
	untilEOSE(t, c, "a")

	p.Stall()
	c.Send(nostr.ReqEnvelope{SubscriptionID: "b", Filters: nostr.Filters{{Kinds: []int{1}, Limit: 1}}})
	if env, err := c.Read(500 * time.Millisecond); err == nil {
		t.Fatalf("Read() through a stalled proxy = %v, want nothing", env)
	}
	// A connection made while stalled is held, not refused.
	held := make(chan *relaytest.Conn, 1)
	go func() { held <- relaytest.Dial(t, p.URL()) }()
	select {
	case <-held:
		t.Fatal("a websocket handshake went through a stalled proxy")
	case <-time.After(300 * time.Millisecond):
	}

	p.Resume()
	// Read(500 ms) above gave up and closed that client, so dial again.
	c2 := relaytest.Dial(t, p.URL())
	c2.Send(nostr.ReqEnvelope{SubscriptionID: "c", Filters: nostr.Filters{{Kinds: []int{1}, Limit: 1}}})
	untilEOSE(t, c2, "c")
	select {
	case c3 := <-held:
		c3.Send(nostr.ReqEnvelope{SubscriptionID: "d", Filters: nostr.Filters{{Kinds: []int{1}, Limit: 1}}})
		untilEOSE(t, c3, "d")
	case <-time.After(10 * time.Second):
		t.Fatal("the connection held while stalled was not forwarded after Resume")
	}
}

// TestNostrRelayUnderAStalledSubscriber records how @nostr-relay/core
// 0.0.40 (with ws, as its README runs it) treats a subscriber that stops
// reading: publishers and other subscribers are never held up (Node never
// waits on a socket), and the backlog waits in ws's buffer, unbounded: the
// client is never dropped (the example server pings nobody), and gets
// everything once it reads again.
func TestNostrRelayUnderAStalledSubscriber(t *testing.T) {
	r := relaytest.StartNostrRelay(t)
	proxy := relaytest.NewStallProxy(t, r.Addr())
	since := nostr.Now()
	f := nostr.Filter{Kinds: []int{1}, Since: &since}

	stalled := relaytest.Dial(t, proxy.URL())
	stalled.Send(nostr.ReqEnvelope{SubscriptionID: "s", Filters: nostr.Filters{f}})
	untilEOSE(t, stalled, "s")
	healthy := relaytest.Dial(t, r.URL())
	healthy.Send(nostr.ReqEnvelope{SubscriptionID: "h", Filters: nostr.Filters{f}})
	untilEOSE(t, healthy, "h")
	pub := relaytest.Dial(t, r.URL())

	proxy.Stall()
	content := strings.Repeat("x", 16<<10)
	const events = 48
	var ids []string
	for i := range events {
		ev := note(t, fmt.Sprintf("%d %s", i, content))
		ids = append(ids, ev.ID)
		if err := publishOK(pub, ev, 5*time.Second); err != nil {
			t.Fatalf("event %d of %d: %v", i+1, events, err)
		}
		if e, err := readEvent(healthy, 5*time.Second); err != nil || e.Event.ID != ev.ID {
			t.Fatalf("healthy subscriber, event %d: %v, %v; want the event", i+1, e, err)
		}
	}
	time.Sleep(2 * time.Second)
	st := r.Stats()
	t.Logf("with the subscriber stalled: %+v", st)
	if st.Dropped != 0 || st.PendingOutbound == 0 {
		t.Fatalf("Stats() = %+v, want nothing dropped and the backlog in ws's buffer", st)
	}
	proxy.Resume()
	for i, id := range ids {
		e, err := readEvent(stalled, 10*time.Second)
		if err != nil || e.Event.ID != id {
			t.Fatalf("stalled subscriber after Resume, event %d: %v, %v; want %s", i+1, e, err, id)
		}
	}
}
