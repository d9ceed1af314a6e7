package courier

import (
	"fmt"
	"math"
	"time"

	"provideragent/internal/backoff"
)

// Config tunes a Courier. Start from DefaultConfig and change what you need;
// Open calls Validate.
type Config struct {
	// MaxBundleBytes is the largest bundle Send accepts. Default 1 MiB.
	MaxBundleBytes int
	// MaxAttempts is how many failed deliveries dead-letter a receipt.
	// Default DefaultMaxAttempts (5): the courier CLI's outbox; the agent's own
	// outbox uses agent.DefaultCourierMaxAttempts.
	MaxAttempts int
	// InitialBackoff is the backoff ceiling after the first failure.
	// Default DefaultInitialBackoff (100 ms).
	InitialBackoff time.Duration
	// BackoffFactor multiplies the ceiling after each failure. Default 2.
	BackoffFactor float64
	// MaxBackoff caps the backoff ceiling. Default 5 min.
	MaxBackoff time.Duration
	// MaxRetryAfter caps a forwarder's Retry-After. Default 1 h.
	MaxRetryAfter time.Duration
	// Concurrency is how many deliveries run at once during a Flush.
	// Default 16.
	Concurrency int
	// ClaimBatch is how many due receipts Flush claims per query. Default 256.
	ClaimBatch int
	// ClaimTimeout is how long a claimed receipt stays hidden from other
	// flushes; a crashed flush's receipts become due again after it. It must
	// exceed ForwardTimeout. Default 2 min.
	ClaimTimeout time.Duration
	// ForwardTimeout bounds one Forward call. Default 30 s.
	ForwardTimeout time.Duration
	// FlushInterval is Run's cadence when nothing wakes it. Default 1 s.
	FlushInterval time.Duration
	// SendBatch is the most sends grouped into one commit. Default 256.
	SendBatch int
	// Retention is how long acknowledged receipts are kept before Prune
	// deletes them. Default 7 days.
	Retention time.Duration
	// ReplayRate is the default DLQ replay rate in receipts per second.
	// Default 10.
	ReplayRate float64
}

// The defaults of DefaultConfig, owned here. The agent starts from
// DefaultConfig and sets its own MaxAttempts and InitialBackoff
// (agent.DefaultCourierMaxAttempts, agent.DefaultCourierInitialBackoff).
const (
	DefaultMaxAttempts    = 5
	DefaultInitialBackoff = 100 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Minute
	DefaultFlushInterval  = time.Second
	DefaultRetention      = 7 * 24 * time.Hour
)

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		MaxBundleBytes: 1 << 20,
		MaxAttempts:    DefaultMaxAttempts,
		InitialBackoff: DefaultInitialBackoff,
		BackoffFactor:  2,
		MaxBackoff:     DefaultMaxBackoff,
		MaxRetryAfter:  time.Hour,
		Concurrency:    16,
		ClaimBatch:     256,
		ClaimTimeout:   2 * time.Minute,
		ForwardTimeout: 30 * time.Second,
		FlushInterval:  DefaultFlushInterval,
		SendBatch:      256,
		Retention:      DefaultRetention,
		ReplayRate:     10,
	}
}

// Validate reports the first field with a bad value.
func (c Config) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("courier config: %s = %v: %s: %w", field, v, want, ErrInvalidConfig)
	}
	switch {
	case c.MaxBundleBytes <= 0:
		return bad("MaxBundleBytes", c.MaxBundleBytes, "must be positive")
	case c.MaxAttempts <= 0:
		return bad("MaxAttempts", c.MaxAttempts, "must be at least 1")
	case c.InitialBackoff <= 0:
		return bad("InitialBackoff", c.InitialBackoff, "must be positive")
	case math.IsNaN(c.BackoffFactor) || c.BackoffFactor < 1 || c.BackoffFactor > 100:
		return bad("BackoffFactor", c.BackoffFactor, "must be between 1 and 100")
	case c.MaxBackoff < c.InitialBackoff:
		return bad("MaxBackoff", c.MaxBackoff, "must be at least InitialBackoff")
	case c.MaxRetryAfter <= 0:
		return bad("MaxRetryAfter", c.MaxRetryAfter, "must be positive")
	case c.Concurrency <= 0 || c.Concurrency > 4096:
		return bad("Concurrency", c.Concurrency, "must be between 1 and 4096")
	case c.ClaimBatch <= 0 || c.ClaimBatch > 10000:
		return bad("ClaimBatch", c.ClaimBatch, "must be between 1 and 10000")
	case c.ForwardTimeout <= 0:
		return bad("ForwardTimeout", c.ForwardTimeout, "must be positive")
	case c.ClaimTimeout <= c.ForwardTimeout:
		return bad("ClaimTimeout", c.ClaimTimeout, "must exceed ForwardTimeout")
	case c.FlushInterval <= 0:
		return bad("FlushInterval", c.FlushInterval, "must be positive")
	case c.SendBatch <= 0 || c.SendBatch > 10000:
		return bad("SendBatch", c.SendBatch, "must be between 1 and 10000")
	case c.Retention <= 0:
		return bad("Retention", c.Retention, "must be positive")
	case math.IsNaN(c.ReplayRate) || c.ReplayRate <= 0:
		return bad("ReplayRate", c.ReplayRate, "must be positive")
	}
	return nil
}

// Backoff is the delivery retry delay c configures: backoff.Policy from
// InitialBackoff growing by BackoffFactor up to MaxBackoff, with full
// jitter (many receipts due at once spread over the whole window).
func (c Config) Backoff() backoff.Policy {
	return backoff.Policy{Initial: c.InitialBackoff, Factor: c.BackoffFactor, Max: c.MaxBackoff, Jitter: backoff.FullJitter}
}

// NextAttemptAt is when to try again after the failures-th failure
// (1-based; smaller counts as 1) under policy p, given a uniform random rnd
// in [0, 1). It is a pure function. The result is at least 1 ms after now,
// so a retry never lands in the same instant (one Flush forwards each
// receipt at most once).
func NextAttemptAt(p backoff.Policy, now time.Time, failures int, rnd float64) time.Time {
	d := p.Delay(max(failures, 1)-1, rnd)
	if d < time.Millisecond {
		d = time.Millisecond
	}
	return now.Add(d)
}
