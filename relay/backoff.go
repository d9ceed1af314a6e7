package relay

import (
	"time"

	"provideragent/internal/backoff"
)

// Backoff computes jittered exponential delays: attempt 0 waits about
// Initial, each further attempt doubles it up to Max. The jitter ("equal
// jitter") keeps the delay in [d/2, d], so reconnects never hammer a relay
// and many agents do not reconnect in lockstep.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// Delay returns the wait before attempt (0-based), given r uniform in [0, 1).
func (b Backoff) Delay(attempt int, r float64) time.Duration {
	return backoff.Equal(backoff.Exponential{Base: b.Initial, Factor: 2, Max: b.Max}.Ceiling(attempt), r)
}
