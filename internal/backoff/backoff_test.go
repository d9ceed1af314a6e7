package backoff

import (
	"math"
	"testing"
	"time"
)

func TestCeiling(t *testing.T) {
	e := Exponential{Base: 100 * time.Millisecond, Factor: 2, Max: time.Second}
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{-1, 100 * time.Millisecond}, {0, 100 * time.Millisecond}, {1, 200 * time.Millisecond}, {3, 800 * time.Millisecond}, {4, time.Second}, {1 << 30, time.Second}} {
		if got := e.Ceiling(tc.n); got != tc.want {
			t.Errorf("Ceiling(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	secs := Exponential{Base: time.Second, Factor: 1.5, Max: time.Minute}
	if got, want := secs.Ceiling(2), 2250*time.Millisecond; got != want {
		t.Errorf("1.5^2 s = %v, want %v", got, want)
	}
}

func TestJitter(t *testing.T) {
	d := time.Second
	for _, tc := range []struct {
		r           float64
		full, equal time.Duration
	}{
		{0, 0, 500 * time.Millisecond},
		{0.5, 500 * time.Millisecond, 750 * time.Millisecond},
		{-1, 0, 500 * time.Millisecond},
		{math.NaN(), 0, 500 * time.Millisecond},
		{7, d - 1, d - 1},
	} {
		if got := Full(d, tc.r); got != tc.full {
			t.Errorf("Full(%v, %v) = %v, want %v", d, tc.r, got, tc.full)
		}
		if got := Equal(d, tc.r); got != tc.equal {
			t.Errorf("Equal(%v, %v) = %v, want %v", d, tc.r, got, tc.equal)
		}
	}
}

func TestPolicyDelay(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Factor: 2, Max: time.Second}
	for _, tc := range []struct {
		jitter  Jitter
		attempt int
		r       float64
		want    time.Duration
	}{
		{NoJitter, 0, 0.5, 100 * time.Millisecond},
		{NoJitter, 2, 0.5, 400 * time.Millisecond},
		{NoJitter, 9, 0, time.Second},
		{FullJitter, 1, 0.5, 100 * time.Millisecond},
		{FullJitter, 1, 0, 0},
		{EqualJitter, 1, 0, 100 * time.Millisecond},
		{EqualJitter, 1, 0.5, 150 * time.Millisecond},
	} {
		p.Jitter = tc.jitter
		if got := p.Delay(tc.attempt, tc.r); got != tc.want {
			t.Errorf("%+v.Delay(%d, %v) = %v, want %v", p, tc.attempt, tc.r, got, tc.want)
		}
	}
}
