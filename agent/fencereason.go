package agent

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"provideragent/heartbeat"
)

// quorumLostPrefix starts the reason lease gives a fence for lost quorum
// ("relay quorum lost at <time>", lease/tick.go).
const quorumLostPrefix = "relay quorum lost"

// heartbeatRefusals names the relays whose last refusal of one of our
// heartbeats (any heartbeat kind, shards included) is not older than since, with their words:
// "ws://a (invalid: event too large: 65792), ws://b (blocked: spam)". It is
// "" when no relay refused a heartbeat in that window.
func heartbeatRefusals(relays []RelayStatus, since time.Time) string {
	var parts []string
	for _, r := range relays {
		lr := r.LastRejection
		if lr == nil || lr.At.Before(since) {
			continue
		}
		if !heartbeat.IsHeartbeatKind(lr.Kind) {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", r.URL, lr.Reason))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// fenceReason is the wording of a fence (the stop's and the revocation's
// reason): lease's reason, and when it is a quorum loss while relays were
// refusing our heartbeats, which relays and their words, e.g.
//
//	relay quorum lost at 2026-11-23T09:00:00Z: relays refused our
//	heartbeats: ws://a (invalid: event too large: 65792), ws://b (...)
//
// Refusals count within the window that can have cost the quorum: stale
// (a heartbeat stops counting) plus t1 and t2 (the debounce and the grace
// before the fence). The agent's effect code calls it on a StopWorkload's
// and a PublishRevocation's Reason.
func (a *Agent) fenceReason(reason string, now time.Time) string {
	if !strings.HasPrefix(reason, quorumLostPrefix) || a.pool == nil {
		return reason
	}
	window := a.cfg.Lease.Stale + a.cfg.Lease.T1 + a.cfg.Lease.T2
	if r := heartbeatRefusals(a.pool.Status(), now.Add(-window)); r != "" {
		return reason + ": relays refused our heartbeats: " + r
	}
	return reason
}
