package lease

import "time"

// SetClockSuspect tells the machine whether the driver finds this provider's
// clock outside the bound the single-writer guarantee rests on (offset from
// the relays' and other signers' time beyond MaxSkew/2): why says how, for
// logs and revocations. While it is suspect the machine trusts no timer of
// its own: it never enters the claim step by takeover (silence measured on a
// wrong clock is no evidence), withdraws a takeover claim in progress, and
// evicts every held workload that has a standby (stop, then a revocation
// naming a successor) at the next Tick, because the other providers cannot
// judge this provider's heartbeats either. A revocation naming this
// provider still starts the claim step: it is the holder's own word.
// Workloads without a standby keep running (nobody else may run them). The
// flag is persisted.
func (m *Machine) SetClockSuspect(now time.Time, suspect bool, why string) []Effect {
	m.clock(now)
	if !suspect {
		why = ""
	}
	if suspect == m.clockSuspect && why == m.clockWhy {
		return nil
	}
	m.clockSuspect, m.clockWhy = suspect, why
	var out []Effect
	for _, w := range m.list {
		m.touch(w)
		if suspect && w.State == StatePromoting && w.Trigger == TriggerTakeover {
			m.abortClaim(w, w.Target, &out)
		}
	}
	return out
}

// ClockSuspect reports whether the driver last said this provider's clock is
// outside the bound (SetClockSuspect), and why.
func (m *Machine) ClockSuspect() (bool, string) { return m.clockSuspect, m.clockWhy }
