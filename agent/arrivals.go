package agent

import (
	"sync"

	"provideragent/driver"
	"provideragent/internal/fifo"
)

// arrivals keeps what each relay's stream shows in the order the stream
// delivered it, for lease's relay watch (lease/watch.go): a relay's
// connections beginning and ending (Gap markers), its catch-ups ending
// (EOSE markers) and copies of our own heartbeats. Other events reach the
// machine through two ingest goroutines that verify them concurrently, so
// one that arrived before a mark may be fed after it; a mark is released
// only once every event that arrived before it has been fed or dropped.
// Otherwise an own heartbeat (fed at once, for quorum) could show silence
// on a relay while a holder's heartbeat that came before it still waited
// to be verified.
//
// Safe for concurrent use: routeLoop numbers and records arrivals, ingest
// drops events, the machine loop marks fed ones and takes released marks.
type arrivals struct {
	mu   sync.Mutex
	next uint64                  // number of the next arrival (from 1)
	open fifo.Queue[uint64]      // events on their way, in arrival order
	done map[uint64]struct{}     // fed or dropped, not yet at open's front
	hold fifo.Queue[arrivalMark] // marks, in arrival order
}

// arrivalMark is one mark (driver.Mark: a gap when Received.Gap, a sync
// at Received.EOSE, an own heartbeat) with its arrival number.
type arrivalMark struct {
	seq uint64
	driver.Mark
}

func newArrivals() *arrivals { return &arrivals{done: map[uint64]struct{}{}} }

// event numbers an event that goes to ingest; Done must follow once it
// was fed to the machine or dropped.
func (a *arrivals) event() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.next++
	a.open.Push(a.next)
	return a.next
}

// mark records a mark after every arrival so far.
func (a *arrivals) mark(m arrivalMark) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.next++
	m.seq = a.next
	a.hold.Push(m)
}

// Done records that event seq (from event) was fed or dropped.
func (a *arrivals) Done(seq uint64) {
	if seq == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.done[seq] = struct{}{}
	for {
		front, ok := a.open.Front()
		if !ok {
			break
		}
		if _, fin := a.done[front]; !fin {
			break
		}
		delete(a.done, front)
		a.open.Pop()
	}
}

// released appends to out, and removes, the marks every earlier event of
// which has been fed or dropped.
func (a *arrivals) released(out []arrivalMark) []arrivalMark {
	a.mu.Lock()
	defer a.mu.Unlock()
	first, waiting := a.open.Front()
	for {
		m, ok := a.hold.Front()
		if !ok || (waiting && first < m.seq) {
			return out
		}
		out = append(out, m)
		a.hold.Pop()
	}
}
