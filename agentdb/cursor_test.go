package agentdb

import (
	"errors"
	"testing"

	"pgregory.net/rapid"
)

// TestCursorSeedWalkthrough replays a min-pending-point walkthrough
// ("track the minimum pending point") with this tracker's rule: once the
// oldest point finishes, the cursor jumps past every finished point above
// it (a plain minimum-pending tracker would persist 100 at step 9; this
// one gives 102).
func TestCursorSeedWalkthrough(t *testing.T) {
	c := NewCursorTracker(0)
	tok := map[string]Token{}
	begin := func(name string, point int64) func() error {
		return func() error { tok[name] = c.Begin(point); return nil }
	}
	done := func(name string) func() error { return func() error { return c.Done(tok[name]) } }
	steps := []struct {
		what        string
		do          func() error
		wantSince   int64
		wantChanged bool
	}{
		{"block 100 arrives (A)", begin("A", 100), 100, true},
		{"block 100 arrives (B)", begin("B", 100), 100, false},
		{"block 100 arrives (C)", begin("C", 100), 100, false},
		{"block 101 arrives (D)", begin("D", 101), 100, false},
		{"block 101 arrives (E)", begin("E", 101), 100, false},
		{"block 102 arrives (F)", begin("F", 102), 100, false},
		{"A completes", done("A"), 100, false},
		{"D completes", done("D"), 100, false},
		{"F completes: 102 done but not the head", done("F"), 100, false},
		{"E completes: 101 done but not the head", done("E"), 100, false},
		{"B completes", done("B"), 100, false},
		{"C completes: jump to 102", done("C"), 102, true},
		{"G arrives at 103", begin("G", 103), 103, true},
		{"G fails: still in flight", func() error { _, err := c.Failed(tok["G"]); return err }, 103, false},
		{"H at 104 completes", func() error { return c.Done(c.Begin(104)) }, 103, false},
		{"G retried and done", done("G"), 104, true},
		{"late event at 50 cannot lower the cursor", begin("L", 50), 104, false},
		{"late event done", done("L"), 104, false},
	}
	for i, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("step %d (%s): %v", i+1, st.what, err)
		}
		since, changed := c.Safe()
		if since != st.wantSince || changed != st.wantChanged {
			t.Errorf("step %d (%s): Safe() = %d, %v, want %d, %v", i+1, st.what, since, changed, st.wantSince, st.wantChanged)
		}
	}
	if c.InFlight() != 0 {
		t.Errorf("InFlight() = %d, want 0", c.InFlight())
	}
}

func TestCursorTokenErrors(t *testing.T) {
	c := NewCursorTracker(10)
	if since, changed := c.Safe(); since != 10 || changed {
		t.Errorf("Safe() of a fresh tracker = %d, %v, want 10, false", since, changed)
	}
	tk := c.Begin(20)
	if p, ok := c.Point(tk); !ok || p != 20 {
		t.Errorf("Point() = %d, %v, want 20, true", p, ok)
	}
	if n, err := c.Failed(tk); n != 1 || err != nil {
		t.Errorf("Failed() = %d, %v, want 1, nil", n, err)
	}
	if n, _ := c.Failed(tk); n != 2 {
		t.Errorf("second Failed() = %d, want 2", n)
	}
	if err := c.Done(tk); err != nil {
		t.Fatal(err)
	}
	if err := c.Done(tk); !errors.Is(err, ErrUnknownToken) {
		t.Errorf("Done(twice) = %v, want ErrUnknownToken", err)
	}
	if _, err := c.Failed(tk); !errors.Is(err, ErrUnknownToken) {
		t.Errorf("Failed(done) = %v, want ErrUnknownToken", err)
	}
	if err := c.Done(999); !errors.Is(err, ErrUnknownToken) {
		t.Errorf("Done(never issued) = %v, want ErrUnknownToken", err)
	}
	if _, ok := c.Point(tk); ok {
		t.Error("Point(done) ok = true, want false")
	}
}

// TestCursorDoneReleasesFinishedPoints: a relay's events finishing in
// order leave nothing behind in the tracker even when Safe is not called
// between them (the agent calls it on a timer, not per event), so its memory
// follows the events in flight, not the events seen.
func TestCursorDoneReleasesFinishedPoints(t *testing.T) {
	tests := []struct {
		name     string
		events   int
		inFlight int // events begun ahead of the one finishing
	}{
		{"one at a time", 1000, 1},
		{"a window of 8", 1000, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCursorTracker(0)
			var window []Token
			for p := range int64(tt.events) {
				window = append(window, c.Begin(p))
				if len(window) < tt.inFlight {
					continue
				}
				if err := c.Done(window[0]); err != nil {
					t.Fatalf("Done(%d) = %v, want nil", window[0], err)
				}
				window = window[1:]
			}
			if got, want := c.pending.Len(), len(window); got > want {
				t.Errorf("points held after %d in-order events with %d in flight = %d, want at most %d",
					tt.events, len(window), got, want)
			}
		})
	}
}

// refEvent is one event in the reference model.
type refEvent struct {
	point     int64
	done      bool
	accepted  bool // Begin, or Reserve then Accept
	atOrAbove bool // point >= cursor when it began
}

// TestCursorMatchesReference checks the tracker against a linear-scan model
// of the rule and against the safety property itself.
func TestCursorMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		start := rapid.Int64Range(0, 50).Draw(t, "start")
		c := NewCursorTracker(start)
		ref := map[Token]*refEvent{}
		refCursor, refReported := start, start
		var live []Token // unfinished tokens

		// maxAccepted is the highest accepted point (or the start).
		maxAccepted := func() int64 {
			m := start
			for _, e := range ref {
				if e.accepted && e.point > m {
					m = e.point
				}
			}
			return m
		}
		refSafe := func() int64 {
			cand, any := int64(0), false
			maxSeen := maxAccepted()
			for _, e := range ref {
				if !e.done && (!any || e.point < cand) {
					cand, any = e.point, true
				}
			}
			if !any || cand > maxSeen {
				cand = maxSeen
			}
			if cand > refCursor {
				refCursor = cand
			}
			return refCursor
		}
		begin := func(t *rapid.T, reserve bool) {
			cur, _ := c.Safe()
			refReported = cur
			p := rapid.Int64Range(0, 120).Draw(t, "point")
			var tk Token
			if reserve {
				tk = c.Reserve(p)
			} else {
				tk = c.Begin(p)
			}
			ref[tk] = &refEvent{point: p, accepted: !reserve, atOrAbove: p >= cur}
			live = append(live, tk)
		}

		t.Repeat(map[string]func(*rapid.T){
			"begin":   func(t *rapid.T) { begin(t, false) },
			"reserve": func(t *rapid.T) { begin(t, true) },
			"accept": func(t *rapid.T) {
				if len(live) == 0 {
					t.Skip("nothing in flight")
				}
				tk := live[rapid.IntRange(0, len(live)-1).Draw(t, "i")]
				if err := c.Accept(tk); err != nil {
					t.Fatalf("Accept(%d) = %v, want nil", tk, err)
				}
				ref[tk].accepted = true
			},
			"done": func(t *rapid.T) {
				if len(live) == 0 {
					t.Skip("nothing in flight")
				}
				i := rapid.IntRange(0, len(live)-1).Draw(t, "i")
				tk := live[i]
				live = append(live[:i], live[i+1:]...)
				if err := c.Done(tk); err != nil {
					t.Fatalf("Done(%d) = %v, want nil", tk, err)
				}
				ref[tk].done = true
			},
			"failed": func(t *rapid.T) {
				if len(live) == 0 {
					t.Skip("nothing in flight")
				}
				tk := live[rapid.IntRange(0, len(live)-1).Draw(t, "i")]
				if _, err := c.Failed(tk); err != nil {
					t.Fatalf("Failed(%d) = %v, want nil", tk, err)
				}
			},
			"": func(t *rapid.T) {
				since, changed := c.Safe()
				want := refSafe()
				if since != want {
					t.Fatalf("Safe() = %d, want %d (reference)", since, want)
				}
				if changed != (since != refReported) {
					t.Fatalf("Safe() changed = %v, want %v (since %d, last %d)", changed, since != refReported, since, refReported)
				}
				if since < refReported {
					t.Fatalf("Safe() = %d went backwards from %d", since, refReported)
				}
				refReported = since
				// Safety: no unfinished event that began at or above the
				// cursor lies below it.
				for tk, e := range ref {
					if !e.done && e.atOrAbove && e.point < since {
						t.Fatalf("Safe() = %d passes unfinished event %d at %d", since, tk, e.point)
					}
				}
				// A reserved event never accepted (rejected) never
				// raises the cursor.
				if m := maxAccepted(); since > m {
					t.Fatalf("Safe() = %d above the highest accepted point %d", since, m)
				}
				if c.InFlight() != len(live) {
					t.Fatalf("InFlight() = %d, want %d", c.InFlight(), len(live))
				}
			},
		})
	})
}

// TestCursorRejectedFutureEventDoesNotMoveIt: an event reserved before
// validation and dropped (a forgery dated in the year 2100) never moves the
// cursor, in flight or after; an accepted one does.
func TestCursorRejectedFutureEventDoesNotMoveIt(t *testing.T) {
	const y2100 = 4102444800
	c := NewCursorTracker(1000)
	forged := c.Reserve(y2100)
	if since, _ := c.Safe(); since != 1000 {
		t.Fatalf("Safe() with a reserved event at 2100 in flight = %d, want 1000", since)
	}
	good := c.Reserve(1010)
	if err := c.Accept(good); err != nil {
		t.Fatal(err)
	}
	if err := c.Done(forged); err != nil {
		t.Fatal(err)
	}
	if since, _ := c.Safe(); since != 1010 {
		t.Fatalf("Safe() with an accepted event at 1010 in flight = %d, want 1010", since)
	}
	if err := c.Done(good); err != nil {
		t.Fatal(err)
	}
	if since, _ := c.Safe(); since != 1010 {
		t.Fatalf("Safe() after the forged event was dropped = %d, want 1010", since)
	}
	if err := c.Accept(forged); !errors.Is(err, ErrUnknownToken) {
		t.Errorf("Accept(finished) = %v, want ErrUnknownToken", err)
	}
}

func BenchmarkCursorTracker(b *testing.B) {
	// Events arrive in order of point and finish in a scrambled order with
	// 1,000 in flight; the baseline does only the map bookkeeping.
	const window = 1000
	b.Run("tracker", func(b *testing.B) {
		c := NewCursorTracker(0)
		ring := make([]Token, window)
		for i := range ring {
			ring[i] = c.Begin(int64(i / 4))
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			j := (i * 7919) % window
			_ = c.Done(ring[j])
			ring[j] = c.Begin(int64((i + window) / 4))
			c.Safe()
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("baseline-map", func(b *testing.B) {
		m := map[int]int64{}
		for i := 0; i < window; i++ {
			m[i] = int64(i / 4)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			j := (i * 7919) % window
			delete(m, j)
			m[j] = int64((i + window) / 4)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}
