package agentdb

import (
	"container/heap"
	"errors"
	"fmt"
)

// ErrUnknownToken is returned by Done and Failed for a token that was never
// issued or has already been finished.
var ErrUnknownToken = errors.New("unknown cursor token")

// Token identifies one in-flight event of a CursorTracker.
type Token uint64

// CursorTracker computes a relay subscription's safe resume point when
// events are processed concurrently and finish out of order (docs/protocol.md,
// "Relay connections"). A point is an event's created_at in unix seconds.
//
// Safe is the highest point below which every registered event has
// finished: the smallest point still in flight, or, with nothing in flight,
// the highest point seen. Finished events above an unfinished one wait until
// it finishes; then the cursor jumps past all of them at once. An event that
// failed stays in flight (it will be retried, or re-read after a restart).
// The cursor never goes backwards: an event older than the cursor is tracked
// but cannot lower it.
//
// An event that has not been validated yet (its signature and signer still
// to be checked) is registered with Reserve instead of Begin: while in
// flight it holds the cursor back like any other, but its point counts as
// seen only once Accept is called. A reserved event that is finished
// without Accept (rejected: forged, from a stranger, dated in the future)
// never moves the cursor, so one bad event cannot push it past events still
// to come.
//
// CursorTracker is a plain value with no locking; the owner serialises
// calls. Use one per relay.
type CursorTracker struct {
	cursor     int64 // last value of Safe; never decreases
	maxSeen    int64 // highest point begun or accepted
	next       Token
	inflight   map[Token]int64 // point of each unfinished event
	unaccepted map[Token]bool  // reserved tokens not accepted yet
	pending    pointHeap       // points with unfinished events (lazy: may hold finished ones)
	count      map[int64]int   // unfinished events per point
	failures   map[Token]int   // failures per unfinished token
	reported   int64           // cursor value last returned with changed=true
}

// NewCursorTracker returns a tracker resuming at the persisted cursor start
// (0 when none).
func NewCursorTracker(start int64) *CursorTracker {
	if start < 0 {
		start = 0
	}
	return &CursorTracker{
		cursor:     start,
		maxSeen:    start,
		reported:   start,
		inflight:   map[Token]int64{},
		unaccepted: map[Token]bool{},
		count:      map[int64]int{},
		failures:   map[Token]int{},
	}
}

// Begin registers an in-flight event at point and returns its token. Its
// point counts as seen at once (Reserve then Accept, in one call).
func (c *CursorTracker) Begin(point int64) Token {
	t := c.Reserve(point)
	c.see(point)
	delete(c.unaccepted, t)
	return t
}

// Reserve registers an in-flight event at point that has not been validated
// yet: it holds the cursor at or below point until it finishes, but its
// point counts as seen only after Accept. Finishing it with Done without
// Accept drops it without moving the cursor.
func (c *CursorTracker) Reserve(point int64) Token {
	c.next++
	t := c.next
	c.inflight[t] = point
	c.unaccepted[t] = true
	if c.count[point] == 0 {
		heap.Push(&c.pending, point)
	}
	c.count[point]++
	return t
}

// Accept counts a reserved event's point as seen (it passed validation).
// Accepting a token twice, or one from Begin, is not an error.
func (c *CursorTracker) Accept(t Token) error {
	point, ok := c.inflight[t]
	if !ok {
		return fmt.Errorf("accept %d: %w", t, ErrUnknownToken)
	}
	if c.unaccepted[t] {
		delete(c.unaccepted, t)
		c.see(point)
	}
	return nil
}

func (c *CursorTracker) see(point int64) {
	if point > c.maxSeen {
		c.maxSeen = point
	}
}

// Done marks the event finished; a reserved event never accepted is
// dropped without counting its point as seen.
func (c *CursorTracker) Done(t Token) error {
	point, ok := c.inflight[t]
	if !ok {
		return fmt.Errorf("done %d: %w", t, ErrUnknownToken)
	}
	delete(c.inflight, t)
	delete(c.unaccepted, t)
	delete(c.failures, t)
	c.count[point]--
	if c.count[point] == 0 {
		delete(c.count, point)
		// Drop finished points from the top of the heap; points deeper in
		// the heap are dropped lazily when they surface.
		for c.pending.Len() > 0 && c.count[c.pending[0]] == 0 {
			heap.Pop(&c.pending)
		}
	}
	return nil
}

// Failed records that processing the event failed. The event stays in flight
// and keeps holding the cursor back until a retry calls Done. It returns the
// number of failures of this event so far.
func (c *CursorTracker) Failed(t Token) (int, error) {
	if _, ok := c.inflight[t]; !ok {
		return 0, fmt.Errorf("failed %d: %w", t, ErrUnknownToken)
	}
	c.failures[t]++
	return c.failures[t], nil
}

// Point returns the point of an in-flight token.
func (c *CursorTracker) Point(t Token) (int64, bool) {
	point, ok := c.inflight[t]
	return point, ok
}

// InFlight returns the number of unfinished events.
func (c *CursorTracker) InFlight() int { return len(c.inflight) }

// Safe returns the cursor to persist (resume with since = it: every event
// below it has finished) and whether it moved since the last call that
// reported a change. It never exceeds the highest accepted point (or the
// start): an in-flight reserved event above it cannot raise it.
func (c *CursorTracker) Safe() (since int64, changed bool) {
	candidate := c.maxSeen
	for c.pending.Len() > 0 && c.count[c.pending[0]] == 0 {
		heap.Pop(&c.pending)
	}
	if c.pending.Len() > 0 {
		candidate = min(c.pending[0], c.maxSeen)
	}
	if candidate > c.cursor {
		c.cursor = candidate
	}
	if c.cursor != c.reported {
		c.reported = c.cursor
		return c.cursor, true
	}
	return c.cursor, false
}

// pointHeap is a min-heap of points.
type pointHeap []int64

func (h pointHeap) Len() int           { return len(h) }
func (h pointHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h pointHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pointHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *pointHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
