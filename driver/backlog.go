package driver

import (
	"time"

	"provideragent/internal/fifo"
	"provideragent/lease"
)

// Bulk work never starves the caller. A step that concerns more than
// Config.CommitBatch workloads (a quorum loss evicting 10,000 workloads at
// once, a restart's sync resuming them all) is committed in pieces: its
// stops and reports are performed at once, as for any step (fencing never
// waits), then the first CommitBatch workloads are committed with it and
// the rest wait in the backlog, one batch per DrainBacklog. Each
// workload's effects stay whole and in order within one commit, with its
// outbox rows (built when its batch is committed, not all at once); a later
// step that concerns a workload still in the backlog takes its piece along,
// so a row is never written without the outbox rows of the transitions it
// records. The tokens of a step finish only when its last piece is
// committed, and Save writes no row of a workload in the backlog.

// timedEffect is an effect with the time of the step that made it (the
// created_at of its outbox event).
type timedEffect struct {
	e  lease.Effect
	at time.Time
}

// tokGroup holds a step's tokens until all its pieces are committed.
type tokGroup struct {
	toks []Token
	left int
}

// piece is one workload's effects of one or more steps, committed together.
type piece struct {
	id     string
	effs   []timedEffect
	groups []*tokGroup
	taken  bool // merged into a later step's piece: skip it in the queue
}

// backlog is the queue of pieces waiting for their commit.
type backlog struct {
	queue fifo.Queue[*piece]
	byID  map[string]*piece
}

func (b *backlog) len() int { return len(b.byID) }

func (b *backlog) empty() bool { return len(b.byID) == 0 }

// has reports whether workload id waits in the backlog.
func (b *backlog) has(id string) bool {
	_, ok := b.byID[id]
	return ok
}

// split cuts a step's effects into one piece per workload, in first-seen
// order, each taking along the backlog's piece of the same workload (which
// must commit with it). The step's tokens finish with its last piece.
func (b *backlog) split(now time.Time, effs []lease.Effect, toks []Token) ([]*piece, *tokGroup) {
	g := &tokGroup{toks: toks}
	var out []*piece
	idx := map[string]*piece{}
	for _, e := range effs {
		id := e.Workload()
		p := idx[id]
		if p == nil {
			p = &piece{id: id, groups: []*tokGroup{g}}
			if old := b.byID[id]; old != nil {
				delete(b.byID, id)
				p.effs = append(p.effs, old.effs...)
				p.groups = append(old.groups, g)
				// The taken piece stays in the queue until next skips
				// it: it must not hold its effects there too (a mass
				// event's steps would keep every earlier copy).
				old.taken, old.effs, old.groups = true, nil, nil
			}
			idx[id] = p
			out = append(out, p)
			g.left++
		}
		p.effs = append(p.effs, timedEffect{e: e, at: now})
	}
	return out, g
}

// push queues pieces for later commits.
func (b *backlog) push(ps []*piece) {
	if b.byID == nil {
		b.byID = map[string]*piece{}
	}
	for _, p := range ps {
		b.byID[p.id] = p
		b.queue.Push(p)
	}
}

// next takes up to n pieces from the front of the queue.
func (b *backlog) next(n int) []*piece {
	var out []*piece
	for len(out) < n {
		p, ok := b.queue.Pop()
		if !ok {
			break
		}
		if p.taken {
			continue
		}
		delete(b.byID, p.id)
		out = append(out, p)
	}
	return out
}

// done counts pieces as committed and returns the tokens of the steps
// whose last piece they were.
func done(ps []*piece) []Token {
	var out []Token
	for _, p := range ps {
		for _, g := range p.groups {
			g.left--
			if g.left == 0 {
				out = append(out, g.toks...)
			}
		}
	}
	return out
}

// flatten lists the pieces' effects in order, with and without their
// times, and their workloads.
func flatten(ps []*piece) ([]timedEffect, []lease.Effect, []string) {
	var timed []timedEffect
	var plain []lease.Effect
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.id
		timed = append(timed, p.effs...)
		for _, te := range p.effs {
			plain = append(plain, te.e)
		}
	}
	return timed, plain, ids
}
