package localrelay

import (
	"fmt"
	"sync"
	"time"
)

// RateLimitReason is the OK reason of an event refused for a rate limit:
// khatru's policies.EventPubKeyRateLimiter words.
const RateLimitReason = "rate-limited: slow down, please"

// RateLimit bounds the events a relay takes, as public relays do: per
// signing key and per client connection, each a token bucket that holds
// Burst events and refills at PerSecond. An event over either bound is
// refused with OK false RateLimitReason (counted in Stats.Refusals). The
// zero value (or a zero PerSecond) applies no bound.
type RateLimit struct {
	// KeyPerSecond and KeyBurst bound the events of one pubkey.
	KeyPerSecond float64
	KeyBurst     int
	// ConnPerSecond and ConnBurst bound the events of one connection.
	ConnPerSecond float64
	ConnBurst     int
}

// on reports whether any bound applies.
func (l RateLimit) on() bool { return l.KeyPerSecond > 0 || l.ConnPerSecond > 0 }

func (l RateLimit) validate() error {
	if l.KeyPerSecond < 0 || l.ConnPerSecond < 0 || l.KeyBurst < 0 || l.ConnBurst < 0 {
		return fmt.Errorf("%w: RateLimit = %+v, want no negative value", ErrInvalidOptions, l)
	}
	if (l.KeyPerSecond > 0 && l.KeyBurst == 0) || (l.ConnPerSecond > 0 && l.ConnBurst == 0) {
		return fmt.Errorf("%w: RateLimit = %+v: a rate needs a burst of at least 1", ErrInvalidOptions, l)
	}
	return nil
}

// buckets are token buckets by key (a pubkey, a connection).
type buckets struct {
	perSecond float64
	burst     float64

	mu sync.Mutex
	by map[any]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newBuckets(perSecond float64, burst int) *buckets {
	if perSecond <= 0 {
		return nil
	}
	return &buckets{perSecond: perSecond, burst: float64(burst), by: map[any]*bucket{}}
}

// take takes one token of key's bucket at now; false: the bucket is empty.
func (b *buckets) take(key any, now time.Time) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k, ok := b.by[key]
	if !ok {
		k = &bucket{tokens: b.burst, at: now}
		b.by[key] = k
	}
	k.tokens = min(b.burst, k.tokens+now.Sub(k.at).Seconds()*b.perSecond)
	k.at = now
	if k.tokens < 1 {
		return false
	}
	k.tokens--
	return true
}

// forget drops key's bucket (a connection that closed).
func (b *buckets) forget(key any) {
	if b == nil {
		return
	}
	b.mu.Lock()
	delete(b.by, key)
	b.mu.Unlock()
}

// rateLimiter applies a RateLimit.
type rateLimiter struct {
	keys, conns *buckets
}

func newRateLimiter(l RateLimit) *rateLimiter {
	if !l.on() {
		return nil
	}
	return &rateLimiter{keys: newBuckets(l.KeyPerSecond, l.KeyBurst), conns: newBuckets(l.ConnPerSecond, l.ConnBurst)}
}

// allow takes a token of the connection's and of the key's bucket; it
// reports whether the event is within both bounds. A refused event takes
// no token of the key's bucket when the connection's refused it.
func (rl *rateLimiter) allow(conn any, pubkey string, now time.Time) bool {
	if rl == nil {
		return true
	}
	return rl.conns.take(conn, now) && rl.keys.take(pubkey, now)
}
