package agent

import (
	"sync"

	"provideragent/agent/store"
)

// cursorTracker guards agent/store's CursorTracker (the fixed min-pending
// rule) for the ingest goroutines, which begin events, and the machine
// goroutine, which finishes them once their step is persisted.
type cursorTracker struct {
	mu sync.Mutex
	t  *store.CursorTracker
}

func newCursorTracker(start int64) *cursorTracker {
	return &cursorTracker{t: store.NewCursorTracker(start)}
}

// Begin registers an event with created_at ts as in flight.
func (c *cursorTracker) Begin(ts int64) store.Token {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t.Begin(ts)
}

// Done marks an event finished (processed and persisted, or rejected for
// good).
func (c *cursorTracker) Done(tok store.Token) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.t.Done(tok) // unknown tokens (already done) are harmless
}

// Cursor is the point to resume from (0: none yet).
func (c *cursorTracker) Cursor() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, _ := c.t.Safe()
	return s
}
