package sim

import (
	"fmt"
	"time"
)

// env is the simulator as one provider's Node sees it (Env): publishing,
// querying, starting and stopping the workload's process, timers, pauses
// and crashes of its agent, and the timeline.
type env struct {
	s *Sim
	p *provider
}

func envFor(s *Sim, p *provider) Env { return env{s: s, p: p} }

func (e env) Self() ProviderID { return e.p.id }
func (e env) NumRelays() int   { return len(e.s.relays) }
func (e env) Publish(ev Event, to []RelayID) EventID {
	return e.s.publish(e.p, ev, to)
}
func (e env) Republish(ev Event, to []RelayID) {
	ev.Author = e.p.id
	if ev.SentAt == 0 {
		ev.SentAt = e.s.now
	}
	e.s.send(e.p, &ev, to)
}
func (e env) Report(v any) {
	for _, pb := range e.s.reportProbes {
		pb(e.p.id, v)
	}
}
func (e env) NewEventID() EventID { return e.s.newEventID() }
func (e env) Query(r RelayID, match func(*Event) bool) QueryID {
	return e.s.query(e.p, r, match)
}
func (e env) Start(w string, epoch uint64) {
	if op := e.p.stopping[w]; op != nil {
		op.restart = epoch
		e.Logf("workload %s start (epoch %d) waits for its stop", w, epoch)
		return
	}
	e.s.start(e.p, w, epoch)
}
func (e env) Stop(w string) {
	s, p := e.s, e.p
	if _, ok := p.running[w]; !ok {
		return
	}
	if op := p.stopping[w]; op != nil {
		op.restart = 0 // a start queued behind the stop is superseded
		return
	}
	var d time.Duration
	if s.cfg.StopTime > 0 {
		d = time.Duration(s.rng.Int64N(int64(s.cfg.StopTime) + 1))
	}
	if d == 0 {
		delete(p.running, w)
		e.Logf("workload %s STOPPED", w)
		return
	}
	op := &stopOp{}
	p.stopping[w] = op
	e.Logf("workload %s STOPPING (done in %v)", w, d.Round(time.Millisecond))
	s.After(d, func() {
		if p.stopping[w] != op {
			return // killed meanwhile (stopAll)
		}
		delete(p.stopping, w)
		delete(p.running, w)
		s.trace = append(s.trace, Entry{At: s.now, Who: p.name, What: "workload " + w + " STOPPED"})
		if op.restart != 0 {
			s.start(p, w, op.restart)
		}
	})
}

// start runs workload w at epoch on p (not already running at it).
func (s *Sim) start(p *provider, w string, epoch uint64) {
	if old, ok := p.running[w]; ok && old == epoch {
		return
	}
	s.starts++
	if epoch > s.maxEpoch {
		s.maxEpoch = epoch
	}
	p.running[w] = epoch
	s.trace = append(s.trace, Entry{At: s.now, Who: p.name, What: fmt.Sprintf("workload %s STARTED (epoch %d)", w, epoch)})
}

func (e env) Running(w string) (uint64, bool) {
	ep, ok := e.p.running[w]
	return ep, ok
}
func (e env) At(local time.Time, tag any) {
	p, s, inc := e.p, e.s, e.p.incarnation
	var fire func()
	fire = func() {
		if p.clock.Local(s.now).Before(local) { // not yet on the local clock
			s.schedule(max(p.clock.Sim(local), s.now+time.Microsecond), fire)
			return
		}
		s.deliver(p, inc, func(now time.Time) { p.node.Timer(envFor(s, p), now, tag) })
	}
	s.schedule(p.clock.Sim(local), fire)
}
func (e env) Stall(d time.Duration) {
	s, p, inc := e.s, e.p, e.p.incarnation
	s.schedule(s.now, func() {
		if p.up && p.incarnation == inc {
			s.PauseFor(p.id, d)
		}
	})
}
func (e env) CrashAgent(d time.Duration) {
	s, p, inc := e.s, e.p, e.p.incarnation
	s.schedule(s.now, func() {
		if !p.up || p.incarnation != inc {
			return
		}
		s.CrashProvider(p.id, false)
		s.After(d, func() { s.RestartProvider(p.id) })
	})
}
func (e env) Logf(format string, args ...any) {
	e.s.trace = append(e.s.trace, Entry{At: e.s.now, Who: e.p.name, What: fmt.Sprintf(format, args...)})
}
