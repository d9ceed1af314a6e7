package localrelay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fiatjaf/eventstore/slicestore"
	"github.com/nbd-wtf/go-nostr"
)

// TestQueryByTagMatchesTheScan checks the tag index against the inner
// store's scan: over random saves, replacements and deletions, every query
// with values of an indexed tag (and others) returns the same events in
// the same order.
func TestQueryByTagMatchesTheScan(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			s, _ := randomStore(t, rng)
			ds := []string{"a", "b", "c", "d", "e", ""}
			var stored []*nostr.Event
			for i := range 300 {
				stored = randomChange(rng, s, stored, randomEvent(rng, i, ds))
				f := randomTagFilter(rng, ds)
				name, values := indexedIn(f)
				if name == "" {
					t.Fatalf("filter %v: no indexed tag", f)
				}
				got := s.queryByTag(f, name, values)
				want := scan(t, s, f)
				if !slices.Equal(ids(got), ids(want)) {
					t.Fatalf("after %d operations, filter %v: index gave %v, scan %v", i+1, f, ids(got), ids(want))
				}
			}
		})
	}
}

// randomStore is an empty store with a random clamp of limits (0: the
// default).
func randomStore(t *testing.T, rng *rand.Rand) (*memStore, int) {
	t.Helper()
	maxLimit := []int{0, 3, 50}[rng.IntN(3)]
	s, err := newMemStore(maxLimit)
	if err != nil {
		t.Fatal(err)
	}
	return s, maxLimit
}

// randomChange replaces (when addressable), saves, saves again or deletes
// an event of s at random (ev, or one of stored), and returns stored with
// ev added.
func randomChange(rng *rand.Rand, s *memStore, stored []*nostr.Event, ev *nostr.Event) []*nostr.Event {
	switch op := rng.IntN(10); {
	case op < 5 && nostr.IsAddressableKind(ev.Kind):
		_ = s.replace(ev)
	case op < 8:
		_ = s.save(ev)
	case op < 9 && len(stored) > 0:
		_ = s.save(stored[rng.IntN(len(stored))]) // a duplicate
	case len(stored) > 0:
		_ = s.delete(stored[rng.IntN(len(stored))])
	}
	return append(stored, ev)
}

// scan is the store's scan's answer to f.
func scan(t *testing.T, s *memStore, f nostr.Filter) []*nostr.Event {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scanLocked(f)
}

// TestStoreAnswersAsSlicestore: after random saves, replacements and
// deletions, the store holds what its indexes hold, and answers random
// filters (kinds, authors, tags, since, until, limits) exactly as khatru's
// slicestore holding the same events, whose order it keeps reversed.
func TestStoreAnswersAsSlicestore(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			s, maxLimit := randomStore(t, rng)
			ds := []string{"a", "b", "c", ""}
			var stored []*nostr.Event
			for i := range 300 {
				stored = randomChange(rng, s, stored, randomEvent(rng, i, ds))
				ref := slicestore.SliceStore{MaxLimit: maxLimit}
				if err := ref.Init(); err != nil {
					t.Fatal(err)
				}
				for _, e := range s.byID {
					if err := ref.SaveEvent(context.Background(), e); err != nil {
						t.Fatal(err)
					}
				}
				if len(s.timeline) != len(s.byID) || !slices.IsSortedFunc(s.timeline, oldestFirst) {
					t.Fatalf("after %d operations: %d events in the timeline (sorted %v), %d by id", i+1,
						len(s.timeline), slices.IsSortedFunc(s.timeline, oldestFirst), len(s.byID))
				}
				f := randomFilter(rng, ds)
				ch, err := ref.QueryEvents(context.Background(), f)
				if err != nil {
					t.Fatal(err)
				}
				var want []*nostr.Event
				for e := range ch {
					want = append(want, e)
				}
				if got := s.query(f); !slices.Equal(ids(got), ids(want)) {
					t.Fatalf("after %d operations, filter %v: store gave %v, slicestore %v", i+1, f, ids(got), ids(want))
				}
			}
		})
	}
}

// randomFilter is a filter of any shape the relays are asked: by kind,
// author, indexed or other tag, time range and limit.
func randomFilter(rng *rand.Rand, ds []string) nostr.Filter {
	if rng.IntN(3) == 0 {
		return randomTagFilter(rng, ds)
	}
	f := nostr.Filter{Tags: nostr.TagMap{}}
	randomBounds(rng, &f)
	return f
}

func ids(evs []*nostr.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

func randomEvent(rng *rand.Rand, i int, ds []string) *nostr.Event {
	ev := &nostr.Event{
		ID:        fmt.Sprintf("%064x", rng.Uint64()),
		PubKey:    []string{"p1", "p2"}[rng.IntN(2)],
		CreatedAt: nostr.Timestamp(1000 + rng.IntN(20)), // ties are common
		Kind:      []int{1, 5, 30000, 38383, 38384}[rng.IntN(5)],
	}
	for range rng.IntN(4) { // none to three indexed tags, maybe one twice
		ev.Tags = append(ev.Tags, nostr.Tag{indexedTags[rng.IntN(len(indexedTags))], ds[rng.IntN(len(ds))]})
	}
	if rng.IntN(4) == 0 {
		ev.Tags = append(ev.Tags, nostr.Tag{"t", fmt.Sprint(i % 2)})
	}
	return ev
}

func randomTagFilter(rng *rand.Rand, ds []string) nostr.Filter {
	f := nostr.Filter{Tags: nostr.TagMap{}}
	for range 1 + rng.IntN(2) { // one or two indexed tags
		name := indexedTags[rng.IntN(len(indexedTags))]
		for range 1 + rng.IntN(4) { // may list a value twice
			f.Tags[name] = append(f.Tags[name], ds[rng.IntN(len(ds))])
		}
	}
	randomBounds(rng, &f)
	return f
}

// randomBounds adds to f at random a kind, an author, an unindexed tag, a
// since and an until among the events' times (randomEvent), and a limit.
func randomBounds(rng *rand.Rand, f *nostr.Filter) {
	if rng.IntN(2) == 0 {
		f.Kinds = []int{[]int{1, 5, 30000, 38383, 38384}[rng.IntN(5)]}
	}
	if rng.IntN(3) == 0 {
		f.Authors = []string{[]string{"p1", "p2"}[rng.IntN(2)]}
	}
	if rng.IntN(4) == 0 {
		f.Tags["t"] = []string{"0"}
	}
	if rng.IntN(3) == 0 {
		since := nostr.Timestamp(995 + rng.IntN(30))
		f.Since = &since
	}
	if rng.IntN(3) == 0 {
		until := nostr.Timestamp(995 + rng.IntN(30))
		f.Until = &until
	}
	switch rng.IntN(4) {
	case 0:
		f.Limit = 1 + rng.IntN(10)
	case 1:
		f.LimitZero = true
	case 2:
		f.Limit = 1000
	}
}
