package sim

// What relays do with events: publish and fan-out to subscribers, storage
// (one replaceable event per key, heartbeats pruned), and queries.

import "time"

// newEventID draws a fresh event id (never 0).
func (s *Sim) newEventID() EventID {
	for {
		id := EventID(s.rng.Uint64())
		if id != 0 {
			return id
		}
	}
}

func (s *Sim) publish(p *provider, ev Event, to []RelayID) EventID {
	ev.ID = s.newEventID()
	ev.Author = p.id
	ev.SentAt = s.now
	if b, ok := ev.Body.(LeaseCheckpoint); ok {
		e, live := p.node.Live(b.Workload)
		ev.AuthorHeldLive = live && e == b.Epoch
	}
	return s.send(p, &ev, to)
}

// subscribed reports whether the nodes' subscriptions match events of
// kind k: a relay fans out and catches up only those. Checkpoint records
// are read by query (the agent subscribes to no kind 38387).
func subscribed(k Kind) bool { return k != KindCheckpoint }

func (s *Sim) send(p *provider, e *Event, to []RelayID) EventID {
	if to == nil {
		for r := range s.relays {
			to = append(to, RelayID(r))
		}
	}
	inc := p.incarnation
	for _, r := range to {
		r := r
		done := false
		result := func(ok bool) {
			if done {
				return
			}
			done = true
			s.deliver(p, inc, func(now time.Time) { p.node.PublishResult(envFor(s, p), now, r, e.ID, ok) })
		}
		sent := s.sendUp(p.id, r, func() {
			stored := s.store(r, e)
			// OK back to the publisher, then fan-out to subscribers.
			s.sendDown(p.id, r, -1, func(*provider, uint64) { result(true) }, false)
			if stored && subscribed(e.Kind) {
				s.fanOut(r, e)
			}
		}, true)
		if !sent {
			s.schedule(s.now, func() { result(false) })
			continue
		}
		s.schedule(s.now+s.cfg.PublishTimeout, func() { result(false) })
	}
	return e.ID
}

func (s *Sim) fanOut(r RelayID, e *Event) {
	for q := range s.provs {
		s.sendDown(ProviderID(q), r, e.Author, func(pr *provider, inc uint64) {
			s.deliver(pr, inc, func(now time.Time) { s.receive(pr, now, r, e) })
		}, true)
	}
}

func keyOf(e *Event) storeKey {
	k := storeKey{kind: e.Kind, author: e.Author, d: e.D}
	if e.D == "" {
		k.id = e.ID
	}
	return k
}

// store applies NIP-01 replacement on relay r and reports whether e is now
// stored (false for a duplicate or an older version).
func (s *Sim) store(r RelayID, e *Event) bool {
	rs := s.relays[r]
	k := keyOf(e)
	if old, ok := rs.store[k]; ok {
		if old.ID == e.ID {
			return false
		}
		if old.CreatedAt > e.CreatedAt || (old.CreatedAt == e.CreatedAt && old.ID < e.ID) {
			return false
		}
	}
	_, replaced := rs.store[k]
	rs.store[k] = e
	if e.Kind == KindHeartbeat && !replaced {
		rs.hbs[e.Author]++
		if rs.hbs[e.Author] > 2*s.cfg.KeepHeartbeats {
			s.pruneHeartbeats(rs, e.Author)
		}
	}
	return true
}

// pruneHeartbeats keeps the newest KeepHeartbeats heartbeats of author (a
// relay keeps between KeepHeartbeats and twice that many).
func (s *Sim) pruneHeartbeats(rs *relayState, author ProviderID) {
	var hs []*Event
	for k, ev := range rs.store {
		if k.kind == KindHeartbeat && k.author == author {
			hs = append(hs, ev)
		}
	}
	rs.hbs[author] = len(hs)
	if len(hs) <= s.cfg.KeepHeartbeats {
		return
	}
	sortEvents(hs)
	for _, ev := range hs[:len(hs)-s.cfg.KeepHeartbeats] {
		delete(rs.store, keyOf(ev))
	}
	rs.hbs[author] = s.cfg.KeepHeartbeats
}

func (s *Sim) query(p *provider, r RelayID, match func(*Event) bool) QueryID {
	s.nextQuery++
	q := s.nextQuery
	inc := p.incarnation
	done := false
	result := func(evs []*Event, ok bool) {
		if done {
			return
		}
		done = true
		s.deliver(p, inc, func(now time.Time) { p.node.QueryResult(envFor(s, p), now, r, q, evs, ok) })
	}
	sent := s.sendUp(p.id, r, func() {
		var evs []*Event
		for _, ev := range s.Stored(r) {
			if match(ev) {
				evs = append(evs, ev)
			}
		}
		s.sendDown(p.id, r, -1, func(*provider, uint64) { result(evs, true) }, false)
	}, false)
	if !sent {
		s.schedule(s.now, func() { result(nil, false) })
		return q
	}
	s.schedule(s.now+s.cfg.QueryTimeout, func() { result(nil, false) })
	return q
}
