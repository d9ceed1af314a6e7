package relay

import "time"

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
	d := b.Initial
	for i := 0; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	if d > b.Max {
		d = b.Max
	}
	if r < 0 {
		r = 0
	}
	if r >= 1 {
		r = 0.999999
	}
	half := d / 2
	return half + time.Duration(float64(d-half)*r)
}
