package sim

// The claim step's feedback (lease/doc.go, rule 8), as the agent runs it: a
// PublishClaim's acceptances are counted until M relays accepted it or all
// answered, and at ReadClaims.At every relay is read and every claim found
// goes to the driver with the count of relays read.

import (
	"time"

	"provideragent/driver"
	"provideragent/lease"
)

// claimPub counts the answers to one published claim.
type claimPub struct {
	workload        string
	epoch           uint64
	accepted, total int
	reported        bool
}

// claimRead gathers the answers of one claim read, one query per relay.
type claimRead struct {
	workload  string
	epoch     uint64
	answered  int
	read      int
	claims    []lease.PromotionClaim
	completed bool
}

// timerRead is a ReadClaims falling due.
type timerRead struct {
	workload string
	epoch    uint64
}

// claimAnswered counts relay's answer to claim p (event id): once M
// accepted it or every relay answered, the count goes to the driver
// (ClaimPublished).
func (n *LeaseNode) claimAnswered(now time.Time, id EventID, p *claimPub, ok bool) {
	if p.reported {
		return
	}
	p.total++
	if ok {
		p.accepted++
	}
	if p.accepted >= n.cfg.M || p.total >= n.env.NumRelays() {
		p.reported = true
		delete(n.pubs, id)
		n.env.Logf("claim for epoch %d accepted by %d relays", p.epoch, p.accepted)
		n.step(now, driver.Input{ClaimAck: &lease.ClaimAck{Workload: p.workload, Epoch: p.epoch, Accepted: p.accepted}}, false)
	}
}

// readClaims queries every relay for the workload's claims.
func (n *LeaseNode) readClaims(t timerRead) {
	rd := &claimRead{workload: t.workload, epoch: t.epoch}
	for r := 0; r < n.env.NumRelays(); r++ {
		q := n.env.Query(RelayID(r), func(ev *Event) bool {
			c, ok := claimInput(RelayID(r), ev)
			return ok && ev.Kind == KindClaim && c.Workload == t.workload
		})
		n.reads[q] = rd
	}
}

// readAnswered takes relay r's answer to claim read rd; once every relay
// answered, the claims found and the count of relays read go to the
// driver in one step.
func (n *LeaseNode) readAnswered(now time.Time, r RelayID, rd *claimRead, evs []*Event, ok bool) {
	if rd.completed {
		return
	}
	rd.answered++
	if ok {
		rd.read++
		for _, ev := range evs {
			c, isClaim := claimInput(r, ev)
			if !isClaim || c.Workload != rd.workload || !n.admit(now, ev) {
				continue // the agent's claim read ingests every event it reads
			}
			rd.claims = append(rd.claims, c)
		}
	}
	if rd.answered < n.env.NumRelays() {
		return
	}
	rd.completed = true
	t := n.sh.Begin(now)
	fed := t.Feed(driver.Input{Claims: rd.claims, ClaimRead: &lease.ClaimRead{Workload: rd.workload, Epoch: rd.epoch, Relays: rd.read}})
	n.env.Logf("read claims for epoch %d: %d relays read, %d competing", rd.epoch, rd.read, fed.Competing)
	n.commit(t)
}
