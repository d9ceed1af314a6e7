package localrelay

import (
	"context"
	"errors"
	"fmt"
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
	// refuseOlder answers an addressable or replaceable event older than
	// the stored one with errReplaced, as strfry does (khatru keeps quiet).
	refuseOlder bool
}

// errReplaced is strfry's OK message for an event older than the stored
// version of the same address.
var errReplaced = errors.New("replaced: have newer event")

func newMemStore(maxLimit int) (*memStore, error) {
	s := &memStore{byID: map[string]*nostr.Event{}, byAddr: map[string]*nostr.Event{}}
	s.inner.MaxLimit = maxLimit
	if err := s.inner.Init(); err != nil {
		return nil, fmt.Errorf("init slicestore: %w", err)
	}
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
