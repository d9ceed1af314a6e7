package agent

import (
	"context"
	"sync"
	"time"

	"provideragent/internal/fifo"
	"provideragent/lease"
)

// claimPublishes queues the claim step's publishes for maxClaimPublishes
// workers (claimPublishLoop), oldest first. A mass failover or retake puts
// tens of thousands of workloads in the claim step at once: a goroutine
// each, parked until its turn to publish, cost each its stack (100,000
// claims took the agent from 0.9 to over 1.9 GiB in BenchmarkAgentScale's
// retake); a queued claim costs a few dozen bytes.
type claimPublishes struct {
	mu    sync.Mutex
	queue fifo.Queue[queuedClaim]
	// kick holds a token for each worker that may have to wake up: a
	// claim queued while every worker is busy is taken by the first one
	// that finishes, and one queued while they wait wakes one of them.
	kick chan struct{}
}

// queuedClaim is a PublishClaim and the time its step made it (the
// claim's created_at).
type queuedClaim struct {
	e  lease.PublishClaim
	at time.Time
}

func newClaimPublishes() claimPublishes {
	return claimPublishes{kick: make(chan struct{}, maxClaimPublishes)}
}

func (q *claimPublishes) add(e lease.PublishClaim, at time.Time) {
	q.mu.Lock()
	q.queue.Push(queuedClaim{e: e, at: at})
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

func (q *claimPublishes) next() (queuedClaim, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.queue.Pop()
}

// len is the number of claims waiting for a worker.
func (q *claimPublishes) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.queue.Len()
}

// claimPublishLoop runs maxClaimPublishes workers until ctx ends; each
// publishes queued claims one at a time and reports each outcome to the
// machine (ClaimPublished). Claims still queued when ctx ends are dropped:
// the claim step times out and withdraws them (lease.Config.ClaimTimeout).
func (a *Agent) claimPublishLoop(ctx context.Context) error {
	a.claims.publishes.run(ctx, maxClaimPublishes, func(ctx context.Context, c queuedClaim) {
		if a.claimExpired(c, a.now()) {
			a.obs.met.promotions.WithLabelValues("expired").Inc()
			a.emit("claim", c.e.ID, "claim for epoch %d not published: it waited %v for a publisher, and its claim step times out before the relays' answers could count",
				c.e.Epoch, a.now().Sub(c.at).Round(time.Millisecond))
			return
		}
		a.publishClaim(ctx, c.e, c.at)
	})
	return nil
}

// claimExpired reports whether a queued claim, taken at now, would be
// answered too late: its claim step times out lease.Config.ClaimTimeout
// after it was made, and a publish may take claimIOTimeout. Publishing it
// would only load the relays (a mass retake queues more claims than the
// relays take in a claim timeout: each round's publishes then all came
// after their step had timed out, and the retake never ended); the machine
// times the step out and retries it after its backoff, as for a claim no
// relay answered.
func (a *Agent) claimExpired(c queuedClaim, now time.Time) bool {
	return now.Add(a.claimIOTimeout()).After(c.at.Add(a.cfg.Lease.ClaimTimeout))
}

// run takes queued claims with n workers, oldest first, until ctx ends.
func (q *claimPublishes) run(ctx context.Context, n int, publish func(context.Context, queuedClaim)) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				for c, ok := q.next(); ok && ctx.Err() == nil; c, ok = q.next() {
					publish(ctx, c)
				}
				select {
				case <-ctx.Done():
					return
				case <-q.kick:
				}
			}
		})
	}
	wg.Wait()
}
