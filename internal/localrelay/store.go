package localrelay

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/fiatjaf/eventstore"
	"github.com/nbd-wtf/go-nostr"
)

// memStore is the relay's event store: what khatru's slicestore answers
// (TestStoreAnswersAsSlicestore), under one mutex, with indexes. Its
// timeline holds the events oldest first (created_at, then id, ascending),
// where slicestore keeps them newest first: a new event, almost always the
// newest, is appended instead of moving every stored pointer (at 100,000
// workloads that move, with the garbage collector's write barriers, was a
// fifth of a relay's CPU during a mass retake).
type memStore struct {
	mu       sync.Mutex
	timeline []*nostr.Event
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
	// maxLimit clamps a filter's limit, as slicestore's MaxLimit.
	maxLimit int
	// refuseOlder answers an addressable or replaceable event older than
	// the stored one with errReplaced, as strfry does (khatru keeps quiet).
	refuseOlder bool
}

// errReplaced is strfry's OK message for an event older than the stored
// version of the same address.
var errReplaced = errors.New("replaced: have newer event")

func newMemStore(maxLimit int) (*memStore, error) {
	if maxLimit == 0 {
		maxLimit = slicestoreDefaultMaxLimit
	}
	return &memStore{byID: map[string]*nostr.Event{}, byAddr: map[string]*nostr.Event{}, byTag: map[string][]*nostr.Event{}, maxLimit: maxLimit}, nil
}

// slicestoreDefaultMaxLimit is slicestore's clamp of a filter's limit when
// none is configured (its Init).
const slicestoreDefaultMaxLimit = 500

// query returns the stored events matching filter, newest first: by id, by
// an indexed tag, or by a scan of the timeline.
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
	return s.scanLocked(filter)
}

// scanLocked answers filter as slicestore's scan does: the events with
// since < created_at <= until, newest first (then by id, descending), at
// most the filter's limit, clamped to maxLimit.
func (s *memStore) scanLocked(filter nostr.Filter) []*nostr.Event {
	limit := s.limit(filter)
	hi := len(s.timeline)
	if filter.Until != nil {
		hi = s.after(*filter.Until)
	}
	lo := 0
	if filter.Since != nil {
		lo = s.after(*filter.Since)
	}
	var out []*nostr.Event
	for i := hi - 1; i >= lo && len(out) < limit; i-- {
		if ev := s.timeline[i]; filter.Matches(ev) {
			out = append(out, ev)
		}
	}
	return out
}

// limit is how many events a query of filter returns at most.
func (s *memStore) limit(filter nostr.Filter) int {
	if filter.Limit > s.maxLimit || (filter.Limit == 0 && !filter.LimitZero) {
		return s.maxLimit
	}
	return filter.Limit
}

// after is the index of the first event of the timeline created after t.
func (s *memStore) after(t nostr.Timestamp) int {
	i, _ := slices.BinarySearchFunc(s.timeline, t, func(ev *nostr.Event, t nostr.Timestamp) int {
		if ev.CreatedAt <= t {
			return -1
		}
		return 1
	})
	return i
}

// oldestFirst is the timeline's order.
func oldestFirst(a, b *nostr.Event) int { return -newestFirst(a, b) }

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
// index with what the scan (scanLocked) returns: the matching events
// newest first (then by id, descending), at most the filter's limit,
// clamped to maxLimit (TestQueryByTagMatchesTheScan).
func (s *memStore) queryByTag(filter nostr.Filter, name string, values []string) []*nostr.Event {
	limit := s.limit(filter)
	var out []*nostr.Event
	for i, v := range values {
		if slices.Contains(values[:i], v) {
			continue // listed twice
		}
		for _, ev := range s.byTag[tagKey(name, v)] {
			// The scan starts after the events at since, as slicestore's
			// binary search does: since is exclusive there.
			if filter.Matches(ev) && (filter.Since == nil || ev.CreatedAt > *filter.Since) {
				out = append(out, ev)
			}
		}
	}
	slices.SortFunc(out, newestFirst)
	out = slices.Compact(out) // an event with two of the filter's values
	return out[:min(len(out), limit)]
}

// newestFirst is the order of every answer, slicestore's: created_at
// descending, then id descending.
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
	i, found := slices.BinarySearchFunc(s.timeline, evt, oldestFirst)
	if found {
		return eventstore.ErrDupEvent
	}
	s.timeline = slices.Insert(s.timeline, i, evt)
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
	if i, found := slices.BinarySearchFunc(s.timeline, evt, oldestFirst); found {
		s.timeline = slices.Delete(s.timeline, i, i+1)
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
