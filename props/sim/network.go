package sim

// The network between providers and relays: connections and subscriptions,
// the delay, loss and duplication of each leg, and delivery to a provider
// that is up (or at its resume, when paused).

import "time"

// deliver runs fn on provider p now (or at resume if paused), provided the
// same incarnation is still up.
func (s *Sim) deliver(p *provider, inc uint64, fn func(now time.Time)) {
	if !p.up || p.incarnation != inc {
		return
	}
	if p.paused {
		p.inbox = append(p.inbox, func() {
			if p.up && p.incarnation == inc {
				fn(p.clock.Local(s.now))
			}
		})
		return
	}
	fn(p.clock.Local(s.now))
}

func (s *Sim) usable(p ProviderID, r RelayID) bool {
	return s.provs[p].up && s.relays[r].up && !s.links[p][r].partitioned
}

func (s *Sim) disconnect(p ProviderID, r RelayID) {
	l := s.links[p][r]
	if l.connected || l.connecting {
		l.gen++
	}
	l.connected = false
	l.connecting = false
}

func (s *Sim) maybeConnect(p ProviderID, r RelayID) {
	l := s.links[p][r]
	if l.connected || l.connecting || !s.usable(p, r) {
		return
	}
	l.connecting = true
	l.gen++
	gen := l.gen
	var d time.Duration
	if s.cfg.ReconnectDelay > 0 {
		d = time.Duration(s.rng.Int64N(int64(s.cfg.ReconnectDelay) + 1))
	}
	s.schedule(s.now+d, func() {
		if l.gen != gen || !l.connecting {
			return
		}
		l.connecting = false
		if !s.usable(p, r) {
			l.gen++
			return
		}
		l.connected = true
		l.gen++
		pr := s.provs[p]
		s.deliver(pr, pr.incarnation, func(now time.Time) { pr.node.Connected(envFor(s, pr), now, r) })
		s.syncSubscription(p, r)
	})
}

// syncSubscription sends relay r's stored events then EOSE to p (once r
// thaws, when it is frozen).
func (s *Sim) syncSubscription(p ProviderID, r RelayID) {
	if rs := s.relays[r]; rs.isFrozen {
		l, gen := s.links[p][r], s.links[p][r].gen
		rs.frozen = append(rs.frozen, func() {
			if l.gen == gen && l.connected {
				s.syncSubscription(p, r)
			}
		})
		return
	}
	evs := s.Stored(r)
	since := s.provs[p].node.Since()
	for _, ev := range evs {
		if !subscribed(ev.Kind) || (ev.Kind != KindHeartbeat && ev.CreatedAt < since) {
			continue
		}
		s.sendDown(p, r, ev.Author, func(pr *provider, inc uint64) {
			ev := ev
			s.deliver(pr, inc, func(now time.Time) { s.receive(pr, now, r, ev) })
		}, true)
	}
	s.sendDown(p, r, -1, func(pr *provider, inc uint64) {
		s.deliver(pr, inc, func(now time.Time) { pr.node.EOSE(envFor(s, pr), now, r) })
	}, false)
}

func (s *Sim) legDelay(l *link, extra time.Duration) time.Duration {
	var d time.Duration
	if s.cfg.LegDelay > 0 {
		d = time.Duration(s.rng.Int64N(int64(s.cfg.LegDelay) + 1))
	}
	return d + l.extra + extra
}

// lost reports whether a message on link l is lost (LinkFaults.LossPct).
// A connection delivers every message or ends (TCP retransmits; a relay
// drops a subscriber it cannot serve rather than skip events to it: the
// delivery assumption), so a lost message ends the connection: what was in
// flight on it is lost with it, and the provider connects again (a new
// stream, Node.Connected) after the reconnect delay.
func (s *Sim) lost(p ProviderID, r RelayID, l *link) bool {
	if l.lossPct == 0 || s.rng.IntN(100) >= l.lossPct {
		return false
	}
	s.disconnect(p, r)
	s.maybeConnect(p, r)
	return true
}

// sendDown schedules fn on p after a relay-to-provider leg on link (p, r),
// subject to loss, duplication and FIFO order. author (or -1) selects any
// path-specific extra delay. dupable events may be delivered twice.
func (s *Sim) sendDown(p ProviderID, r RelayID, author ProviderID, fn func(*provider, uint64), dupable bool) {
	l := s.links[p][r]
	if !l.connected || s.lost(p, r, l) {
		return
	}
	pr := s.provs[p]
	inc := pr.incarnation
	gen := l.gen
	var extra time.Duration
	if author >= 0 {
		extra = s.pathExtra[[3]int{int(author), int(r), int(p)}]
	}
	at := s.now + s.legDelay(l, extra)
	if !l.reorder && extra == 0 {
		// FIFO per connection; a path-delayed event is held back by the
		// relay and does not block the events behind it.
		if at < l.lastDown {
			at = l.lastDown
		}
		l.lastDown = at
	}
	run := func() {
		if l.gen != gen || !l.connected {
			return
		}
		fn(pr, inc)
	}
	s.schedule(at, run)
	if dupable && l.dupPct > 0 && s.rng.IntN(100) < l.dupPct {
		s.schedule(at+s.legDelay(l, extra), run)
	}
}

// sendUp schedules fn at relay r after a provider-to-relay leg; it returns
// false when the message cannot leave (link not connected).
func (s *Sim) sendUp(p ProviderID, r RelayID, fn func(), dupable bool) bool {
	l := s.links[p][r]
	if !l.connected {
		return false
	}
	if s.lost(p, r, l) {
		return true // lost with its connection; the sender cannot tell yet
	}
	gen := l.gen
	at := s.now + s.legDelay(l, 0)
	if !l.reorder {
		if at < l.lastUp {
			at = l.lastUp
		}
		l.lastUp = at
	}
	var run func()
	run = func() {
		if l.gen != gen || !l.connected || !s.relays[r].up {
			return
		}
		if rs := s.relays[r]; rs.isFrozen {
			rs.frozen = append(rs.frozen, run)
			return
		}
		fn()
	}
	s.schedule(at, run)
	if dupable && l.dupPct > 0 && s.rng.IntN(100) < l.dupPct {
		s.schedule(at+s.legDelay(l, 0), run)
	}
	return true
}
