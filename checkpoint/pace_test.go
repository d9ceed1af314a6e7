package checkpoint_test

import (
	"testing"
	"time"

	"provideragent/checkpoint"
)

// TestPacerCoalesces: checkpoints noticed faster than one a second are
// published at most once a second per workload, one at a time, and of
// those noticed meanwhile only the newest; workloads are paced apart.
func TestPacerCoalesces(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ch := func(id string, ino uint64) checkpoint.Change {
		return checkpoint.Change{Workload: id, Epoch: 1, Info: checkpoint.Info{ID: checkpoint.FileID{Ino: ino}}}
	}
	p := checkpoint.NewPacer(time.Second)
	due := func(ms int) []uint64 {
		var inos []uint64
		for _, c := range p.Due(at(ms)) {
			inos = append(inos, c.Info.ID.Ino)
		}
		return inos
	}
	same := func(step string, got []uint64, want ...uint64) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: Due = %v, want %v", step, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: Due = %v, want %v", step, got, want)
			}
		}
	}

	p.Offer(ch("a", 1))
	same("first checkpoint", due(0), 1)
	if w := p.Wake(); !w.IsZero() {
		t.Errorf("Wake with nothing held = %v, want zero", w)
	}
	// 29 more within the next 600 ms, while the first is in flight: held,
	// each replacing the one before.
	for i := 2; i <= 30; i++ {
		p.Offer(ch("a", uint64(i)))
		same("while one is in flight", due(i*20))
	}
	if w := p.Wake(); !w.IsZero() {
		t.Errorf("Wake while the held one waits for the publish in flight = %v, want zero", w)
	}
	p.Done("a") // the first publish took 700 ms
	same("done before the second is up", due(700))
	if w := p.Wake(); !w.Equal(at(1000)) {
		t.Errorf("Wake = %v, want one second after the first start (%v)", w, at(1000))
	}
	same("one second after the first start: only the newest", due(1000), 30)

	// A publish longer than a second: the next starts when it ends.
	p.Offer(ch("a", 31))
	same("in flight", due(2500))
	p.Done("a")
	same("after a long publish", due(2600), 31)
	p.Done("a")

	// Workloads are paced apart; Forget drops what a workload holds.
	p.Offer(ch("b", 1))
	p.Offer(ch("a", 32))
	same("b at once, a a second after its last start", due(2700), 1)
	p.Forget("a")
	p.Done("b")
	same("a forgotten", due(3700))
	p.Offer(ch("b", 2))
	same("b a second after its start", due(3700), 2)
}
