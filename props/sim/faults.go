package sim

import (
	"fmt"
	"time"
)

// Partition cuts the link between provider p and relay r: the connection
// drops and messages in flight on it are lost.
func (s *Sim) Partition(p ProviderID, r RelayID) {
	l := s.links[p][r]
	if l.partitioned {
		return
	}
	l.partitioned = true
	s.disconnect(p, r)
	s.Logf("partition %s-R%d", s.provs[p].name, r)
}

// Heal restores the link between p and r; the provider reconnects and
// resubscribes (stored events, then EOSE).
func (s *Sim) Heal(p ProviderID, r RelayID) {
	l := s.links[p][r]
	if !l.partitioned {
		return
	}
	l.partitioned = false
	s.Logf("heal %s-R%d", s.provs[p].name, r)
	s.maybeConnect(p, r)
}

// CrashRelay takes relay r down; with wipe it also loses its stored events.
func (s *Sim) CrashRelay(r RelayID, wipe bool) {
	rs := s.relays[r]
	if !rs.up {
		return
	}
	if wipe {
		if c := s.claimAtRisk(r); c != "" {
			s.Logf("relay R%d would lose %s: crashes keeping its storage (the storage assumption)", r, c)
			wipe = false
		}
	}
	rs.up = false
	rs.isFrozen, rs.frozen = false, nil
	if wipe {
		rs.store = map[storeKey]*Event{}
		rs.hbs = map[ProviderID]int{}
	}
	for p := range s.provs {
		s.disconnect(ProviderID(p), r)
	}
	if wipe {
		s.Logf("relay R%d crashed and lost its storage", r)
	} else {
		s.Logf("relay R%d crashed", r)
	}
}

// FreezeRelay stalls relay r for everyone: it keeps its connections and
// takes every message, but handles none (no OK, no fan-out, no query
// answer, no subscription catch-up) until ThawRelay, which handles them in
// the order they came. A relay stuck behind a slow disk or a blocked
// writer does this; publishers time out meanwhile.
func (s *Sim) FreezeRelay(r RelayID) {
	rs := s.relays[r]
	if rs.isFrozen {
		return
	}
	rs.isFrozen = true
	s.Logf("relay R%d freezes", r)
}

// ThawRelay ends FreezeRelay.
func (s *Sim) ThawRelay(r RelayID) {
	rs := s.relays[r]
	if !rs.isFrozen {
		return
	}
	rs.isFrozen = false
	s.Logf("relay R%d thaws (%d messages waited)", r, len(rs.frozen))
	q := rs.frozen
	rs.frozen = nil
	for _, fn := range q {
		fn()
	}
}

// RestartRelay brings relay r back; providers reconnect.
func (s *Sim) RestartRelay(r RelayID) {
	rs := s.relays[r]
	if rs.up {
		return
	}
	rs.up = true
	s.Logf("relay R%d restarted", r)
	for p := range s.provs {
		s.maybeConnect(ProviderID(p), r)
	}
}

// CrashProvider stops provider p's agent. nodeCrash models a node crash:
// the workload process dies with it. Otherwise only the agent dies, and its
// workload follows it within Config.AgentDeathGrace (the real backend's
// supervisor sees the agent die, sends SIGTERM and SIGKILL after the stop
// grace); a restart before then kills it as a leftover first. A negative
// AgentDeathGrace models workloads that outlive their agent until it
// restarts (what the single-writer guarantee must not rest on).
func (s *Sim) CrashProvider(p ProviderID, nodeCrash bool) {
	pr := s.provs[p]
	if !pr.up {
		return
	}
	pr.up = false
	pr.paused = false
	pr.inbox = nil
	pr.incarnation++
	for r := range s.relays {
		s.disconnect(p, RelayID(r))
	}
	pr.node.Crash()
	switch {
	case nodeCrash:
		s.Logf("%s node crashed (workload killed)", pr.name)
		s.stopAll(pr, "node crash")
	case s.cfg.AgentDeathGrace < 0:
		s.Logf("%s agent crashed (workload left running)", pr.name)
	default:
		s.Logf("%s agent crashed (its workload follows within %v)", pr.name, s.cfg.AgentDeathGrace)
		inc := pr.incarnation
		s.After(s.cfg.AgentDeathGrace, func() {
			if pr.incarnation == inc {
				s.stopAll(pr, "its agent died")
			}
		})
	}
}

// stopAll stops every workload process of pr (not through its node).
func (s *Sim) stopAll(pr *provider, why string) {
	clear(pr.stopping)
	for w := range pr.running {
		delete(pr.running, w)
		s.trace = append(s.trace, Entry{At: s.now, Who: pr.name, What: "workload " + w + " STOPPED (" + why + ")"})
	}
}

// Kill crash-stops provider p for good (node and workload gone).
func (s *Sim) Kill(p ProviderID) {
	pr := s.provs[p]
	s.CrashProvider(p, true)
	s.stopAll(pr, "node gone") // the agent was already down: the node goes now
	pr.dead = true
	s.Logf("%s is gone for good", s.provs[p].name)
}

// RestartProvider boots a crashed (not killed) provider from its persisted state.
func (s *Sim) RestartProvider(p ProviderID) {
	pr := s.provs[p]
	if pr.up || pr.dead {
		return
	}
	s.Logf("%s restarts from persisted state", pr.name)
	if s.cfg.AgentDeathGrace >= 0 {
		s.stopAll(pr, "leftover killed at agent start")
	}
	s.bootProvider(pr)
}

// Pause stalls provider p's agent (a GC-style stop-the-world): it handles
// nothing until Resume, its sockets stay open and buffer, its workload keeps
// running.
func (s *Sim) Pause(p ProviderID) {
	pr := s.provs[p]
	if !pr.up || pr.paused {
		return
	}
	pr.paused = true
	s.Logf("%s paused", pr.name)
}

// Resume ends a pause; buffered deliveries, results and timers run now, in
// arrival order.
func (s *Sim) Resume(p ProviderID) {
	pr := s.provs[p]
	if !pr.up || !pr.paused {
		return
	}
	pr.paused = false
	s.Logf("%s resumed", pr.name)
	inbox := pr.inbox
	pr.inbox = nil
	for _, fn := range inbox {
		if pr.paused || !pr.up {
			break
		}
		fn()
	}
}

// LinkFaults degrade one provider-relay link.
type LinkFaults struct {
	LossPct int           // each message lost with this probability (percent), ending its connection
	DupPct  int           // each event delivered twice with this probability
	Reorder bool          // no FIFO order on the link
	Extra   time.Duration // added to every leg (exceeds LegDelay when > 0)
}

// SetLinkFaults sets the degradation of link (p, r).
func (s *Sim) SetLinkFaults(p ProviderID, r RelayID, f LinkFaults) {
	l := s.links[p][r]
	l.lossPct, l.dupPct, l.reorder, l.extra = f.LossPct, f.DupPct, f.Reorder, f.Extra
	s.Logf("link %s-R%d: loss %d%% dup %d%% reorder %v extra delay %v", s.provs[p].name, r, f.LossPct, f.DupPct, f.Reorder, f.Extra)
}

// SetPathDelay adds d to every delivery of author's events from relay r to
// receiver (an adversarial per-message delay; 0 removes it).
func (s *Sim) SetPathDelay(author ProviderID, r RelayID, receiver ProviderID, d time.Duration) {
	k := [3]int{int(author), int(r), int(receiver)}
	if d == 0 {
		delete(s.pathExtra, k)
	} else {
		s.pathExtra[k] = d
	}
	s.Logf("events of %s from R%d to %s delayed by %v", s.provs[author].name, r, s.provs[receiver].name, d)
}

// ReplayHeartbeats makes relay r re-send every stored heartbeat (old ones
// included) to its current subscribers.
func (s *Sim) ReplayHeartbeats(r RelayID) {
	if !s.relays[r].up {
		return
	}
	s.Logf("relay R%d replays its stored heartbeats", r)
	for _, ev := range s.Stored(r) {
		if ev.Kind == KindHeartbeat {
			s.fanOut(r, ev)
		}
	}
}

// After runs fn (a world action such as Resume or RestartRelay) d from now.
func (s *Sim) After(d time.Duration, fn func()) {
	s.schedule(s.now+d, fn)
}

// PauseFor pauses provider p and resumes it d later.
func (s *Sim) PauseFor(p ProviderID, d time.Duration) {
	if !s.provs[p].up || s.provs[p].paused {
		return
	}
	s.Pause(p)
	inc := s.provs[p].incarnation
	s.After(d, func() {
		if s.provs[p].incarnation == inc {
			s.Resume(p)
		}
	})
}

// Describe summarises every provider's node state, for logs.
func (s *Sim) Describe() string {
	out := ""
	for _, p := range s.provs {
		st := p.node.Describe()
		switch {
		case p.dead:
			st = "dead"
		case !p.up:
			st = "down"
		case p.paused:
			st += " (paused)"
		}
		out += fmt.Sprintf("%s:%s ", p.name, st)
	}
	return out
}

// ExitWorkload makes provider p's workload process exit (it crashed on its
// own); the agent hears of it at once, or at resume when paused.
func (s *Sim) ExitWorkload(p ProviderID, w string) {
	pr := s.provs[p]
	epoch, ok := pr.running[w]
	if !ok {
		return
	}
	delete(pr.running, w)
	if op := pr.stopping[w]; op != nil {
		// It was being stopped: the agent reads the exit as its stop's,
		// and runs a start queued behind the stop.
		delete(pr.stopping, w)
		s.trace = append(s.trace, Entry{At: s.now, Who: pr.name, What: fmt.Sprintf("workload %s STOPPED (exited while stopping)", w)})
		if op.restart != 0 {
			s.start(pr, w, op.restart)
		}
		return
	}
	s.trace = append(s.trace, Entry{At: s.now, Who: pr.name, What: fmt.Sprintf("workload %s EXITED (epoch %d)", w, epoch)})
	if !pr.up {
		return
	}
	inc := pr.incarnation
	s.schedule(s.now, func() {
		s.deliver(pr, inc, func(now time.Time) { pr.node.Exited(envFor(s, pr), now, w, epoch) })
	})
}

// ForgedEvent describes an event a relay serves that no honest provider
// made: a claim or revocation of workload w dated At (unix seconds), by
// Author (any ProviderID, also one outside the world: an unknown key), with
// a signature that verifies or not.
type ForgedEvent struct {
	Workload   string
	Author     ProviderID
	Revocation bool // else a promotion claim
	At         int64
	BadSig     bool
}

// InjectForged makes relay r store f's event and deliver it to every
// subscriber (relays store what they are sent; many do not verify). Nodes
// must reject it, and it must not move their subscription cursor: one
// event dated in 2100 would otherwise blind every later subscription.
func (s *Sim) InjectForged(r RelayID, f ForgedEvent) {
	if !s.relays[r].up {
		return
	}
	ev := &Event{ID: s.newEventID(), Author: f.Author, CreatedAt: f.At, Forged: f.BadSig, Injected: true, SentAt: s.now}
	if f.Revocation {
		ev.Kind, ev.D = KindRevocation, f.Workload
		ev.Body = LeaseRevocation{Workload: f.Workload, Epoch: 1, Successor: ProviderKey(f.Author)}
	} else {
		ev.Kind, ev.D = KindClaim, ClaimD(f.Workload)
		ev.Body = LeaseClaim{Workload: f.Workload, Epoch: 1 << 40, Active: true}
	}
	s.Logf("relay R%d serves a forged event: %+v", r, f)
	if s.store(r, ev) {
		s.fanOut(r, ev)
	}
}

// ForgedCheckpoint describes a checkpoint record a relay serves that no
// provider of the world published: Body signed as Author (any ProviderID,
// also one outside the world: an unknown key), dated At (unix seconds),
// with a signature that verifies or not. A valid signature by a member is
// a record the lease's rules must refuse (an epoch its signer never held,
// a later epoch, another grant's record).
type ForgedCheckpoint struct {
	Author ProviderID
	Body   LeaseCheckpoint
	At     int64
	BadSig bool
}

// InjectCheckpoint makes relay r store f's record (it replaces the
// author's record of that epoch there when newer, as a relay that stores
// what it is sent does). Nobody subscribes to records: restorers read it.
func (s *Sim) InjectCheckpoint(r RelayID, f ForgedCheckpoint) {
	if !s.relays[r].up {
		return
	}
	ev := &Event{ID: s.newEventID(), Kind: KindCheckpoint, Author: f.Author, CreatedAt: f.At, D: CheckpointD(f.Body.Workload, f.Body.Epoch),
		Body: f.Body, Forged: f.BadSig, Injected: true, SentAt: s.now}
	s.Logf("relay R%d serves a forged checkpoint record: %+v", r, f)
	s.store(r, ev)
}
