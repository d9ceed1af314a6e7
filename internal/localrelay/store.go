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
	// refuseOlder answers an addressable or replaceable event older than
	// the stored one with errReplaced, as strfry does (khatru keeps quiet).
	refuseOlder bool
}

// errReplaced is strfry's OK message for an event older than the stored
// version of the same address.
var errReplaced = errors.New("replaced: have newer event")

func newMemStore(maxLimit int) (*memStore, error) {
	s := &memStore{}
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
	return s.inner.SaveEvent(context.Background(), evt)
}

func (s *memStore) delete(evt *nostr.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inner.DeleteEvent(context.Background(), evt)
}

// replace stores a replaceable or addressable event, deleting older versions,
// all under one lock.
func (s *memStore) replace(evt *nostr.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	filter := nostr.Filter{Limit: 1, Kinds: []int{evt.Kind}, Authors: []string{evt.PubKey}}
	if nostr.IsAddressableKind(evt.Kind) {
		filter.Tags = nostr.TagMap{"d": []string{evt.Tags.GetD()}}
	}
	store := true
	for _, prev := range s.queryLocked(filter) {
		if isOlder(prev, evt) {
			if err := s.inner.DeleteEvent(context.Background(), prev); err != nil {
				return fmt.Errorf("delete replaced event: %w", err)
			}
		} else {
			store = false
		}
	}
	if !store {
		if s.refuseOlder {
			return errReplaced
		}
		return nil
	}
	if err := s.inner.SaveEvent(context.Background(), evt); err != nil && !errors.Is(err, eventstore.ErrDupEvent) {
		return fmt.Errorf("save replacing event: %w", err)
	}
	return nil
}

func (s *memStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, _ := s.inner.CountEvents(context.Background(), nostr.Filter{})
	return int(n)
}

func isOlder(prev, next *nostr.Event) bool {
	return prev.CreatedAt < next.CreatedAt || (prev.CreatedAt == next.CreatedAt && prev.ID > next.ID)
}
