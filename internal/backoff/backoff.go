// Package backoff is the one retry-delay formula of the relay supervisor,
// the courier and the uploader: an exponential ceiling from a base, capped,
// and optional jitter. The jitter source is an argument r (uniform in
// [0, 1)), so callers inject their random source and tests pin delays.
// lease keeps its own formulas: it imports only the standard library.
package backoff

import (
	"math"
	"time"
)

// Exponential is min(Base * Factor^n, Max) for n = 0, 1, 2, ...
type Exponential struct {
	Base   time.Duration // the delay for n = 0
	Factor float64       // growth per step (>= 1; 2 doubles)
	Max    time.Duration // the cap
}

// Ceiling is the un-jittered delay of step n (n < 0 counts as 0). An
// overflowing or undefined product is the cap.
func (e Exponential) Ceiling(n int) time.Duration {
	if n < 0 {
		n = 0
	}
	d := float64(e.Base) * math.Pow(e.Factor, float64(n))
	if math.IsNaN(d) || math.IsInf(d, 0) || d >= float64(e.Max) {
		return e.Max
	}
	return time.Duration(d)
}

// Full is "full jitter": r*d, uniform in [0, d).
func Full(d time.Duration, r float64) time.Duration {
	return time.Duration(unit(r) * float64(d))
}

// Equal is "equal jitter": d/2 + r*(d - d/2), uniform in [d/2, d).
func Equal(d time.Duration, r float64) time.Duration {
	half := d / 2
	return half + time.Duration(float64(d-half)*unit(r))
}

// unit clamps r into [0, 1): NaN and negatives are 0, 1 and more the
// largest float64 below 1.
func unit(r float64) float64 {
	if math.IsNaN(r) || r < 0 {
		return 0
	}
	if r >= 1 {
		return math.Nextafter(1, 0)
	}
	return r
}
