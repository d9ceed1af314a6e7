package agent

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"provideragent/lease"
)

// Queued claims are published once each by at most n workers at a time,
// which all wake for a burst, oldest first; queueing a burst starts no
// goroutine (a mass retake queues 100,000).
func TestClaimPublishesBoundedAndOnce(t *testing.T) {
	const n, claims = 4, 2000
	q := newClaimPublishes()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	seen := map[string]int{}
	var order []string
	var inFlight, most atomic.Int32
	all := make(chan struct{})
	go q.run(ctx, n, never, nil, func(_ context.Context, c queuedClaim) {
		now := inFlight.Add(1)
		for {
			m := most.Load()
			if now <= m || most.CompareAndSwap(m, now) {
				break
			}
		}
		time.Sleep(100 * time.Microsecond)
		mu.Lock()
		seen[c.e.ID]++
		order = append(order, c.e.ID)
		if len(order) == claims {
			close(all)
		}
		mu.Unlock()
		inFlight.Add(-1)
	})
	time.Sleep(50 * time.Millisecond) // the workers wait for claims
	before := runtime.NumGoroutine()
	at := time.Unix(1_700_000_000, 0)
	for i := range claims {
		q.add(lease.PublishClaim{ID: fmt.Sprintf("w%04d", i), Epoch: 2}, at)
	}
	if g := runtime.NumGoroutine(); g > before {
		t.Fatalf("%d goroutines after queueing %d claims, %d before: want none started", g, claims, before)
	}
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d claims published in 30 s", len(order), claims)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range claims {
		if id := fmt.Sprintf("w%04d", i); seen[id] != 1 {
			t.Fatalf("claim %s published %d times, want once", id, seen[id])
		}
	}
	if m := most.Load(); m > n || m < 2 {
		t.Fatalf("at most %d claims in flight, want between 2 (the waiting workers woke) and %d", m, n)
	}
	if first := order[0]; first >= fmt.Sprintf("w%04d", n) {
		t.Fatalf("first claim published %s, want one of the %d oldest (taken oldest first)", first, n)
	}
}

// A queued claim is published only while its claim step has not timed out
// (ClaimTimeout after the claim was made).
func TestClaimExpiredBeforeItsStepTimesOut(t *testing.T) {
	a := &Agent{cfg: Config{PublishTimeout: 5 * time.Second}}
	a.cfg.Lease.ClaimTimeout = 30 * time.Second
	made := time.Unix(1_700_000_000, 0)
	c := queuedClaim{e: lease.PublishClaim{ID: "w1", Epoch: 2}, at: made}
	for _, tc := range []struct {
		waited time.Duration
		want   bool
	}{{0, false}, {25 * time.Second, false}, {30*time.Second - time.Millisecond, false}, {30 * time.Second, true}, {time.Minute, true}} {
		if got := a.claimExpired(c, made.Add(tc.waited)); got != tc.want {
			t.Errorf("claimExpired after waiting %v = %v, want %v (claim_timeout 30s)", tc.waited, got, tc.want)
		}
	}
}

func never(queuedClaim) bool { return false }

// A withdrawn marker is sent only for a claim that may have reached a
// relay: not for one still queued (which is then not published either),
// nor for one dropped as expired; for one taken for publishing, and for
// one this agent does not know (made before a restart), it is.
func TestWithdrawNeededOnlyForClaimsSent(t *testing.T) {
	q := newClaimPublishes()
	at := time.Unix(1_700_000_000, 0)
	claim := func(id string) lease.PublishClaim { return lease.PublishClaim{ID: id, Epoch: 2} }
	q.add(claim("queued"), at)
	q.add(claim("expired"), at)
	q.add(claim("sent"), at)
	if q.withdrawNeeded("queued", 2) {
		t.Error("withdrawNeeded(a claim still queued) = true, want false")
	}
	expired := func(c queuedClaim) bool { return c.e.ID == "expired" }
	var dropped []string
	c, ok := q.take(expired, func(c queuedClaim) { dropped = append(dropped, c.e.ID) })
	if !ok || c.e.ID != "sent" {
		t.Fatalf("take = %q, %v; want the claim \"sent\" (\"queued\" was withdrawn, \"expired\" expired)", c.e.ID, ok)
	}
	if len(dropped) != 1 || dropped[0] != "expired" {
		t.Fatalf("dropped as expired: %q, want [expired]", dropped)
	}
	if q.withdrawNeeded("expired", 2) {
		t.Error("withdrawNeeded(a claim dropped as expired) = true, want false")
	}
	if !q.withdrawNeeded("sent", 2) {
		t.Error("withdrawNeeded(a claim taken for publishing) = false, want true")
	}
	if !q.withdrawNeeded("unknown", 2) {
		t.Error("withdrawNeeded(a claim this agent never queued) = false, want true")
	}
	// A retry supersedes the attempt still queued: only the retry is taken.
	q.add(claim("retry"), at)
	q.add(claim("retry"), at.Add(time.Second))
	if c, ok := q.take(never, nil); !ok || !c.at.Equal(at.Add(time.Second)) {
		t.Fatalf("take = %v at %v, want the later attempt", ok, c.at)
	}
	if _, ok := q.take(never, nil); ok {
		t.Fatal("take found a claim after the last, want none")
	}
}

// publishQueuedClaims publishes the claims queued for the publishers, as
// claimPublishLoop would (a step agent runs no loops), and returns how many.
func publishQueuedClaims(ctx context.Context, a *Agent) int {
	n := 0
	for c, ok := a.claims.publishes.take(never, nil); ok; c, ok = a.claims.publishes.take(never, nil) {
		a.publishClaim(ctx, c.e, c.at)
		n++
	}
	return n
}
