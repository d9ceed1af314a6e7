package agent

import (
	"sync"

	"provideragent/agentdb"
)

// cursorTracker guards agentdb's CursorTracker (the fixed min-pending
// rule) for the ingest goroutines, which begin events, and the machine
// goroutine, which finishes them once their step is persisted.
type cursorTracker struct {
	mu sync.Mutex
	t  *agentdb.CursorTracker
}

func newCursorTracker(start int64) *cursorTracker {
	return &cursorTracker{t: agentdb.NewCursorTracker(start)}
}

// Reserve registers an event with created_at ts as in flight before it is
// validated: it holds the cursor back but moves it only after Accept.
func (c *cursorTracker) Reserve(ts int64) agentdb.Token {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t.Reserve(ts)
}

// Accept counts a reserved event (it passed validation).
func (c *cursorTracker) Accept(tok agentdb.Token) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.t.Accept(tok) // unknown tokens (already done) are harmless
}

// Done marks an event finished (its step persisted, or rejected for good:
// a reserved event never accepted is dropped without moving the cursor).
func (c *cursorTracker) Done(tok agentdb.Token) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.t.Done(tok) // unknown tokens (already done) are harmless
}

// InFlight is the number of events begun and not finished.
func (c *cursorTracker) InFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t.InFlight()
}

// Cursor is the point to resume from (0: none yet). Callers clamp it to
// their clock (since, saveMeta).
func (c *cursorTracker) Cursor() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, _ := c.t.Safe()
	return s
}
