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
//
// It also knows which claims no relay was ever sent (still queued, or
// dropped as expired), so that their withdrawn markers are not sent
// either (withdrawNeeded): a mass retake whose claims time out in the queue
// would otherwise sign and queue a withdrawn marker for each of them every
// round.
type claimPublishes struct {
	mu    sync.Mutex
	queue fifo.Queue[queuedClaim]
	// unsent is the latest attempt of each claim that no relay has been
	// sent yet: queued, or dropped by take. A claim taken for publishing
	// leaves it (sent: its withdrawal is needed, as for any claim this
	// table does not know).
	unsent map[claimKey]unsentClaim
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

type claimKey struct {
	id    string
	epoch uint64
}

// unsentClaim is a claim attempt (by its time) and whether it is still
// queued (else take dropped it).
type unsentClaim struct {
	at     time.Time
	queued bool
}

func newClaimPublishes() claimPublishes {
	return claimPublishes{unsent: map[claimKey]unsentClaim{}, kick: make(chan struct{}, maxClaimPublishes)}
}

func (q *claimPublishes) add(e lease.PublishClaim, at time.Time) {
	q.mu.Lock()
	q.queue.Push(queuedClaim{e: e, at: at})
	q.unsent[claimKey{e.ID, e.Epoch}] = unsentClaim{at: at, queued: true}
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// take returns the oldest queued claim that is still to be published, or
// ok false when none is queued. A claim whose attempt was withdrawn while
// it waited, or superseded by a later attempt, is passed over; one that
// expired (expired reports it; then expiredClaim is called) stays unsent.
func (q *claimPublishes) take(expired func(queuedClaim) bool, expiredClaim func(queuedClaim)) (c queuedClaim, ok bool) {
	for {
		q.mu.Lock()
		c, ok = q.queue.Pop()
		if !ok {
			q.mu.Unlock()
			return c, false
		}
		k := claimKey{c.e.ID, c.e.Epoch}
		u, known := q.unsent[k]
		if !known || !u.queued || !u.at.Equal(c.at) {
			q.mu.Unlock()
			continue // withdrawn while queued, or an earlier attempt
		}
		if expired(c) {
			q.unsent[k] = unsentClaim{at: c.at}
			q.mu.Unlock()
			expiredClaim(c)
			continue
		}
		delete(q.unsent, k) // sent from here on
		q.mu.Unlock()
		return c, true
	}
}

// withdrawNeeded reports whether the latest claim attempt of id at epoch
// may have reached a relay, so that its withdrawn marker must be sent; it
// is asked once per withdrawal. A claim still queued is taken out of the
// queue: it will not be sent.
func (q *claimPublishes) withdrawNeeded(id string, epoch uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := claimKey{id, epoch}
	_, unsent := q.unsent[k]
	delete(q.unsent, k)
	return !unsent
}

// claimPublishLoop runs maxClaimPublishes workers until ctx ends; each
// publishes queued claims one at a time and reports each outcome to the
// machine (ClaimPublished). Claims still queued when ctx ends are dropped:
// the claim step times out and withdraws them (lease.Config.ClaimTimeout).
func (a *Agent) claimPublishLoop(ctx context.Context) error {
	expired := func(c queuedClaim) bool { return a.claimExpired(c, a.now()) }
	dropped := func(c queuedClaim) {
		a.obs.met.promotions.WithLabelValues("expired").Inc()
		a.emit("claim", c.e.ID, "claim for epoch %d not published: it waited %v for a publisher, and its claim step timed out",
			c.e.Epoch, a.now().Sub(c.at).Round(time.Millisecond))
	}
	a.claims.publishes.run(ctx, maxClaimPublishes, expired, dropped, func(ctx context.Context, c queuedClaim) {
		a.publishClaim(ctx, c.e, c.at)
	})
	return nil
}

// claimExpired reports whether a queued claim, taken at now, comes too
// late: its claim step timed out (lease.Config.ClaimTimeout after the
// claim was made), so no answer can count. Publishing it would only load
// the relays (a mass retake queues more claims than the relays take in a
// claim timeout: each round's publishes then all came after their step had
// timed out, and the retake never ended); the machine retries the step
// after its backoff, as for a claim no relay answered, and its withdrawal
// sends nothing (withdrawNeeded). A claim taken before that is published
// with what is left of its step as its deadline (claimDeadline).
func (a *Agent) claimExpired(c queuedClaim, now time.Time) bool {
	return !now.Before(claimDeadline(c.at, a.cfg.Lease.ClaimTimeout))
}

// claimDeadline is when the claim step of a claim made at at times out.
func claimDeadline(at time.Time, claimTimeout time.Duration) time.Time {
	return at.Add(claimTimeout)
}

// run takes queued claims with n workers, oldest first, until ctx ends.
func (q *claimPublishes) run(ctx context.Context, n int, expired func(queuedClaim) bool, dropped func(queuedClaim), publish func(context.Context, queuedClaim)) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				for c, ok := q.take(expired, dropped); ok && ctx.Err() == nil; c, ok = q.take(expired, dropped) {
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
