package agent

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"provideragent/agent/store"
	"provideragent/heartbeat"
)

// Relays keep only the newest event per (kind, pubkey, d tag), and on equal
// created_at the one with the lower id (NIP-01). A withdrawn marker made in
// the same second as its claim would then lose about half the time, and the
// stale active claim would keep blocking retries. So every claim and
// withdrawn marker of a workload (one d tag: heartbeat.ClaimDTag) gets a
// created_at strictly above the previous one: max(now, last+1 s). The last
// one is persisted in the step's transaction, before the event is built, so
// the order also holds across a restart. props/sim's driver
// (LeaseNode.createdAt) applies the same rule.

// claimKVPrefix prefixes the store key holding a workload's last claim
// created_at (unix seconds, decimal).
const claimKVPrefix = "claim_created_at:"

// claimTimes assigns created_at to the claim events of a step. Only the
// machine goroutine uses it.
type claimTimes struct {
	last map[string]int64 // workload id -> last created_at used (unix s)
}

// next returns the created_at for the next claim or withdrawn marker of
// workload id at now and records it; load reads the persisted value the
// first time a workload is seen.
func (c *claimTimes) next(ctx context.Context, st *store.Store, id string, now time.Time) (time.Time, error) {
	if c.last == nil {
		c.last = map[string]int64{}
	}
	last, ok := c.last[id]
	if !ok {
		v, err := st.KV(ctx, claimKVPrefix+id)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return time.Time{}, fmt.Errorf("claim created_at of %s: %w", id, err)
		default:
			if last, err = strconv.ParseInt(string(v), 10, 64); err != nil {
				return time.Time{}, fmt.Errorf("claim created_at of %s: %w", id, err)
			}
		}
	}
	at := heartbeat.NextCreatedAt(last, now)
	c.last[id] = at
	return time.Unix(at, 0), nil
}

// kv returns the store entries that persist the last created_at of every
// workload in ids (saved with the step that used them).
func (c *claimTimes) kv(ids []string) map[string][]byte {
	if len(ids) == 0 {
		return nil
	}
	kv := make(map[string][]byte, len(ids))
	for _, id := range ids {
		kv[claimKVPrefix+id] = []byte(strconv.FormatInt(c.last[id], 10))
	}
	return kv
}

// forget drops workload id (released) inside tx.
func (c *claimTimes) forget(ctx context.Context, st *store.Store, tx *sql.Tx, id string) error {
	delete(c.last, id)
	if err := st.SetKV(ctx, tx, claimKVPrefix+id, nil); err != nil {
		return fmt.Errorf("forget claim created_at: %w", err)
	}
	return nil
}
