package sim

import (
	"fmt"
)

// SingleWriter returns a checker for workload w, the invariant the props
// tests state: at most one provider runs w at any instant; no two providers
// hold w Live at the same epoch; the epoch a provider holds Live never goes
// backwards (across its restarts too), and no provider enters Live at an
// epoch below one another provider has already held Live. Paused providers count (their
// workload keeps running); providers whose agent is down count only through
// their running flag.
func SingleWriter(w string) Checker {
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
				return fmt.Errorf("%s enters workload %s Live at epoch %d after epoch %d was held Live", p.name, w, e, maxAny)
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
