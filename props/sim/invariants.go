package sim

import (
	"fmt"
)

// SingleWriter returns a checker for workload w, the invariant the props
// tests state: at most one provider runs w at any instant; no two providers
// hold w Live at the same epoch; the epoch a provider holds Live never goes
// backwards (across its restarts too); and no provider enters Live at an
// epoch below one another provider has already held Live while a claim or
// announcement of that higher epoch is still stored on at least m relays
// (then every claim read of N-m+1 relays meets it). Relays that lose their
// storage can erase every trace of an epoch whose holder is gone; a later
// claimer then reuses its number, which is not two writers. Paused providers
// count (their workload keeps running); providers whose agent is down count
// only through their running flag.
func SingleWriter(w string, m int) Checker {
	maxHeld := map[ProviderID]uint64{}
	wasLive := map[ProviderID]bool{}
	var maxAny uint64 // highest epoch any provider has held Live
	return func(s *Sim) error {
		var runners []ProviderID
		for _, p := range s.provs {
			if _, ok := p.running[w]; ok {
				runners = append(runners, p.id)
			}
		}
		if len(runners) > 1 {
			msg := fmt.Sprintf("two writers: workload %s runs on", w)
			for _, id := range runners {
				msg += fmt.Sprintf(" %s(epoch %d)", s.provs[id].name, s.provs[id].running[w])
			}
			return fmt.Errorf("%s", msg)
		}
		liveAt := map[uint64]ProviderID{}
		for _, p := range s.provs {
			if !p.up {
				continue
			}
			e, ok := p.node.Live(w)
			if !ok {
				wasLive[p.id] = false
				continue
			}
			if !wasLive[p.id] && e < maxAny {
				if n := s.storedEpochEvidence(w, e); n >= m {
					return fmt.Errorf("%s enters workload %s Live at epoch %d after epoch %d was held Live (a claim of a higher epoch is stored on %d relays)",
						p.name, w, e, maxAny, n)
				}
			}
			wasLive[p.id] = true
			if other, dup := liveAt[e]; dup {
				return fmt.Errorf("%s and %s both hold workload %s Live at epoch %d", s.provs[other].name, p.name, w, e)
			}
			liveAt[e] = p.id
			if e < maxHeld[p.id] {
				return fmt.Errorf("%s holds workload %s Live at epoch %d after holding epoch %d", p.name, w, e, maxHeld[p.id])
			}
			maxHeld[p.id] = e
			maxAny = max(maxAny, e)
		}
		return nil
	}
}

// storedEpochEvidence counts the relays that store an active claim or an
// announcement of workload w at an epoch above e, made by a provider of the
// world (a relay's injected events, valid signature or not, are no
// evidence that any provider held that epoch).
func (s *Sim) storedEpochEvidence(w string, e uint64) int {
	n := 0
	for _, rs := range s.relays {
		for _, ev := range rs.store {
			if we, ok := claimedEpoch(ev, w); ok && we > e {
				n++
				break
			}
		}
	}
	return n
}

// claimedEpoch is the epoch of workload w that stored event ev shows a
// provider of the world claimed: an active claim's or an announcement's;
// false for any other event and for injected ones.
func claimedEpoch(ev *Event, w string) (uint64, bool) {
	if ev.Injected {
		return 0, false
	}
	switch b := ev.Body.(type) {
	case LeaseClaim:
		return b.Epoch, b.Active && b.Workload == w
	case LeaseAnnouncement:
		return b.Epoch, b.Workload == w
	}
	return 0, false
}
