package checkpoint

import (
	"sort"
	"time"
)

// DefaultPublishEvery is the least time between the starts of two
// publishes of one workload. A record's created_at is whole seconds and
// must rise within an epoch (relays keep the newest record by it), so
// records published faster than one a second would be dated ahead of the
// clock, further with each one, until a restore refused the newest as
// made after its successor's start.
const DefaultPublishEvery = time.Second

// Pacer decides when each workload's new checkpoints are published: one
// publish of a workload at a time, starts at least Every apart, and of
// the checkpoints noticed meanwhile only the newest (the newest file
// wins: a publish reads the file as it is when it starts). Time is an
// input; the caller starts what Due returns, calls Done when that publish
// ends, and calls Due again at Wake. It is not safe for concurrent use
// (the agent's checkpoint loop owns it).
type Pacer struct {
	every time.Duration
	ws    map[string]*paced
}

type paced struct {
	busy    bool      // a publish is in flight
	started time.Time // when the last publish started
	held    *Change   // the newest checkpoint waiting, if any
}

// NewPacer starts publishes at least every apart (DefaultPublishEvery
// when <= 0).
func NewPacer(every time.Duration) *Pacer {
	if every <= 0 {
		every = DefaultPublishEvery
	}
	return &Pacer{every: every, ws: map[string]*paced{}}
}

// Offer holds c, replacing the workload's checkpoint already waiting: it
// is started by the next Due that finds the workload idle and Every
// passed since its last start.
func (p *Pacer) Offer(c Change) {
	w := p.ws[c.Workload]
	if w == nil {
		w = &paced{}
		p.ws[c.Workload] = w
	}
	w.held = &c
}

// Done records that the workload's publish in flight ended.
func (p *Pacer) Done(workload string) {
	if w := p.ws[workload]; w != nil {
		w.busy = false
	}
}

// Forget drops what is held for workload (it is no longer watched); a
// publish in flight still ends with Done.
func (p *Pacer) Forget(workload string) {
	if w := p.ws[workload]; w != nil {
		w.held = nil
	}
}

// Due returns the held checkpoints that may start at now, in workload
// order, and marks them started.
func (p *Pacer) Due(now time.Time) []Change {
	var out []Change
	for id, w := range p.ws {
		switch {
		case w.busy:
		case w.held == nil:
			if now.Sub(w.started) >= p.every {
				delete(p.ws, id) // idle long enough: nothing to remember
			}
		case now.Sub(w.started) >= p.every:
			out = append(out, *w.held)
			w.held, w.busy, w.started = nil, true, now
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Workload < out[j].Workload })
	return out
}

// Wake is when Due next has something that waits only for time (zero
// when nothing does: what is held waits for a publish in flight, or
// nothing is held).
func (p *Pacer) Wake() time.Time {
	var at time.Time
	for _, w := range p.ws {
		if w.busy || w.held == nil {
			continue
		}
		if t := w.started.Add(p.every); at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at
}
