// Package drivertest holds test helpers for the driver: an in-memory Store
// with hooks for refusing or crashing a commit, which the driver's tests and
// the simulator in props/ (its simulated database) use.
package drivertest

import (
	"context"
	"maps"
	"slices"
	"time"

	"provideragent/driver"
	"provideragent/lease"
)

// MemStore is a driver.Store in memory: what Commit wrote survives as long
// as the MemStore does (a simulated provider keeps it across its agent's
// crashes). P is the event an outbox row carries and X a step's own rows,
// which it ignores (Wrote sees them).
type MemStore[P, X any] struct {
	Meta       *lease.Snapshot
	Rows       map[string]lease.WorkloadSnapshot
	ClaimTimes map[string]int64
	// Outbox holds every outbox row committed, in order.
	Outbox []driver.OutboxRow[P]
	Cursor int64
	// Commits counts the commits that wrote.
	Commits int

	// Refuse, when set, is asked before each commit with its wait: a
	// non-nil error refuses it and nothing is written (a full disk, a
	// write lock held elsewhere for longer than wait).
	Refuse func(b *driver.Batch[P, X], wait time.Duration) error
	// Wrote, when set, is called after a commit wrote b.
	Wrote func(b *driver.Batch[P, X])
}

var _ driver.Store[[]byte, struct{}] = (*MemStore[[]byte, struct{}])(nil)

// Load implements driver.Store.
func (s *MemStore[P, X]) Load(context.Context) (driver.Loaded, error) {
	// The driver's restore copies what it reads: no copy here.
	l := driver.Loaded{Meta: s.Meta}
	for _, id := range slices.Sorted(maps.Keys(s.Rows)) {
		l.Workloads = append(l.Workloads, s.Rows[id])
	}
	return l, nil
}

// LastClaimTime implements driver.Store.
func (s *MemStore[P, X]) LastClaimTime(_ context.Context, id string, _ time.Duration) (int64, error) {
	return s.ClaimTimes[id], nil
}

// Commit implements driver.Store.
func (s *MemStore[P, X]) Commit(_ context.Context, b *driver.Batch[P, X], wait time.Duration) error {
	if s.Refuse != nil {
		if err := s.Refuse(b, wait); err != nil {
			return err
		}
	}
	if s.Rows == nil {
		s.Rows = map[string]lease.WorkloadSnapshot{}
	}
	if s.ClaimTimes == nil {
		s.ClaimTimes = map[string]int64{}
	}
	// A batch's values are copies of the machine's state: kept as they are.
	for _, w := range b.Workloads {
		s.Rows[w.Spec.ID] = w
	}
	for _, id := range b.Deleted {
		delete(s.Rows, id)
	}
	if b.Meta != nil {
		s.Meta = b.Meta
	}
	for id, at := range b.ClaimTimes {
		if at == 0 {
			delete(s.ClaimTimes, id)
		} else {
			s.ClaimTimes[id] = at
		}
	}
	s.Outbox = append(s.Outbox, b.Outbox...)
	if b.Cursor != nil {
		s.Cursor = *b.Cursor
	}
	s.Commits++
	if s.Wrote != nil {
		s.Wrote(b)
	}
	return nil
}

// State is the state workload id's row holds ("" when there is none).
func (s *MemStore[P, X]) State(id string) lease.State { return s.Rows[id].State }

// Clone is a copy of what s holds, without its hooks (the values it holds
// are never changed in place, so they are shared).
func (s *MemStore[P, X]) Clone() *MemStore[P, X] {
	return &MemStore[P, X]{Meta: s.Meta, Rows: maps.Clone(s.Rows), ClaimTimes: maps.Clone(s.ClaimTimes),
		Outbox: slices.Clone(s.Outbox), Cursor: s.Cursor, Commits: s.Commits}
}
