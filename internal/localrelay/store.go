package localrelay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/fiatjaf/eventstore"
	"github.com/fiatjaf/eventstore/slicestore"
	"github.com/nbd-wtf/go-nostr"
)

// memStore wraps khatru's slicestore, which does no locking of its own, in a
// mutex. Queries are drained into a slice under the lock, so no iteration ever
// overlaps a write.
type memStore struct {
	mu    sync.Mutex
	inner slicestore.SliceStore
	// byID and byAddr index the stored events by id and by address (kind,
	// pubkey and, for addressable kinds, d tag), so that duplicate checks,
	// id queries and replacements do not scan every event: the scale tests
	// publish thousands of events a second.
	byID   map[string]*nostr.Event
	byAddr map[string]*nostr.Event
	// byTag indexes the stored events by each value of their indexedTags
	// (key tagKey), so that a query of those tags reads the events that
	// carry them instead of scanning the whole store, as strfry answers
	// them from its tag index: the agent's batched claim reads (#d of 2,048
	// workloads a query) and khatru's checks for a NIP-09 deletion of every
	// event it takes (kind 5 by the event's id or address). At 100,000
	// workloads those scans made the relays the bottleneck of a mass
	// retake.
	byTag map[string][]*nostr.Event
	// maxLimit is the inner store's clamp of a filter's limit.
	maxLimit int
	// refuseOlder answers an addressable or replaceable event older than
	// the stored one with errReplaced, as strfry does (khatru keeps quiet).
	refuseOlder bool
}

// errReplaced is strfry's OK message for an event older than the stored
// version of the same address.
var errReplaced = errors.New("replaced: have newer event")

func newMemStore(maxLimit int) (*memStore, error) {
	s := &memStore{byID: map[string]*nostr.Event{}, byAddr: map[string]*nostr.Event{}, byTag: map[string][]*nostr.Event{}}
	s.inner.MaxLimit = maxLimit
	if err := s.inner.Init(); err != nil {
		return nil, fmt.Errorf("init slicestore: %w", err)
	}
	s.maxLimit = s.inner.MaxLimit // Init's default when maxLimit is 0
	return s, nil
}

// query returns the stored events matching filter, newest first. The inner
// query always runs to completion (background context) so that its goroutine
// closes the channel while we hold the lock.
func (s *memStore) query(filter nostr.Filter) []*nostr.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queryLocked(filter)
}

func (s *memStore) queryLocked(filter nostr.Filter) []*nostr.Event {
	if len(filter.IDs) > 0 && len(filter.IDs) <= 64 {
		var out []*nostr.Event
		for _, id := range filter.IDs {
			if ev := s.byID[id]; ev != nil && filter.Matches(ev) {
				out = append(out, ev)
			}
		}
		return out
	}
	if name, values := indexedIn(filter); len(filter.IDs) == 0 && name != "" {
		return s.queryByTag(filter, name, values)
	}
	ch, err := s.inner.QueryEvents(context.Background(), filter)
	if err != nil {
		return nil
	}
	var out []*nostr.Event
	for ev := range ch {
		out = append(out, ev)
	}
	return out
}

// indexedTags are the tag names byTag indexes. "#a" and "#e" are what
// khatru v0.19.1 asks for in its NIP-09 checks (nostr.TagMap{"#e": ...}
// for every event it takes, {"#a": ...} for every addressable one): a tag
// name with the '#' kept, which no event has, so the checks never find a
// deletion, but each scanned the whole store.
var indexedTags = []string{"d", "a", "e", "#a", "#e"}

// indexedIn returns the first of indexedTags the filter asks for, and its
// values ("" when none).
func indexedIn(f nostr.Filter) (name string, values []string) {
	for _, n := range indexedTags {
		if vs := f.Tags[n]; len(vs) > 0 {
			return n, vs
		}
	}
	return "", nil
}

// tagKey is byTag's key of a tag value.
func tagKey(name, value string) string { return name + "\x00" + value }

// queryByTag answers a filter with values of an indexed tag from the byTag
// index with what the inner store's scan would return: the matching events
// newest first (then by id, descending), at most the filter's limit,
// clamped as the inner store clamps it (TestQueryByTagMatchesTheScan).
func (s *memStore) queryByTag(filter nostr.Filter, name string, values []string) []*nostr.Event {
	limit := filter.Limit
	if limit > s.maxLimit || (limit == 0 && !filter.LimitZero) {
		limit = s.maxLimit
	}
	var out []*nostr.Event
	for i, v := range values {
		if slices.Contains(values[:i], v) {
			continue // listed twice
		}
		for _, ev := range s.byTag[tagKey(name, v)] {
			// The inner store's scan starts after the events at since
			// (its binary search): since is exclusive there.
			if filter.Matches(ev) && (filter.Since == nil || ev.CreatedAt > *filter.Since) {
				out = append(out, ev)
			}
		}
	}
	slices.SortFunc(out, newestFirst)
	out = slices.Compact(out) // an event with two of the filter's values
	return out[:min(len(out), limit)]
}

// newestFirst is the inner store's order: created_at descending, then id
// descending.
func newestFirst(a, b *nostr.Event) int {
	if c := cmp.Compare(b.CreatedAt, a.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(b.ID, a.ID)
}

// tagKeys are the byTag keys of ev's indexed tags, each once.
func tagKeys(ev *nostr.Event) []string {
	var out []string
	for _, t := range ev.Tags {
		if len(t) >= 2 && slices.Contains(indexedTags, t[0]) {
			if k := tagKey(t[0], t[1]); !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	return out
}

func (s *memStore) save(evt *nostr.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saveLocked(evt)
}

func (s *memStore) saveLocked(evt *nostr.Event) error {
	if err := s.inner.SaveEvent(context.Background(), evt); err != nil {
		return err
	}
	s.byID[evt.ID] = evt
	if k, ok := addrKey(evt); ok {
		s.byAddr[k] = evt
	}
	for _, k := range tagKeys(evt) {
		s.byTag[k] = append(s.byTag[k], evt)
	}
	return nil
}

func (s *memStore) delete(evt *nostr.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deleteLocked(evt)
}

func (s *memStore) deleteLocked(evt *nostr.Event) error {
	if err := s.inner.DeleteEvent(context.Background(), evt); err != nil {
		return err
	}
	if cur := s.byID[evt.ID]; cur != nil {
		delete(s.byID, evt.ID)
		if k, ok := addrKey(cur); ok && s.byAddr[k] == cur {
			delete(s.byAddr, k)
		}
		for _, k := range tagKeys(cur) {
			if rest := slices.DeleteFunc(s.byTag[k], func(e *nostr.Event) bool { return e == cur }); len(rest) > 0 {
				s.byTag[k] = rest
			} else {
				delete(s.byTag, k)
			}
		}
	}
	return nil
}

// has reports whether an event with this id is stored.
func (s *memStore) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id] != nil
}

// addrKey is the address of a replaceable or addressable event.
func addrKey(ev *nostr.Event) (string, bool) {
	switch {
	case nostr.IsAddressableKind(ev.Kind):
		return fmt.Sprintf("%d:%s:%s", ev.Kind, ev.PubKey, ev.Tags.GetD()), true
	case nostr.IsReplaceableKind(ev.Kind):
		return fmt.Sprintf("%d:%s", ev.Kind, ev.PubKey), true
	}
	return "", false
}

// replace stores a replaceable or addressable event, deleting older versions,
// all under one lock.
func (s *memStore) replace(evt *nostr.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, _ := addrKey(evt)
	if prev := s.byAddr[k]; prev != nil {
		if !isOlder(prev, evt) {
			if s.refuseOlder {
				return errReplaced
			}
			return nil
		}
		if err := s.deleteLocked(prev); err != nil {
			return fmt.Errorf("delete replaced event: %w", err)
		}
	}
	if err := s.saveLocked(evt); err != nil && !errors.Is(err, eventstore.ErrDupEvent) {
		return fmt.Errorf("save replacing event: %w", err)
	}
	return nil
}

func (s *memStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

func isOlder(prev, next *nostr.Event) bool {
	return prev.CreatedAt < next.CreatedAt || (prev.CreatedAt == next.CreatedAt && prev.ID > next.ID)
}
