package agent

import (
	"sync"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/relay"
)

// grantWarnEvery bounds the WARN lines about refused grants from trusted
// issuers: at most one per rejection reason in this window (each event id
// is reported once, however many relays deliver it).
const grantWarnEvery = time.Minute

// grantWarnIDs is how many refused grant ids are remembered so that the
// copies other relays deliver are not reported again.
const grantWarnIDs = 1024

// ingestLog decides which rejected events deserve a WARN: lease grants that
// claim a trusted issuer's key but cannot be used. Everything else stays at
// DEBUG (a public relay serves the whole network's traffic).
type ingestLog struct {
	mu     sync.Mutex
	seen   map[string]bool // grant event ids already reported
	order  []string        // seen, oldest first (bounded by grantWarnIDs)
	last   map[heartbeat.RejectReason]time.Time
	missed map[heartbeat.RejectReason]int
}

// allow reports whether a refused grant with this id and reason may be
// logged at WARN now, and how many similar lines were held back since the
// last one.
func (l *ingestLog) allow(id string, reason heartbeat.RejectReason, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen, l.last, l.missed = map[string]bool{}, map[heartbeat.RejectReason]time.Time{}, map[heartbeat.RejectReason]int{}
	}
	if l.seen[id] {
		return false, 0
	}
	l.seen[id] = true
	l.order = append(l.order, id)
	if len(l.order) > grantWarnIDs {
		delete(l.seen, l.order[0])
		l.order = l.order[1:]
	}
	if t, ok := l.last[reason]; ok && now.Sub(t) < grantWarnEvery {
		l.missed[reason]++
		return false, 0
	}
	n := l.missed[reason]
	l.last[reason], l.missed[reason] = now, 0
	return true, n
}

// ownGrant reports whether ev is a lease grant signed by this agent while
// this agent is not one of its own trusted issuers: an operator published
// it with this key. It is not ours to act on and not a rejection worth
// counting (the ingest would count it wrong_signer once per relay).
func (a *Agent) ownGrant(ev *nostr.Event) bool {
	return ev.Kind == heartbeat.KindLeaseGrant && ev.PubKey == a.me.self && !a.inbound.policy.AllowedIssuer(a.me.self)
}

// logRejected logs an event the ingest refused: at WARN, with the reason,
// when it is a lease grant from a trusted issuer (so an operator learns why
// a grant they published is not applied), at DEBUG otherwise, and for a
// grant that names other providers only (not_named: a relay that ignores
// #p on live events sends them all).
func (a *Agent) logRejected(re relay.Received, now time.Time, err error) {
	reason := heartbeat.ReasonOf(err)
	ev := re.Event
	if ev.Kind == heartbeat.KindLeaseGrant && a.inbound.policy.AllowedIssuer(ev.PubKey) && reason != heartbeat.ReasonCanceled && reason != heartbeat.ReasonNotNamed {
		if ok, held := a.inbound.log.allow(ev.ID, reason, now); ok {
			args := []any{"relay", re.Relay, "event", ev.ID, "issuer", ev.PubKey, "workload", tagValue(ev, "workload"), "reason", reason, "err", err}
			if held > 0 {
				args = append(args, "similar_since_last_warning", held)
			}
			a.logger.Warn("lease grant from a trusted issuer refused", args...)
		}
		return
	}
	a.logger.Debug("event rejected", "relay", re.Relay, "kind", ev.Kind, "reason", reason, "err", err)
}
