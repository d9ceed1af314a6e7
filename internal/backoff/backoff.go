// Package backoff is the one retry-delay policy of the relay supervisor's
// reconnects, the courier's deliveries, the uploader's in-call retries and
// the lease's claim retry and respawns: Policy, an exponential ceiling from
// Initial growing by Factor per attempt up to Max, and a Jitter. The jitter
// source is an argument r (uniform in [0, 1)), so callers inject their
// random source and tests (and the lease machine, which is deterministic)
// pin delays.
package backoff

import (
	"math"
	"time"
)

// Jitter is how a Policy spreads a delay below its ceiling d.
type Jitter int

const (
	// NoJitter waits exactly the ceiling (the lease machine: its delays are
	// staggered by standby rank instead).
	NoJitter Jitter = iota
	// FullJitter waits uniformly in [0, d) (the courier: many receipts due
	// at once spread over the whole window).
	FullJitter
	// EqualJitter waits in [d/2, d) (relay reconnects: never hammering a
	// relay, never in lockstep with other agents).
	EqualJitter
)

// Policy is the retry delay of every retrying part of the agent, with one
// set of names: attempt 0 (the first retry) waits about Initial, each
// further attempt Factor times longer, never more than Max.
type Policy struct {
	Initial time.Duration // the ceiling of attempt 0
	Factor  float64       // growth per attempt (>= 1; 2 doubles)
	Max     time.Duration // the cap of the ceiling
	Jitter  Jitter
}

// Ceiling is attempt's un-jittered delay: min(Initial * Factor^attempt,
// Max), attempt < 0 counting as 0.
func (p Policy) Ceiling(attempt int) time.Duration {
	return Exponential{Base: p.Initial, Factor: p.Factor, Max: p.Max}.Ceiling(attempt)
}

// Delay is attempt's delay with the policy's jitter, given r uniform in
// [0, 1).
func (p Policy) Delay(attempt int, r float64) time.Duration {
	d := p.Ceiling(attempt)
	switch p.Jitter {
	case FullJitter:
		return Full(d, r)
	case EqualJitter:
		return Equal(d, r)
	}
	return d
}

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
