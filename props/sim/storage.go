package sim

import (
	"fmt"
	"time"
)

// Holder is what a Node may tell the simulator about its hold on a workload
// (LeaseNode does): the epoch it holds, or the one it is claiming
// (claiming true); ok false when neither. The storage assumption
// (KeepClaims) reads it.
type Holder interface {
	Holding(w string) (epoch uint64, claiming bool, ok bool)
}

// claimKeep is the storage assumption KeepClaims enables: relays keep the
// claims that a claim step may still need.
type claimKeep struct {
	w    string
	live time.Duration
	// firstLive is, per provider, the epoch of w it last held Live and the
	// first instant it was seen Live at it.
	firstLive map[ProviderID]liveMark
}

type liveMark struct {
	epoch uint64
	at    time.Duration
}

// KeepClaims makes the world respect the storage assumption of the
// single-writer guarantee (lease/doc.go) for workload w: a relay does not
// lose its storage while it holds an active claim of epoch e by a provider
// that still claims or holds w at e and has not yet been Live at e for
// live (one heartbeat interval plus the relay delay: by then every watcher
// heard its heartbeats). Provider whose agent is down keep their claims
// (they may resume). CrashRelay with wipe then crashes the relay without
// wiping it when a wipe would lose such a claim, and says so. Relays may
// otherwise lose their storage at any time, as often as a fault schedule
// likes.
func (s *Sim) KeepClaims(w string, live time.Duration) {
	s.keep = &claimKeep{w: w, live: live, firstLive: map[ProviderID]liveMark{}}
}

// noteLive records when each provider was first seen Live at its epoch
// (after every event, for the storage assumption).
func (s *Sim) noteLive() {
	k := s.keep
	if k == nil {
		return
	}
	for _, p := range s.provs {
		if !p.up {
			continue
		}
		e, ok := p.node.Live(k.w)
		if !ok {
			continue
		}
		if m, seen := k.firstLive[p.id]; !seen || m.epoch != e {
			k.firstLive[p.id] = liveMark{epoch: e, at: s.now}
		}
	}
}

// claimAtRisk names a claim that wiping relay r would lose against the
// storage assumption, or "" when r may lose its storage now.
func (s *Sim) claimAtRisk(r RelayID) string {
	k := s.keep
	if k == nil {
		return ""
	}
	for _, ev := range s.relays[r].store {
		c, ok := ev.Body.(LeaseClaim)
		if !ok || !c.Active || c.Workload != k.w || ev.Injected {
			continue
		}
		p := s.provs[ev.Author]
		if p.dead {
			continue
		}
		if m, ok := k.firstLive[p.id]; ok && m.epoch == c.Epoch && s.now-m.at >= k.live {
			continue // heard Live long enough: its heartbeats speak for it
		}
		still := !p.up // an agent that is down may resume its claim
		if e, ok := p.running[k.w]; ok && e == c.Epoch {
			still = true
		}
		if h, ok := p.node.(Holder); ok && p.up {
			if e, _, ok := h.Holding(k.w); ok && e == c.Epoch {
				still = true
			}
		}
		if still {
			return fmt.Sprintf("%s's claim of epoch %d", p.name, c.Epoch)
		}
	}
	return ""
}
