package driver

import (
	"context"
	"fmt"
	"time"

	"provideragent/heartbeat"
)

// Relays keep only the newest event per (kind, pubkey, d tag), and on equal
// created_at the one with the lower id (NIP-01). A withdrawn marker made in
// the same second as its claim would then lose about half the time, and the
// stale active claim would keep blocking retries. So every claim and
// withdrawn marker of a workload (one d tag) gets a created_at strictly
// above the previous one: max(now, last+1 s). The last one is committed with
// the step, before the event is built, so the order also holds across a
// restart.

// claimTimes assigns created_at to the claim events of steps.
type claimTimes struct {
	last map[string]int64 // workload id -> last created_at used (unix s)
}

// lastClaimTime is Store.LastClaimTime.
type lastClaimTime func(ctx context.Context, id string, wait time.Duration) (int64, error)

// next returns the created_at for the next claim or withdrawn marker of
// workload id at now and records it; the store is read (last) the first
// time a workload is seen.
func (c *claimTimes) next(ctx context.Context, last lastClaimTime, id string, now time.Time, wait time.Duration) (time.Time, error) {
	if c.last == nil {
		c.last = map[string]int64{}
	}
	prev, ok := c.last[id]
	if !ok {
		v, err := last(ctx, id, wait)
		if err != nil {
			return time.Time{}, fmt.Errorf("claim created_at of %s: %w", id, err)
		}
		prev = v
	}
	at := heartbeat.NextCreatedAt(prev, now)
	c.last[id] = at
	return time.Unix(at, 0), nil
}

// values returns the created_at of every workload in ids, to commit with
// the step that used them; nil for none.
func (c *claimTimes) values(ids []string) map[string]int64 {
	if len(ids) == 0 {
		return nil
	}
	out := make(map[string]int64, len(ids))
	for _, id := range ids {
		out[id] = c.last[id]
	}
	return out
}

// forget drops workload id (released): its value in out becomes 0, which a
// Store deletes.
func (c *claimTimes) forget(out map[string]int64, id string) map[string]int64 {
	delete(c.last, id)
	if out == nil {
		out = map[string]int64{}
	}
	out[id] = 0
	return out
}
