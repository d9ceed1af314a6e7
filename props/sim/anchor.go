package sim

import (
	"fmt"
	"time"
)

// AnchorConfig holds the anchor's (Paygress v1) failover timings.
type AnchorConfig struct {
	M, N              int
	T1, T2, Stale     time.Duration
	StandbySilence    time.Duration // the standby watchdog: promote after this much silence
	HeartbeatInterval time.Duration
}

// DefaultAnchorConfig is the anchor's shipped configuration: M=2 of N=3,
// t1=120 s, t2=300 s, stale=180 s, standby watchdog 180 s.
func DefaultAnchorConfig() AnchorConfig {
	return AnchorConfig{
		M: 2, N: 3,
		T1: 120 * time.Second, T2: 300 * time.Second, Stale: 180 * time.Second,
		StandbySilence:    180 * time.Second,
		HeartbeatInterval: 30 * time.Second,
	}
}

// AnchorHeartbeat is the body of an anchor heartbeat (no workload list).
type AnchorHeartbeat struct{}

// AnchorPromotion is the body of the anchor's promotion announcement.
type AnchorPromotion struct{ Workload string }

// AnchorRevocation is the body of the anchor's lease revocation.
type AnchorRevocation struct{ Workload string }

type anchorState string

const (
	anchorStandby anchorState = "standby"
	anchorLive    anchorState = "live"
	anchorSuspect anchorState = "suspect"
	anchorEvicted anchorState = "evicted"
)

type anchorPersist struct {
	state   anchorState
	since   time.Time
	primary ProviderID
}

// AnchorNode models the anchor's rule: the primary's machine goes
// Live -> Suspect when it lacks quorum and t1 has passed since it entered
// Live (not since quorum was lost), Suspect -> Evicted after t2 (stop, then
// revoke); a standby promotes (starts the workload, then announces) after
// StandbySilence without a heartbeat from the primary on any relay, or on a
// revocation. No epochs and no claim step.
type AnchorNode struct {
	cfg      AnchorConfig
	workload string
	self     ProviderID
	rank     int // 0 = first primary

	st        anchorPersist
	saved     anchorPersist
	lastSeen  time.Time         // last heartbeat from the primary (local receive time)
	ownHB     map[RelayID]int64 // newest own heartbeat created_at per relay
	nextHB    time.Time         // next heartbeat due
	booted    bool
	liveSince time.Time // for the timeline
}

// NewAnchorNode returns provider self's anchor model; provider 0 starts as
// the primary, the others as standbys watching it.
func NewAnchorNode(cfg AnchorConfig, workload string, self ProviderID) *AnchorNode {
	n := &AnchorNode{cfg: cfg, workload: workload, self: self, rank: int(self)}
	n.st = anchorPersist{state: anchorStandby, primary: 0}
	if self == 0 {
		n.st.state = anchorLive
	}
	n.saved = n.st
	return n
}

func (n *AnchorNode) persist() { n.saved = n.st }

// Boot implements Node.
func (n *AnchorNode) Boot(env Env, now time.Time) {
	n.st = n.saved
	n.ownHB = map[RelayID]int64{}
	n.lastSeen = now
	n.nextHB = now
	if !n.booted && n.st.state == anchorLive {
		n.st.since = now
		env.Start(n.workload, 0)
		n.persist()
	}
	n.booted = true
}

// Crash implements Node.
func (n *AnchorNode) Crash() {}

// Live implements Node; the anchor has no epochs, so everything is epoch 0.
func (n *AnchorNode) Live(w string) (uint64, bool) {
	return 0, w == n.workload && n.st.state == anchorLive
}

// Describe implements Node.
func (n *AnchorNode) Describe() string { return string(n.st.state) }

func (n *AnchorNode) quorum(now time.Time) bool {
	c := 0
	for _, ts := range n.ownHB {
		if time.Unix(ts, 0).Add(n.cfg.Stale).After(now) {
			c++
		}
	}
	return c >= n.cfg.M
}

// Tick implements Node.
func (n *AnchorNode) Tick(env Env, now time.Time) {
	if !now.Before(n.nextHB) {
		n.nextHB = now.Add(n.cfg.HeartbeatInterval)
		env.Publish(Event{Kind: KindHeartbeat, CreatedAt: now.Unix(), D: fmt.Sprint(now.Unix() / 60), Body: AnchorHeartbeat{}}, nil)
	}
	switch n.st.state {
	case anchorLive:
		if !n.quorum(now) && now.Sub(n.st.since) >= n.cfg.T1 {
			n.liveSince = n.st.since
			n.st.state, n.st.since = anchorSuspect, now
			n.persist()
			env.Logf("anchor: Live -> Suspect (no quorum; t1 counts from entering Live, %v ago); evicts %v from now", now.Sub(n.liveSince).Round(time.Second), n.cfg.T2)
		}
	case anchorSuspect:
		if n.quorum(now) {
			n.st.state, n.st.since = anchorLive, now
			n.persist()
			env.Logf("anchor: Suspect -> Live")
		} else if now.Sub(n.st.since) >= n.cfg.T2 {
			n.st.state = anchorEvicted
			n.persist()
			env.Stop(n.workload)
			env.Logf("anchor: Suspect -> Evicted, publishes revocation")
			env.Publish(Event{Kind: KindRevocation, CreatedAt: now.Unix(), D: n.workload, Body: AnchorRevocation{Workload: n.workload}}, nil)
		}
	case anchorStandby:
		if now.Sub(n.lastSeen) >= n.cfg.StandbySilence {
			n.promote(env, now, fmt.Sprintf("%v of silence from P%d", now.Sub(n.lastSeen).Round(time.Second), n.st.primary))
		}
	}
}

func (n *AnchorNode) promote(env Env, now time.Time, why string) {
	n.st.state, n.st.since, n.st.primary = anchorLive, now, n.self
	n.persist()
	env.Logf("anchor: standby promotes itself (%s): starts, then announces", why)
	env.Start(n.workload, 0)
	env.Publish(Event{Kind: KindClaim, CreatedAt: now.Unix(), D: AnnouncementD(n.workload), Body: AnchorPromotion{Workload: n.workload}}, nil)
}

// Receive implements Node.
func (n *AnchorNode) Receive(env Env, now time.Time, r RelayID, ev *Event) {
	if ev.Forged {
		return
	}
	switch ev.Body.(type) {
	case AnchorHeartbeat:
		if ev.Author == n.self {
			if ev.CreatedAt > n.ownHB[r] {
				n.ownHB[r] = ev.CreatedAt
			}
			return
		}
		if ev.Author == n.st.primary {
			n.lastSeen = now
		}
	case AnchorRevocation:
		if n.st.state == anchorStandby && ev.Author == n.st.primary && n.rank == n.firstStandby() {
			n.promote(env, now, "revocation")
		}
	case AnchorPromotion, LeaseAnnouncement:
		// Paygress reads every event under the announcement d tag as a
		// promotion; the claim step's claims live under another d tag.
		if ev.D != AnnouncementD(n.workload) {
			return
		}
		if ev.Author != n.self && n.st.state == anchorStandby {
			n.st.primary = ev.Author
			n.lastSeen = now
			n.persist()
		}
	}
}

// firstStandby is the anchor's successor choice: the lowest-ranked standby.
func (n *AnchorNode) firstStandby() int { return int(n.st.primary) + 1 }

// EOSE implements Node.
func (n *AnchorNode) Connected(Env, time.Time, RelayID) {}
func (n *AnchorNode) EOSE(Env, time.Time, RelayID)      {}

// PublishResult implements Node.
func (n *AnchorNode) PublishResult(Env, time.Time, RelayID, EventID, bool) {}

// QueryResult implements Node.
func (n *AnchorNode) QueryResult(Env, time.Time, RelayID, QueryID, []*Event, bool) {}

// Timer implements Node.
func (n *AnchorNode) Timer(Env, time.Time, any) {}

// Since implements Node: the anchor model reads everything stored.
func (n *AnchorNode) Since() int64 { return 0 }

// Exited implements Node (the anchor model does not respawn).
func (n *AnchorNode) Exited(Env, time.Time, string, uint64) {}

var _ Node = (*AnchorNode)(nil)
