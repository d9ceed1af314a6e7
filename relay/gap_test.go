package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/relaytest"
	"provideragent/relay"
)

// Tests of Received.Gap: the pool says when its live stream from a relay
// may have missed events (lease's relay watch rests on it), and only then.

// TestPoolGapBeforeEveryConnection: each connection begins with a Gap
// marker, before its stored events and its EOSE; a restarted relay's new
// connection too (the test relay keeps its events in memory: the
// restarted one has none).
func TestPoolGapBeforeEveryConnection(t *testing.T) {
	r := relaytest.Start(t)
	pub := newPool(t, fastConfig(r.URL()), relay.Options{})
	ev := signed(t, 1, "stored", time.Now())
	if res := pub.pool.Publish(context.Background(), ev); res.AcceptedCount() != 1 {
		t.Fatalf("Publish() = %+v, want accepted", res)
	}
	h := newPool(t, fastConfig(r.URL()), relay.Options{Filters: kind1Filter(t)})
	for round := range 2 {
		var order []string
		for {
			x := h.nextOf(func(x relay.Received) bool { return x.Relay == r.URL() }, true)
			switch {
			case x.Gap:
				order = append(order, "gap")
			case x.EOSE:
				order = append(order, "eose")
			case x.Event != nil && x.Event.ID == ev.ID:
				order = append(order, "stored")
			}
			if x.EOSE {
				break
			}
		}
		want := map[int]string{0: "[gap stored eose]", 1: "[gap eose]"}[round]
		if got := fmt.Sprint(order); got != want {
			t.Fatalf("connection %d delivered %s, want %s", round+1, got, want)
		}
		if round == 0 {
			r.Restart()
		}
	}
}

// TestPoolGapOnClosedMidStream: a relay that ends a live REQ with CLOSED
// leaves a gap until the REQ is sent again and caught up: a Gap marker,
// then a new EOSE.
func TestPoolGapOnClosedMidStream(t *testing.T) {
	r := relaytest.Start(t, "--send-closed", "error: rotating", "--closed-after", "50ms", "--closed-times", "1")
	h := newPool(t, fastConfig(r.URL()), relay.Options{Filters: kind1Filter(t)})
	h.waitEOSE(r.URL())
	h.nextGap(r.URL()) // the connection's
	h.nextGap(r.URL()) // the CLOSED's (and the REQ's sent again)
	h.waitEOSE(r.URL())
	ev := signed(t, 1, "live", time.Now())
	h.pool.Publish(context.Background(), ev)
	h.waitEvent(r.URL(), ev.ID)
	if n := len(h.gaps); n < 2 {
		t.Fatalf("%d Gap markers, want the connection's and the CLOSED's", n)
	}
}

// TestPoolNoGapOnOverlappingChange: replacing a REQ by another (an
// interest's filters changed) keeps the old one open until the new one
// caught up: events published meanwhile come through, and no Gap marker
// is sent. With no room for both (max_subscriptions 1) the old one closes
// first, and that is a gap.
func TestPoolNoGapOnOverlappingChange(t *testing.T) {
	for _, tight := range []bool{false, true} {
		args := []string{}
		if tight {
			args = append(args, "--max-subscriptions", "3") // QuerySlots (2) + one REQ
		}
		r := relaytest.Start(t, args...)
		a := relay.Interest{Name: "a", Alternatives: [][]nostr.Filter{kind1Filter(t)}}
		h := newPool(t, fastConfig(r.URL()), relay.Options{Interests: []relay.Interest{a}})
		if tight {
			eventually(t, "limits fetched", func() bool { return h.status(r.URL()).Limits.MaxSubscriptions == 3 })
		}
		h.waitEOSE(r.URL())
		h.nextGap(r.URL()) // the connection's
		b := relay.Interest{Name: "a", Alternatives: [][]nostr.Filter{{{Kinds: []int{1, 7}}}}}
		h.pool.SetInterests([]relay.Interest{b})
		ev := signed(t, 1, "during the change", time.Now())
		h.pool.Publish(context.Background(), ev)
		h.waitEvent(r.URL(), ev.ID)
		h.waitEOSE(r.URL())
		later := signed(t, 7, "after the change", time.Now())
		h.pool.Publish(context.Background(), later)
		h.waitEvent(r.URL(), later.ID)
		if got, want := len(h.gaps), map[bool]int{false: 1, true: 2}[tight]; got != want {
			t.Fatalf("tight %v: %d Gap markers, want %d", tight, got, want)
		}
		eventually(t, "the replaced REQ closed", func() bool { return h.status(r.URL()).REQs == 1 })
	}
}
