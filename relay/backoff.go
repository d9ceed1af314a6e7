package relay

import "provideragent/internal/backoff"

// Backoff is the reconnect, resubscribe and rate-limited publish delay:
// backoff.Policy from BackoffInitial doubling up to BackoffMax, with equal
// jitter (in [d/2, d)), so reconnects never hammer a relay and many agents
// do not reconnect in lockstep.
func (c Config) Backoff() backoff.Policy {
	return backoff.Policy{Initial: c.BackoffInitial, Factor: 2, Max: c.BackoffMax, Jitter: backoff.EqualJitter}
}
