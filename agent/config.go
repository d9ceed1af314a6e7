package agent

import (
	"errors"
	"fmt"
	"time"

	"provideragent/courier"
	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/lease"
	"provideragent/relay"
)

// ErrInvalidConfig wraps every Config.Validate failure.
var ErrInvalidConfig = errors.New("agent: invalid config")

// Config is the agent's runtime configuration (config turns the TOML
// file, environment and flags into one).
type Config struct {
	// Lease is the lease machine's configuration; Lease.Relays is the relay
	// set the agent connects to and judges quorum over.
	Lease lease.Config
	// SecretKey is the identity (hex or nsec).
	SecretKey string
	// DialAddrs maps a canonical relay URL to the websocket URL actually
	// dialled (a proxy in the demo and tests). Events stay labelled with
	// the canonical URL.
	DialAddrs map[string]string
	// TrustedIssuers are hex public keys whose lease grants (kind 38388)
	// are accepted from relays.
	TrustedIssuers []string
	// Listen is the /metrics, /healthz and /status address; "" disables it.
	// Default "127.0.0.1:9464".
	Listen string
	// TickInterval is how often the machine's Tick runs. Default 250 ms.
	TickInterval time.Duration
	// PublishTimeout bounds one publish (heartbeats, claims). Default 5 s.
	PublishTimeout time.Duration
	// MaxStepAge is how long the machine loop may go without completing a
	// step (it ticks every TickInterval) before /healthz reports it stuck.
	// Default 30 s.
	MaxStepAge time.Duration
	// CommitWait bounds how long one machine step's commit (and the
	// periodic save) waits for the database: for the connection, and for
	// SQLite's write lock when another process holds it. A step that could
	// not commit is held and retried, each retry waiting 20 ms at most;
	// fencing never waits for it, and the machine's ticks wait for the
	// database at most this long once per episode. Default 250 ms, one
	// tick.
	CommitWait time.Duration
	// HeartbeatTTL is the NIP-40 expiration of our heartbeats, after
	// created_at. 0 (the default) means
	// heartbeat.MinHeartbeatTTL(Lease.Stale, Lease.MaxSkew): Paygress's live
	// window, 300 s, unless stale + max_skew is longer (see
	// heartbeat.DefaultHeartbeatTTL for why). Otherwise at least that.
	HeartbeatTTL time.Duration
	// RestartMaxAttempts is the respawn budget given to lease grants from
	// the relays whose restart policy is on-failure without a count
	// (max_attempts is optional on the wire). 0 means never respawn them.
	// Default 5.
	RestartMaxAttempts int
	// Ingest bounds what the verifying ingest accepts; MaxSkew and
	// HeartbeatMaxAge are taken from Lease.
	Ingest heartbeat.Config
	// Courier tunes the outbox (revocations).
	Courier courier.Config
	// StopWorkloadsOnExit stops every workload process when Run returns
	// (default false: processes keep running across an agent restart; the
	// demo and tests set it).
	StopWorkloadsOnExit bool
	// Name labels this agent in logs and timeline events. Default: the npub.
	Name string
	// ClockCheckInterval is how often the local clock is compared with the
	// relays' (their HTTP Date header); outside MaxSkew/2 for two checks in
	// a row, the machine refuses takeovers and fences what it holds. 0
	// disables the check. Default 1 min.
	ClockCheckInterval time.Duration
}

// The daemon's defaults, one owner each: DefaultConfig and the config file's
// defaults (config) are built from them.
const (
	DefaultListen             = "127.0.0.1:9464"
	DefaultTickInterval       = 250 * time.Millisecond
	DefaultPublishTimeout     = 5 * time.Second
	DefaultMaxStepAge         = 30 * time.Second
	DefaultRestartMaxAttempts = 5
	// The outbox of revocations: courier's defaults except these (its
	// backoff cap, flush interval and retention are courier's).
	DefaultCourierMaxAttempts    = 10
	DefaultCourierInitialBackoff = time.Second
	// RelayBackoffMax caps the reconnect backoff of the agent's relay
	// connections (relay's own default is 30 s): a relay that comes
	// back counts towards quorum again within seconds, well inside the
	// lease's takeover_after.
	RelayBackoffMax = 5 * time.Second
)

// DefaultConfig returns the defaults; set SecretKey and Lease.Relays.
func DefaultConfig() Config {
	c := courier.DefaultConfig()
	c.MaxAttempts = DefaultCourierMaxAttempts
	c.InitialBackoff = DefaultCourierInitialBackoff
	c.ForwardTimeout = 20 * time.Second
	// A receipt claimed by a flush that died with the process (kill -9) is
	// due again after ClaimTimeout: keep it short, above ForwardTimeout.
	c.ClaimTimeout = 30 * time.Second
	ing := heartbeat.DefaultConfig()
	// Heartbeats are split into events of at most 60 KiB
	// (heartbeat.BuildBeat); nothing larger passes strfry (65,536 bytes
	// per event) on the way to us either.
	ing.MaxEventBytes, ing.MaxContentBytes = 64<<10, 64<<10
	return Config{
		Lease:              lease.DefaultConfig(),
		Listen:             DefaultListen,
		TickInterval:       DefaultTickInterval,
		PublishTimeout:     DefaultPublishTimeout,
		MaxStepAge:         DefaultMaxStepAge,
		CommitWait:         DefaultTickInterval,
		RestartMaxAttempts: DefaultRestartMaxAttempts,
		ClockCheckInterval: time.Minute,
		Ingest:             ing,
		Courier:            c,
	}
}

// Validate reports the first invalid field, naming it and its value.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if err := c.Lease.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if _, err := identity.NewKeys(c.SecretKey); err != nil {
		return bad("secret key: %v", err)
	}
	for i, k := range c.TrustedIssuers {
		if !lease.IsHexPubkey(k) {
			return bad("trusted_issuers[%d] = %q, must be a 64-character lower-case hex pubkey", i, k)
		}
	}
	for canon, dial := range c.DialAddrs {
		if _, err := lease.NormalizeRelayURL(dial); err != nil {
			return bad("dial_addrs[%q] = %q: %v", canon, dial, err)
		}
	}
	if c.TickInterval <= 0 || c.TickInterval > c.Lease.Stale {
		return bad("tick_interval = %v, must be positive and at most lease stale %v", c.TickInterval, c.Lease.Stale)
	}
	if c.MaxStepAge <= c.TickInterval {
		return bad("max_step_age = %v, must exceed tick_interval %v", c.MaxStepAge, c.TickInterval)
	}
	if c.CommitWait <= 0 {
		return bad("commit_wait = %v, must be positive", c.CommitWait)
	}
	if c.PublishTimeout <= 0 {
		return bad("publish_timeout = %v, must be positive", c.PublishTimeout)
	}
	if c.RestartMaxAttempts < 0 || c.RestartMaxAttempts > lease.MaxRestartAttempts {
		return bad("restart_max_attempts = %d, must be 0 to %d", c.RestartMaxAttempts, lease.MaxRestartAttempts)
	}
	if minTTL := heartbeat.MinHeartbeatTTL(c.Lease.Stale, c.Lease.MaxSkew); c.HeartbeatTTL != 0 && c.HeartbeatTTL < minTTL {
		return bad("heartbeat_ttl = %v, must be 0 (default) or at least %v (Paygress's live window, and lease stale + max_skew)", c.HeartbeatTTL, minTTL)
	}
	if err := c.Courier.Validate(); err != nil {
		return fmt.Errorf("%w: courier: %w", ErrInvalidConfig, err)
	}
	return nil
}

// normaliseKeys is m with its relay URL keys in lease's canonical form
// (canonicalRelay).
func normaliseKeys(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[canonicalRelay(k)] = v
	}
	return out
}

// canonicalRelay is relay URL r in lease's canonical form
// (NormalizeRelayURL), or r as it is when it does not parse.
func canonicalRelay(r string) string {
	if n, err := lease.NormalizeRelayURL(r); err == nil {
		return n
	}
	return r
}

// RelayConfig is the relay pool for this agent's relays, the agent's own
// and that of CLI commands that publish for it: relay's defaults,
// Lease.Relays dialled as DialAddrs says, PublishTimeout, and reconnects
// backing off at most RelayBackoffMax.
func (c Config) RelayConfig() relay.Config {
	rc := relay.DefaultConfig()
	rc.URLs = c.Lease.Relays
	rc.DialAddrs = c.DialAddrs
	rc.PublishTimeout = c.PublishTimeout
	rc.BackoffMax = min(rc.BackoffMax, RelayBackoffMax)
	return rc
}
