package sim

// This provider's heartbeats: every HeartbeatInterval a beat listing the
// machine's Held(), split over several events on request.

import (
	"fmt"
	"time"

	"provideragent/lease"
)

// ShardBeats makes the node split every beat over n heartbeat events, the
// held list dealt round-robin (shard 0 may list nothing), as the agent does
// for long lists, so that faults can hit part of a beat.
func (n *LeaseNode) ShardBeats(k int) { n.shards = k }

// beatIfDue publishes a beat when one is due at now, as a ticker would:
// it keeps the cadence, and after a stall restarts it from now.
func (n *LeaseNode) beatIfDue(now time.Time) {
	if now.Before(n.nextHB) {
		return
	}
	n.nextHB = n.nextHB.Add(n.cfg.HeartbeatInterval)
	if !n.nextHB.After(now) {
		n.nextHB = now.Add(n.cfg.HeartbeatInterval)
	}
	n.beat(now)
}

// beat publishes a heartbeat listing Held().
func (n *LeaseNode) beat(now time.Time) {
	held := n.marked(n.d.Machine().Held(nil))
	env := n.env
	if n.shards <= 1 {
		env.Publish(Event{Kind: KindHeartbeat, CreatedAt: now.Unix(), D: fmt.Sprint(now.Unix() / 60), Body: LeaseHeartbeat{Workloads: held}}, nil)
		return
	}
	parts := make([][]lease.WorkloadEpoch, n.shards)
	for i, we := range held {
		// the last shard first, so that shard 0 (the Paygress-form event)
		// can be a presence-only one
		j := n.shards - 1 - i%n.shards
		parts[j] = append(parts[j], we)
	}
	for i, part := range parts {
		env.Publish(Event{Kind: KindHeartbeat, CreatedAt: now.Unix(), D: fmt.Sprintf("%d:%d", now.Unix()/60, i),
			Body: LeaseHeartbeat{Workloads: part, Shard: i, Shards: n.shards}}, nil)
	}
}
