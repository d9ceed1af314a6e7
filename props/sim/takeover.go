package sim

import (
	"fmt"
	"slices"
	"time"
)

// TakeoverClaim is what a LeaseNode reports (Env.Report) each time it
// publishes a promotion claim by takeover (rule 8's second trigger): on
// entering the claim step, and on each retry after a backoff. Epoch is the
// epoch it follows, whose holder it judged silent.
type TakeoverClaim struct {
	Workload string
	Epoch    uint64
}

// RevocationPublished is what a LeaseNode reports (Env.Report) when it
// queues a revocation of workload w's Epoch naming Successor (-1: none),
// for fault schedules aimed at its delivery.
type RevocationPublished struct {
	Workload  string
	Epoch     uint64
	Successor ProviderID
}

// heardKey indexes what one provider was delivered from one relay about one
// epoch of the checked workload.
type heardKey struct {
	to    ProviderID
	relay RelayID
	epoch uint64
}

type heard struct {
	sent   time.Duration // SentAt of the newest such heartbeat delivered
	author ProviderID
}

// AddTakeoverBound checks the takeover rule directly: a standby that claims
// workload w by takeover while it follows epoch e must not have been
// delivered, from every one of some M relays, a heartbeat listing (w, e)
// published by another provider less than minWait ago. Equivalently: take,
// per relay, the newest publication time of such a heartbeat delivered to
// the claimer; the M-th newest of those must lie at least minWait in the
// past. The machine promises exactly this: it claims only after
// TakeoverAfter of silence, on its own clock, on N-M+1 relays, and any M
// relays include one of them. minWait is TakeoverAfter less the drift
// allowance (the claimer measures on a clock whose rate may err).
//
// Delivered heartbeats count by their publication time, so a relay that
// re-serves old heartbeats does not move the bound, and a heartbeat that
// was never delivered to the claimer (a cut link, a dropped message, a
// relay that was down) is not held against it. A violation is the first
// failure of the world, like a second writer.
func (s *Sim) AddTakeoverBound(w string, m int, minWait time.Duration) {
	last := map[heardKey]heard{}
	var violation string
	s.AddDeliveryProbe(func(to ProviderID, r RelayID, ev *Event) {
		hb, ok := ev.Body.(LeaseHeartbeat)
		if !ok || ev.Author == to {
			return
		}
		for _, we := range hb.Workloads {
			if we.ID != w {
				continue
			}
			k := heardKey{to: to, relay: r, epoch: we.Epoch}
			if h, ok := last[k]; !ok || ev.SentAt > h.sent {
				last[k] = heard{sent: ev.SentAt, author: ev.Author}
			}
		}
	})
	s.AddReportProbe(func(who ProviderID, v any) {
		c, ok := v.(TakeoverClaim)
		if !ok || c.Workload != w || violation != "" {
			return
		}
		var newest []heard
		for r := range s.relays {
			if h, ok := last[heardKey{to: who, relay: RelayID(r), epoch: c.Epoch}]; ok {
				newest = append(newest, h)
			}
		}
		if len(newest) < m {
			return // fewer than M relays ever delivered such a heartbeat
		}
		slices.SortFunc(newest, func(a, b heard) int { return int(b.sent - a.sent) })
		h := newest[m-1]
		if since := s.now - h.sent; since < minWait {
			violation = fmt.Sprintf("takeover too early: %s claims workload %s by takeover of epoch %d at t=%v, only %v after %s's heartbeat listing it at epoch %d was published and delivered to it from %d relays (want at least %v)",
				s.provs[who].name, w, c.Epoch, s.now, since, s.provs[h.author].name, c.Epoch, m, minWait)
		}
	})
	s.AddChecker(func(*Sim) error {
		if violation != "" {
			return fmt.Errorf("%s", violation)
		}
		return nil
	})
}
