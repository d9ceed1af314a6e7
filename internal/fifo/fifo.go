// Package fifo is a first-in first-out queue on a slice whose consumed
// front is released as it goes: popped slots are zeroed (so what they held
// can be collected) and the live part is moved down once the consumed
// front is both more than compactAfter items and more than half the slice.
package fifo

// compactAfter is how many consumed slots the queue keeps before it may
// move its live part down.
const compactAfter = 64

// Queue is a FIFO of T. The zero value is an empty queue.
type Queue[T any] struct {
	items []T
	head  int
}

// Push appends v at the back.
func (q *Queue[T]) Push(v T) { q.items = append(q.items, v) }

// Len is the number of items queued.
func (q *Queue[T]) Len() int { return len(q.items) - q.head }

// Front returns the oldest item; ok is false when the queue is empty.
func (q *Queue[T]) Front() (v T, ok bool) {
	if q.head == len(q.items) {
		return v, false
	}
	return q.items[q.head], true
}

// Pop removes and returns the oldest item; ok is false when the queue is
// empty.
func (q *Queue[T]) Pop() (v T, ok bool) {
	if q.head == len(q.items) {
		return v, false
	}
	v = q.items[q.head]
	var zero T
	q.items[q.head] = zero
	q.head++
	switch {
	case q.head == len(q.items):
		q.items, q.head = q.items[:0], 0
	case q.head > compactAfter && q.head*2 > len(q.items):
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return v, true
}
