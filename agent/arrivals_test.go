package agent

import (
	"fmt"
	"testing"

	"provideragent/driver"
)

// TestArrivalsReleaseInOrder: a mark waits for every event that arrived
// before it, whichever ingest goroutine finishes first; marks after it
// wait with it; events after a mark do not hold it.
func TestArrivalsReleaseInOrder(t *testing.T) {
	a := newArrivals()
	e1 := a.event()
	a.mark(arrivalMark{Mark: driver.Mark{Kind: driver.MarkGap, Relay: "r1"}})
	e2 := a.event()
	a.mark(arrivalMark{Mark: driver.Mark{Kind: driver.MarkOwnBeat, Relay: "r1"}})
	e3 := a.event()
	got := func() string {
		var kinds []driver.MarkKind
		for _, m := range a.released(nil) {
			kinds = append(kinds, m.Kind)
		}
		return fmt.Sprint(kinds)
	}
	if g := got(); g != "[]" {
		t.Fatalf("released with e1 in flight = %s, want none", g)
	}
	a.Done(e2) // finished before e1: the gap still waits for e1
	if g := got(); g != "[]" {
		t.Fatalf("released with e1 in flight (e2 done) = %s, want none", g)
	}
	a.Done(e1)
	if g := got(); g != fmt.Sprint([]driver.MarkKind{driver.MarkGap, driver.MarkOwnBeat}) {
		t.Fatalf("released after e1 and e2 = %s, want the gap and the own beat (e3 came after both)", g)
	}
	a.Done(e3)
	a.Done(0) // an input that came from no relay
	if g := got(); g != "[]" {
		t.Fatalf("released again = %s, want none", g)
	}
	if n := a.open.Len(); n != 0 || len(a.done) != 0 {
		t.Fatalf("after everything finished: %d open, %d done kept, want none", n, len(a.done))
	}
}
