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

// fenceWording words a fence (the stop's and the revocation's
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
//
// It is made once per step: the relays' refusals are read once, at the
// first quorum-loss reason (a mass eviction words thousands of stops and
// revocations).
func (a *Agent) fenceWording(now time.Time) func(reason string) string {
	var refusals *string
	return func(reason string) string {
		if !strings.HasPrefix(reason, quorumLostPrefix) || a.pool == nil {
			return reason
		}
		if refusals == nil {
			window := a.cfg.Lease.Stale + a.cfg.Lease.T1 + a.cfg.Lease.T2
			r := heartbeatRefusals(a.pool.Status(), now.Add(-window))
			refusals = &r
		}
		if *refusals != "" {
			return reason + ": relays refused our heartbeats: " + *refusals
		}
		return reason
	}
}
