package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/relaytest"
	"provideragent/relay"
)

// publishN publishes n kind-1 events of the test author dated one second
// apart before now, the last `same` of them in one second, and returns
// their ids.
func publishN(t *testing.T, h *harness, n, same int, tag string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	base := time.Now().Add(-time.Hour)
	for i := range n {
		at := base.Add(time.Duration(min(i, n-same)) * time.Second)
		ev := nostr.Event{Kind: 1, Content: fmt.Sprint(i), CreatedAt: nostr.Timestamp(at.Unix()), Tags: nostr.Tags{{"t", tag}}}
		if err := ev.Sign(authorKey); err != nil {
			t.Fatal(err)
		}
		if res := h.pool.Publish(context.Background(), ev); res.AcceptedCount() != len(h.pool.URLs()) {
			t.Fatalf("Publish(%d) = %+v, want accepted", i, res)
		}
		ids[ev.ID] = true
	}
	return ids
}

// TestPoolCatchupPagesThroughLimit: a relay that returns at most 20 stored
// events per filter (its NIP-11 max_limit, enforced) still delivers all 57
// stored events before the subscription counts as synced, six of them in
// the second where a page ends; a query reads them all too. Without paging
// the subscription and the query would stop at the relay's cut (20).
func TestPoolCatchupPagesThroughLimit(t *testing.T) {
	r := relaytest.Start(t, "--max-limit", "20")
	pub := newPool(t, fastConfig(r.URL()), relay.Options{})
	eventually(t, "limits fetched", func() bool { return pub.status(r.URL()).Limits.MaxLimit == 20 })
	want := publishN(t, pub, 57, 6, "paged")

	h := newPool(t, fastConfig(r.URL()), relay.Options{Filters: kind1Filter(t)})
	got := map[string]bool{}
	for {
		x := h.next(func(relay.Received) bool { return true })
		if x.EOSE {
			break
		}
		got[x.Event.ID] = true
	}
	for id := range want {
		if !got[id] {
			t.Fatalf("subscription delivered %d of %d stored events before EOSE, want all", len(got), len(want))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	res := h.pool.Query(ctx, kind1Filter(t)[0])
	if !res[0].Complete() || len(res[0].Events) != len(want) {
		t.Fatalf("Query() = %d events, complete %v, want %d", len(res[0].Events), res[0].Complete(), len(want))
	}
}

// bigFilters returns n filters of kind 1 events tagged "t", each with
// values tag values of about 40 bytes, the first one the tag "hit".
func bigFilters(n, values int) []nostr.Filter {
	var out []nostr.Filter
	for i := range n {
		vals := make([]string, values)
		for j := range vals {
			vals[j] = fmt.Sprintf("filter-%04d-value-%04d-%s", i, j, strings.Repeat("x", 16))
		}
		if i == n-1 {
			vals[0] = "hit"
		}
		out = append(out, nostr.Filter{Kinds: []int{1}, Tags: nostr.TagMap{"t": vals}})
	}
	return out
}

// TestPoolInterestNarrowestThatFits: a relay allowing 8 subscriptions (4
// kept for queries and one for catch-up pages: 3 left) and 2 KB frames gets
// the coarse alternative of an interest whose narrow filters would need 10
// REQs, and the events it matches still arrive; a relay with room gets the
// narrow one. Choosing the narrow alternative regardless fails the first
// check.
func TestPoolInterestNarrowestThatFits(t *testing.T) {
	tight := relaytest.Start(t, "--max-subscriptions", "8", "--max-message-length", "2048")
	roomy := relaytest.Start(t)
	interests := []relay.Interest{
		{Name: "small", Alternatives: [][]nostr.Filter{{{Kinds: []int{7}}}}},
		{Name: "many", Alternatives: [][]nostr.Filter{bigFilters(10, 30), {{Kinds: []int{1}}}}},
	}
	cfg := fastConfig(tight.URL(), roomy.URL())
	h := newPool(t, cfg, relay.Options{Interests: interests})
	eventually(t, "limits fetched and subscribed", func() bool {
		st := h.status(tight.URL())
		return st.Limits.MaxSubscriptions == 8 && st.EOSESeen && len(st.Choices) == 2
	})
	// The limits may arrive after a first subscription: reconnect is not
	// needed, the choice is made on each (re)subscription.
	eventually(t, "coarse alternative on the tight relay", func() bool {
		ch := h.status(tight.URL()).Choices
		return len(ch) == 2 && ch[1].Alternative == 1 && ch[1].Fits
	})
	if st := h.status(tight.URL()); st.REQs > 3 {
		t.Fatalf("tight relay: %d REQs, want at most 3", st.REQs)
	}
	eventually(t, "narrow alternative on the roomy relay", func() bool {
		ch := h.status(roomy.URL()).Choices
		return len(ch) == 2 && ch[1].Alternative == 0 && ch[1].Fits
	})
	ev := nostr.Event{Kind: 1, Content: "hit", CreatedAt: nostr.Now(), Tags: nostr.Tags{{"t", "hit"}}}
	if err := ev.Sign(authorKey); err != nil {
		t.Fatal(err)
	}
	h.pool.Publish(context.Background(), ev)
	h.waitEvent(tight.URL(), ev.ID)
	h.waitEvent(roomy.URL(), ev.ID)
}

// TestPoolSetInterestsKeepsUnchangedREQs: adding an interest sends only its
// REQ; the REQ of the unchanged one stays open, so its stored event is not
// delivered again. Closing and re-sending every REQ
// on each change would deliver the stored event twice.
func TestPoolSetInterestsKeepsUnchangedREQs(t *testing.T) {
	r := relaytest.Start(t)
	a := relay.Interest{Name: "a", Alternatives: [][]nostr.Filter{kind1Filter(t)}}
	h := newPool(t, fastConfig(r.URL()), relay.Options{Interests: []relay.Interest{a}})
	h.waitEOSE(r.URL())
	ev := signed(t, 1, "stored", time.Now())
	h.pool.Publish(context.Background(), ev)
	h.waitEvent(r.URL(), ev.ID)

	b := relay.Interest{Name: "b", Alternatives: [][]nostr.Filter{{{Kinds: []int{7}}}}}
	h.pool.SetInterests([]relay.Interest{a, b})
	h.waitEOSE(r.URL())
	other := signed(t, 7, "new interest", time.Now())
	h.pool.Publish(context.Background(), other)
	h.waitEvent(r.URL(), other.ID)
	for _, x := range h.seen {
		if x.Event != nil && x.Event.ID == ev.ID {
			t.Fatalf("stored event delivered again after SetInterests: its REQ was re-sent")
		}
	}
	if st := h.status(r.URL()); st.REQs != 2 {
		t.Fatalf("REQs = %d, want 2", st.REQs)
	}
}

// TestPoolKnownSkipsParsing: once caught up, an event Options.Known knows
// arrives as its id only (not parsed); other events, and known ones before
// the catch-up ended, arrive parsed.
func TestPoolKnownSkipsParsing(t *testing.T) {
	r := relaytest.Start(t)
	pub := newPool(t, fastConfig(r.URL()), relay.Options{})
	stored := signed(t, 1, "stored before", time.Now().Add(-time.Minute))
	pub.pool.Publish(context.Background(), stored)
	known := signed(t, 1, "known", time.Now())
	h := newPool(t, fastConfig(r.URL()), relay.Options{Filters: kind1Filter(t), Known: func(id string) bool {
		return id == known.ID || id == stored.ID
	}})
	first := h.next(func(x relay.Received) bool { return x.Event != nil || x.ID != "" })
	if first.Event == nil || first.Event.ID != stored.ID {
		t.Fatalf("stored event = %+v, want it parsed (before EOSE)", first)
	}
	h.waitEOSE(r.URL())
	pub.pool.Publish(context.Background(), known)
	x := h.next(func(x relay.Received) bool { return x.ID != "" || x.Event != nil })
	if x.Event != nil || x.ID != known.ID {
		t.Fatalf("known live event = %+v, want only its id", x)
	}
	unknown := signed(t, 1, "unknown", time.Now())
	pub.pool.Publish(context.Background(), unknown)
	if x := h.waitEvent(r.URL(), unknown.ID); x.Event.Content != "unknown" {
		t.Fatalf("unknown event = %+v, want it parsed", x)
	}
}

// TestPoolStrfryManyFilters: 300 filters of 256 tag values each (about 5 MB
// of filters) on the strfry emulation are packed into REQs within its frame
// and subscription limits; the relay refuses nothing and an event matching
// the last filter arrives; a query with the same filters completes.
func TestPoolStrfryManyFilters(t *testing.T) {
	r := relaytest.StartKind(t, relaytest.StrfryEmulated, relaytest.KindOptions{})
	fs := bigFilters(300, 256)
	cfg := fastConfig(r.URL())
	h := newPool(t, cfg, relay.Options{Interests: []relay.Interest{{Name: "many", Alternatives: [][]nostr.Filter{fs}}}})
	eventually(t, "subscribed within strfry's limits", func() bool {
		st := h.status(r.URL())
		return st.Limits.MaxSubscriptions == 200 && st.EOSESeen && len(st.Choices) == 1 && st.Choices[0].Fits
	})
	ev := nostr.Event{Kind: 1, Content: "hit", CreatedAt: nostr.Now(), Tags: nostr.Tags{{"t", "hit"}}}
	if err := ev.Sign(authorKey); err != nil {
		t.Fatal(err)
	}
	h.pool.Publish(context.Background(), ev)
	h.waitEvent(r.URL(), ev.ID)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	res := h.pool.QueryFilters(ctx, fs)
	if !res[0].Complete() || len(res[0].Events) != 1 {
		t.Fatalf("QueryFilters(300 filters) = %d events, complete %v, err %v, closed %q", len(res[0].Events), res[0].Complete(), res[0].Err, res[0].ClosedReason)
	}
	if st := h.status(r.URL()); st.REQs > 195 || st.REQs < 2 {
		t.Fatalf("REQs = %d, want the filters spread over 2 to 195 REQs", st.REQs)
	}
	if got := r.Stats().Refusals; len(got) > 0 {
		t.Fatalf("strfry refused %v, want nothing", got)
	}
}
