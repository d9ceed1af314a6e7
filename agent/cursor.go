package agent

import "sync"

// cursorTracker keeps the subscription cursor by the fixed min-pending rule:
// the cursor is the highest created_at below which every event has finished.
// Events finish out of order; a finished event that is not at the head waits
// until every earlier one finished, then the cursor jumps to the highest
// contiguous finished point. The cursor never goes backwards.
type cursorTracker struct {
	mu      sync.Mutex
	pending map[int64]int // created_at -> events begun, not finished
	maxDone int64
	cursor  int64
}

func newCursorTracker(start int64) *cursorTracker {
	return &cursorTracker{pending: map[int64]int{}, cursor: start, maxDone: start}
}

// Begin records that an event with created_at ts is being processed.
func (c *cursorTracker) Begin(ts int64) {
	c.mu.Lock()
	c.pending[ts]++
	c.mu.Unlock()
}

// Done records that one event with created_at ts finished (processed and
// persisted, or rejected for good).
func (c *cursorTracker) Done(ts int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.pending[ts]; n > 1 {
		c.pending[ts] = n - 1
	} else {
		delete(c.pending, ts)
	}
	c.maxDone = max(c.maxDone, ts)
	next := c.maxDone
	for p := range c.pending {
		if p-1 < next {
			next = p - 1
		}
	}
	c.cursor = max(c.cursor, next)
}

// Cursor returns the current cursor (0: none yet).
func (c *cursorTracker) Cursor() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cursor
}
