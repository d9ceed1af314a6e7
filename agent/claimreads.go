package agent

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/lease"
)

// Claim reads and claim publishes at volume: a
// mass failover puts thousands of workloads in the claim step at once. One
// REQ per claim read opened more subscriptions than strfry allows (200 per
// connection; "too many concurrent REQs"), so reads that are due together
// are batched: one query of the workloads' d tags, claimWorkloads per
// filter, packed into few REQs per relay by relay, at most
// readBatches queries at once. Claim publishes are bounded the same way.
const (
	// readCoalesce is how long a due read waits for others to join its
	// batch (reads may be late, never early: ReadClaims.At is the earliest).
	readCoalesce = 50 * time.Millisecond
	// readBatch bounds the workloads of one batched read.
	readBatch = 2048
	// readBatches bounds the batched reads in flight.
	readBatches = 2
	// maxClaimPublishes bounds the claim publishes in flight. A relay
	// handles one connection's events in order: thousands of claims in
	// flight at once would queue this provider's own heartbeats behind
	// them (and lose it its quorum); this many keep the relays busy.
	maxClaimPublishes = 32
)

// claimReads queues ReadClaims requests for the batching loop.
type claimReads struct {
	mu    sync.Mutex
	queue []lease.ReadClaims
	kick  chan struct{}
}

func (q *claimReads) add(r lease.ReadClaims) {
	q.mu.Lock()
	q.queue = append(q.queue, r)
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// due removes and returns up to limit requests due at now, and the time the
// earliest remaining one is due (zero: none left).
func (q *claimReads) due(now time.Time, limit int) (out []lease.ReadClaims, next time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	kept := q.queue[:0]
	for _, r := range q.queue {
		switch {
		case !r.At.After(now) && len(out) < limit:
			out = append(out, r)
		default:
			kept = append(kept, r)
			if next.IsZero() || r.At.Before(next) {
				next = r.At
			}
		}
	}
	clear(q.queue[len(kept):])
	q.queue = kept
	return out, next
}

// claimReadLoop runs the batched claim reads until ctx ends.
func (a *Agent) claimReadLoop(ctx context.Context) error {
	sem := make(chan struct{}, readBatches)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	kicked := false
	for {
		if kicked {
			// Let the reads that come with this one join its batch.
			kicked = false
			if !sleepCtx(ctx, readCoalesce) {
				return nil
			}
		}
		batch, next := a.claims.reads.due(a.now(), readBatch)
		if len(batch) > 0 {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			a.goFeedback(ctx, func(ctx context.Context) {
				defer func() { <-sem }()
				a.readClaimBatch(ctx, batch)
			})
			continue
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = next.Sub(a.now()) + readCoalesce
		}
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return nil
		case <-a.claims.reads.kick:
			kicked = true
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-timer.C:
		}
	}
}

// claimFilters are the filters that read the claims and announcements of
// ids: claimWorkloads per filter.
func claimFilters(ids []string) []nostr.Filter {
	var out []nostr.Filter
	for ch := range slices.Chunk(ids, claimWorkloads) {
		out = append(out, heartbeat.ClaimsFilter(ch))
	}
	return out
}

// readClaimBatch reads the claims of a batch of ReadClaims in one query,
// feeds each workload's claims and reports each read (the relays read to
// EOSE count for every workload of the batch).
func (a *Agent) readClaimBatch(ctx context.Context, batch []lease.ReadClaims) {
	ids := make([]string, len(batch))
	want := make(map[string]bool, len(batch))
	for i, r := range batch {
		ids[i] = r.ID
		want[r.ID] = true
	}
	qctx, cancel := context.WithTimeout(ctx, a.claimIOTimeout())
	evs, relays := a.pool.QueryFilters(qctx, claimFilters(ids))
	cancel()
	now := a.now()
	byID := map[string][]relayClaim{}
	for _, re := range evs {
		if re.Event.PubKey == a.me.self {
			continue // our own claims never compete (and need no check)
		}
		got, err := a.inbound.ingestor.Ingest(ctx, now, re.Event)
		if err != nil || got.Promotion == nil || !want[got.Promotion.WorkloadID] {
			continue
		}
		id := got.Promotion.WorkloadID
		byID[id] = append(byID[id], relayClaim{p: got.Promotion, relay: re.Relay})
	}
	for _, r := range batch {
		// feed converts the claims and counts the competing ones.
		a.send(ctx, input{claims: byID[r.ID], claimRead: &lease.ClaimRead{Workload: r.ID, Epoch: r.Epoch, Relays: relays}})
	}
}
