package fifo

import "testing"

func TestQueueOrderAndRelease(t *testing.T) {
	var q Queue[*int]
	if _, ok := q.Pop(); ok {
		t.Fatal("Pop() on an empty queue: ok, want not")
	}
	const n = 1000
	vals := make([]int, n)
	for i := range vals {
		vals[i] = i
		q.Push(&vals[i])
	}
	for i := range n {
		if f, ok := q.Front(); !ok || *f != i {
			t.Fatalf("Front() = %v, %v, want %d", f, ok, i)
		}
		v, ok := q.Pop()
		if !ok || *v != i {
			t.Fatalf("Pop() = %v, %v, want %d", v, ok, i)
		}
		if q.Len() != n-1-i {
			t.Fatalf("Len() = %d, want %d", q.Len(), n-1-i)
		}
		// The consumed front holds nothing and never grows past half the
		// slice plus compactAfter.
		for j := 0; j < q.head; j++ {
			if q.items[j] != nil {
				t.Fatalf("slot %d holds %v after it was popped", j, *q.items[j])
			}
		}
		if q.head > compactAfter && q.head*2 > len(q.items) {
			t.Fatalf("head %d of %d: not compacted", q.head, len(q.items))
		}
	}
	if q.Len() != 0 || len(q.items) != 0 {
		t.Fatalf("after popping all: Len %d, slice %d, want 0, 0", q.Len(), len(q.items))
	}
}
