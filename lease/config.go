package lease

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"provideragent/internal/backoff"
)

// MaxRelays bounds the size of a lease's relay set (N). The per-provider relay
// table is sized by N, and quorum checks are O(N).
const MaxRelays = 32

// Config holds the timing and quorum knobs of one provider's machine. All
// durations are measured on the observing provider's own clock. The zero value
// is not usable; start from DefaultConfig.
type Config struct {
	// M is the relay quorum: a provider is healthy when at least M of the N
	// relays delivered a counting heartbeat within the last Stale. Default 2.
	M int
	// N is the number of relays in the lease's relay set; it must equal
	// len(Relays). Default 3.
	N int
	// Relays is the lease's relay set. Every provider of a workload judges
	// quorum over this same set. URLs are normalised with NormalizeRelayURL.
	// Default: three public relays (override them in production).
	Relays []string
	// T1 is how long quorum must stay lost (counted from the moment it was
	// lost, rule 1) before a held workload turns Suspect. Default 120 s.
	T1 time.Duration
	// T2 is how long a workload stays Suspect (counted from T1 after the loss)
	// before it is evicted. Default 300 s.
	T2 time.Duration
	// Stale is how long a counting heartbeat keeps a relay alive for its
	// provider, and the oldest created_at accepted. Default 180 s.
	Stale time.Duration
	// MaxSkew is how far in the future a heartbeat's created_at may lie and
	// still count. Default 30 s.
	MaxSkew time.Duration
	// ProvisionTimeout bounds Provisioning (rule 11) and relay sync after a
	// restart (rule 10). It may not exceed T1+T2. Default 300 s.
	ProvisionTimeout time.Duration
	// TakeoverAfter is how long a standby must see no Live claim by the
	// holder before it may claim the workload (rule 8). It must exceed
	// T1+T2+Stale+MaxSkew+RelayDelay+1s (TakeoverFloor). Default 720 s.
	TakeoverAfter time.Duration
	// RelayDelay bounds delivery through a relay that is up. The claim step
	// waits this long after M relays accepted a claim. Default 10 s.
	RelayDelay time.Duration
	// HeartbeatInterval is how often providers publish heartbeats. Stale must
	// be at least twice this. Default 60 s.
	HeartbeatInterval time.Duration
	// RestartInitial is the delay before the first respawn attempt; each
	// further attempt doubles it (rule 5). Default 5 s.
	RestartInitial time.Duration
	// RestartMax caps the respawn delay. Default 5 min.
	RestartMax time.Duration
	// RestartResetAfter is how long a workload must stay Live after a respawn
	// before its attempt count resets to zero. Default 10 min.
	RestartResetAfter time.Duration
	// EvictWithoutStandby makes quorum loss evict workloads that have no
	// standby too (rule 6). Default false: they are only reported.
	EvictWithoutStandby bool
	// ClaimRetryBase is the base of the claim step's retry backoff, and
	// part of the stagger per standby rank (see RankStagger). Default 15 s.
	ClaimRetryBase time.Duration
	// ClaimRetryMax caps the doubling part of the claim backoff. Default 5 min.
	ClaimRetryMax time.Duration
	// ClaimTimeout is how long the machine waits for ClaimPublished or
	// ClaimsRead feedback before it withdraws and retries. Default 30 s.
	ClaimTimeout time.Duration
	// ClaimWindow bounds this provider's claims that wait for their
	// publish's answer (ClaimPublished) at once; a claim step that would
	// go beyond it starts (or retries) when one has answered. It keeps a
	// mass takeover or retake (every workload of a failed provider, or of
	// this one back from an outage) flowing at the pace the relays answer
	// instead of queueing claims that time out before they are sent. 0:
	// no bound. Default 256.
	ClaimWindow int
}

// DefaultConfig returns the defaults documented on each Config field: two of
// three relays, T1 120 s, T2 300 s, Stale 180 s, TakeoverAfter 720 s (above
// the holder's self-fencing time plus the relay delay, 640 s). They satisfy
// Validate.
func DefaultConfig() Config {
	return Config{
		M:                 2,
		N:                 3,
		Relays:            []string{"wss://relay.damus.io", "wss://nos.lol", "wss://relay.nostr.band"},
		T1:                120 * time.Second,
		T2:                300 * time.Second,
		Stale:             180 * time.Second,
		MaxSkew:           30 * time.Second,
		ProvisionTimeout:  300 * time.Second,
		TakeoverAfter:     720 * time.Second,
		RelayDelay:        10 * time.Second,
		HeartbeatInterval: 60 * time.Second,
		RestartInitial:    5 * time.Second,
		RestartMax:        5 * time.Minute,
		RestartResetAfter: 10 * time.Minute,
		ClaimRetryBase:    15 * time.Second,
		ClaimRetryMax:     5 * time.Minute,
		ClaimTimeout:      30 * time.Second,
		ClaimWindow:       DefaultClaimWindow,
	}
}

// DefaultClaimWindow is ClaimWindow's default: eight times the agent's 32
// claim publishers, so that they never wait for work, while a claim waits
// behind at most 255 others (a second at the 300 claims a second three
// local relays took; BenchmarkAgentScale's retake).
const DefaultClaimWindow = 256

// SelfFencingTime is the longest a holder that lost relay quorum keeps running
// its workload: T1 + T2 + Stale + MaxSkew.
func (c Config) SelfFencingTime() time.Duration {
	return c.T1 + c.T2 + c.Stale + c.MaxSkew
}

// TakeoverFloor is the least TakeoverAfter can be (it must exceed it):
// the holder's self-fencing time plus RelayDelay and one second. A holder
// counts its own heartbeat for quorum as seen at most RelayDelay plus one
// second (created_at rounds down) after its created_at, on its own clock,
// and that clock is at most MaxSkew/2 ahead of true time, the standby's
// at most MaxSkew/2 behind; the margin above the floor is what pauses,
// ticks, drift and the eviction's stop may use (docs/reliability.md).
func (c Config) TakeoverFloor() time.Duration {
	return c.SelfFencingTime() + c.RelayDelay + time.Second
}

// ReadQuorum is N-M+1: the number of relays a claimer must read, and on which
// a standby must see silence, so that any M-relay quorum intersects them.
func (c Config) ReadQuorum() int { return c.N - c.M + 1 }

// ConfigError is the first Config field Validate found invalid. Key names
// the setting as the agent's config file does ("lease.t1",
// "heartbeat.interval"), so that an operator's error says what to edit;
// errors.Is(err, ErrInvalidConfig) holds.
type ConfigError struct {
	Key    string // the config file's name of the setting
	Value  string // the value as written in messages (strings quoted)
	Reason string // why it is wrong
}

func (e *ConfigError) Error() string {
	return ErrInvalidConfig.Error() + ": " + e.Key + " = " + e.Value + ": " + e.Reason
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) hold.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Validate reports the first invalid field as a *ConfigError. These are the
// lease rules; the agent's config checks them here and nowhere else.
func (c Config) Validate() error {
	bad := func(key string, value any, reason string, args ...any) error {
		v := fmt.Sprint(value)
		if s, ok := value.(string); ok {
			v = strconv.Quote(s)
		}
		return &ConfigError{Key: key, Value: v, Reason: fmt.Sprintf(reason, args...)}
	}
	relays := func() string { return fmt.Sprintf("[%d relays]", len(c.Relays)) }
	switch {
	case len(c.Relays) == 0:
		return &ConfigError{Key: "lease.relays", Value: "[]", Reason: "at least one relay is required (ws:// or wss:// URL)"}
	case len(c.Relays) > MaxRelays:
		return &ConfigError{Key: "lease.relays", Value: relays(), Reason: fmt.Sprintf("at most %d relays", MaxRelays)}
	case len(c.Relays) != c.N:
		return &ConfigError{Key: "lease.relays", Value: relays(), Reason: fmt.Sprintf("n = %d: the relay count and n must agree", c.N)}
	case c.M < 1:
		return bad("lease.quorum", c.M, "must be >= 1")
	case c.M > c.N:
		return bad("lease.quorum", c.M, "must be <= number of relays (%d)", c.N)
	}
	seen := make(map[string]bool, len(c.Relays))
	for i, r := range c.Relays {
		key := fmt.Sprintf("lease.relays[%d]", i)
		n, err := NormalizeRelayURL(r)
		if err != nil {
			return bad(key, r, "%v", err)
		}
		if seen[n] {
			return bad(key, r, "duplicate relay (after normalisation: %s)", n)
		}
		seen[n] = true
	}
	for _, d := range []struct {
		key  string
		v    time.Duration
		zero bool // zero allowed
	}{
		{"lease.t1", c.T1, false},
		{"lease.t2", c.T2, false},
		{"lease.stale", c.Stale, false},
		{"lease.max_skew", c.MaxSkew, true},
		{"lease.provision_timeout", c.ProvisionTimeout, false},
		{"lease.takeover_after", c.TakeoverAfter, false},
		{"lease.relay_delay", c.RelayDelay, true},
		{"heartbeat.interval", c.HeartbeatInterval, false},
		{"lease.restart_backoff_initial", c.RestartInitial, false},
		{"lease.restart_backoff_max", c.RestartMax, false},
		{"lease.restart_backoff_reset_after", c.RestartResetAfter, false},
		{"lease.claim_retry_base", c.ClaimRetryBase, false},
		{"lease.claim_retry_max", c.ClaimRetryMax, false},
		{"lease.claim_timeout", c.ClaimTimeout, false},
	} {
		if d.v < 0 || (d.v == 0 && !d.zero) {
			want := "must be > 0"
			if d.zero {
				want = "must be >= 0"
			}
			return bad(d.key, d.v, "%s", want)
		}
	}
	if c.Stale < 2*c.HeartbeatInterval {
		return bad("heartbeat.interval", c.HeartbeatInterval, "must be at most half of lease.stale (%s) so a lost heartbeat does not cost quorum", c.Stale)
	}
	if c.ProvisionTimeout > c.T1+c.T2 {
		return bad("lease.provision_timeout", c.ProvisionTimeout, "must be <= t1+t2 (%s)", c.T1+c.T2)
	}
	if limit := c.TakeoverFloor(); c.TakeoverAfter <= limit {
		return bad("lease.takeover_after", c.TakeoverAfter,
			"must exceed the holder's self-fencing time plus relay delay and one second, t1+t2+stale+max_skew+relay_delay+1s (%s)", limit)
	}
	if c.RestartMax < c.RestartInitial {
		return bad("lease.restart_backoff_max", c.RestartMax, "must be >= lease.restart_backoff_initial (%s)", c.RestartInitial)
	}
	if c.ClaimWindow < 0 {
		return bad("lease.claim_window", c.ClaimWindow, "must be >= 0 (0: no bound)")
	}
	if c.ClaimRetryMax < c.ClaimRetryBase {
		return bad("lease.claim_retry_max", c.ClaimRetryMax, "must be >= lease.claim_retry_base (%s)", c.ClaimRetryBase)
	}
	return nil
}

// RestartPolicy is the respawn delay: backoff.Policy from RestartInitial
// doubling up to RestartMax, no jitter (the machine is deterministic).
func (c Config) RestartPolicy() backoff.Policy {
	return backoff.Policy{Initial: c.RestartInitial, Factor: 2, Max: c.RestartMax}
}

// RestartBackoff is the delay before respawn attempt number attempt (1-based):
// RestartInitial doubled per earlier attempt, capped at RestartMax.
func (c Config) RestartBackoff(attempt int) time.Duration {
	return c.RestartPolicy().Delay(attempt-1, 0)
}

// ClaimRetryPolicy is the claim step's retry delay before the rank stagger:
// backoff.Policy from ClaimRetryBase doubling up to ClaimRetryMax, no jitter
// (standbys are staggered by rank instead, see ClaimBackoff).
func (c Config) ClaimRetryPolicy() backoff.Policy {
	return backoff.Policy{Initial: c.ClaimRetryBase, Factor: 2, Max: c.ClaimRetryMax}
}

// RankStagger is how much later each standby rank starts a claim step than
// the rank before it, both for the takeover (TakeoverAfter + rank *
// RankStagger) and for a retry after a failed step (ClaimBackoff):
// ClaimRetryBase + 2*RelayDelay. Two standbys count the holder's silence
// from its last heartbeat as each received it, up to RelayDelay apart, and
// the lower rank's claim reaches the higher one up to RelayDelay after it
// is published: 2*RelayDelay apart they cannot cross, so the higher rank
// sees the claim and stands by instead of claiming beside it (both would
// withdraw and try again). ClaimRetryBase is the margin for ticks and busy
// machine loops. Default 35 s.
func (c Config) RankStagger() time.Duration {
	return c.ClaimRetryBase + 2*c.RelayDelay
}

// ClaimBackoff is the delay before retrying the claim step after attempt
// number attempt (1-based) failed, for a standby of the given rank (0 is the
// first standby): ClaimRetryBase doubled per earlier attempt and capped at
// ClaimRetryMax, plus rank*RankStagger so that lower ranks retry first.
func (c Config) ClaimBackoff(attempt, rank int) time.Duration {
	if rank < 0 {
		rank = 0
	}
	return c.ClaimRetryPolicy().Delay(attempt-1, 0) + time.Duration(rank)*c.RankStagger()
}

// NormalizeRelayURL returns the canonical form of a relay URL, so that two
// spellings of the same relay compare equal: the scheme and host are lower
// case, a default port (443 for wss, 80 for ws) and a lone trailing slash are
// dropped, and fragments are removed. Only ws and wss URLs with a host and
// without user info are accepted.
func NormalizeRelayURL(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if s == "" {
		return "", fmt.Errorf("%w: empty url", ErrInvalidRelayURL)
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrInvalidRelayURL, raw, err)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	if u.Scheme != "ws" && u.Scheme != "wss" {
		return "", fmt.Errorf("%w: %q: scheme must be ws or wss", ErrInvalidRelayURL, raw)
	}
	if u.User != nil {
		return "", fmt.Errorf("%w: %q: user info not allowed", ErrInvalidRelayURL, raw)
	}
	host := strings.ToLower(u.Hostname())
	if host == "" {
		return "", fmt.Errorf("%w: %q: missing host", ErrInvalidRelayURL, raw)
	}
	port := u.Port()
	if (u.Scheme == "wss" && port == "443") || (u.Scheme == "ws" && port == "80") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	path := u.EscapedPath()
	for strings.HasSuffix(path, "/") {
		path = strings.TrimSuffix(path, "/")
	}
	out := u.Scheme + "://" + host + path
	if u.RawQuery != "" {
		out += "?" + u.RawQuery
	}
	return out, nil
}
