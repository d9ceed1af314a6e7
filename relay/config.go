package relay

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"provideragent/lease"
)

// ErrInvalidConfig is wrapped by Config.Validate.
var ErrInvalidConfig = errors.New("invalid relay config")

// Config configures a Pool. Start from DefaultConfig.
type Config struct {
	// URLs are the relays, ws:// or wss://; put in lease.NormalizeRelayURL's
	// canonical form (the one the lease machine counts quorum in) and
	// deduplicated. At least one is required.
	URLs []string
	// DialAddrs maps a relay URL (as in URLs) to the websocket URL actually
	// dialled, e.g. through a test proxy; labels, results and metrics keep
	// the URL from URLs. Absent: dial the URL itself.
	DialAddrs map[string]string
	// BackoffInitial is the first reconnect (and resubscribe) delay (default 500ms).
	BackoffInitial time.Duration
	// BackoffMax caps the reconnect delay (default 30s).
	BackoffMax time.Duration
	// StableAfter resets the backoff once a connection has lasted this long
	// (default 30s); an EOSE resets it too.
	StableAfter time.Duration
	// DialTimeout bounds one websocket handshake (default 10s).
	DialTimeout time.Duration
	// WriteTimeout bounds one frame write (default 10s); a write that times
	// out drops the connection.
	WriteTimeout time.Duration
	// PingInterval is how often a websocket ping checks the connection (default 30s).
	PingInterval time.Duration
	// PingTimeout is how long a pong may take before the connection is dropped (default 10s).
	PingTimeout time.Duration
	// NIP11Timeout bounds the NIP-11 information fetch (default 3s); a relay
	// without a document is fine.
	NIP11Timeout time.Duration
	// PublishTimeout is Publish's deadline when its ctx has none (default 10s).
	PublishTimeout time.Duration
	// MaxMessageSize is the largest frame accepted from a relay (default 1 MiB).
	MaxMessageSize int64
	// ReceiveBuffer is the capacity of the Received channel (default 256).
	ReceiveBuffer int
	// QuerySlots is how many queries may run at once on one relay
	// connection (default 4); more wait for a slot. The subscription keeps
	// its REQs within the relay's max_subscriptions less these and one
	// catch-up page.
	QuerySlots int
	// AssumedMaxSubscriptions is the subscription limit assumed for a relay
	// whose NIP-11 document gives none (default 20: @nostr-relay/core keeps
	// 20 per connection and silently evicts the oldest beyond).
	AssumedMaxSubscriptions int
	// AssumedMaxMessageLength bounds REQ frames sent to a relay whose NIP-11
	// document gives no max_message_length (default 65536).
	AssumedMaxMessageLength int
	// PageLimit is the limit set on filters that have none when the relay
	// advertises no max_limit (default 500, strfry's): a filter that
	// returns that many stored events is read again page by page (until
	// the oldest one returned) before the relay counts as synced.
	PageLimit int
}

// DefaultConfig returns the documented defaults, with no URLs.
func DefaultConfig() Config {
	return Config{
		BackoffInitial: 500 * time.Millisecond,
		BackoffMax:     30 * time.Second,
		StableAfter:    30 * time.Second,
		DialTimeout:    10 * time.Second,
		WriteTimeout:   10 * time.Second,
		PingInterval:   30 * time.Second,
		PingTimeout:    10 * time.Second,
		NIP11Timeout:   3 * time.Second,
		PublishTimeout: 10 * time.Second,
		MaxMessageSize: 1 << 20,
		ReceiveBuffer:  256,

		QuerySlots:              4,
		AssumedMaxSubscriptions: 20,
		AssumedMaxMessageLength: 65536,
		PageLimit:               500,
	}
}

// Validate reports the first invalid field, naming it and its value.
func (c Config) Validate() error {
	if len(c.URLs) == 0 {
		return fmt.Errorf("%w: URLs is empty, want at least one relay", ErrInvalidConfig)
	}
	for _, u := range c.URLs {
		if _, err := lease.NormalizeRelayURL(u); err != nil {
			return fmt.Errorf("%w: URLs entry %q, want ws://host or wss://host: %v", ErrInvalidConfig, u, err)
		}
	}
	for u, d := range c.DialAddrs {
		pd, err := url.Parse(d)
		if err != nil || (pd.Scheme != "ws" && pd.Scheme != "wss") || pd.Host == "" {
			return fmt.Errorf("%w: DialAddrs[%q] = %q, want ws://host or wss://host", ErrInvalidConfig, u, d)
		}
	}
	durations := []struct {
		name string
		v    time.Duration
	}{
		{"BackoffInitial", c.BackoffInitial}, {"BackoffMax", c.BackoffMax}, {"StableAfter", c.StableAfter},
		{"DialTimeout", c.DialTimeout}, {"WriteTimeout", c.WriteTimeout}, {"PingInterval", c.PingInterval},
		{"PingTimeout", c.PingTimeout}, {"NIP11Timeout", c.NIP11Timeout}, {"PublishTimeout", c.PublishTimeout},
	}
	for _, d := range durations {
		if d.v <= 0 {
			return fmt.Errorf("%w: %s = %v, want > 0", ErrInvalidConfig, d.name, d.v)
		}
	}
	if c.BackoffMax < c.BackoffInitial {
		return fmt.Errorf("%w: BackoffMax = %v, want >= BackoffInitial (%v)", ErrInvalidConfig, c.BackoffMax, c.BackoffInitial)
	}
	if c.MaxMessageSize < 1024 {
		return fmt.Errorf("%w: MaxMessageSize = %d, want >= 1024", ErrInvalidConfig, c.MaxMessageSize)
	}
	if c.ReceiveBuffer < 0 {
		return fmt.Errorf("%w: ReceiveBuffer = %d, want >= 0", ErrInvalidConfig, c.ReceiveBuffer)
	}
	if c.QuerySlots < 1 {
		return fmt.Errorf("%w: QuerySlots = %d, want >= 1", ErrInvalidConfig, c.QuerySlots)
	}
	if c.AssumedMaxSubscriptions < c.QuerySlots+2 {
		return fmt.Errorf("%w: AssumedMaxSubscriptions = %d, want >= QuerySlots+2 (%d)", ErrInvalidConfig, c.AssumedMaxSubscriptions, c.QuerySlots+2)
	}
	if c.AssumedMaxMessageLength < 1024 {
		return fmt.Errorf("%w: AssumedMaxMessageLength = %d, want >= 1024", ErrInvalidConfig, c.AssumedMaxMessageLength)
	}
	if c.PageLimit < 1 {
		return fmt.Errorf("%w: PageLimit = %d, want >= 1", ErrInvalidConfig, c.PageLimit)
	}
	return nil
}

// normalizedURLs returns the URLs normalised and deduplicated, in order.
func (c Config) normalizedURLs() []string {
	seen := make(map[string]bool, len(c.URLs))
	out := make([]string, 0, len(c.URLs))
	for _, u := range c.URLs {
		n := canonicalURL(u)
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// dialAddr returns the websocket URL to dial for the normalised relay URL u.
func (c Config) dialAddr(u string) string {
	for k, d := range c.DialAddrs {
		if canonicalURL(k) == u && d != "" {
			return d
		}
	}
	return u
}

// canonicalURL is the relay URL form used for every label and key in this
// package: lease.NormalizeRelayURL's, the one form the whole agent compares
// relays in (Validate refuses a URL it rejects; such a URL is kept as
// given).
func canonicalURL(u string) string {
	if n, err := lease.NormalizeRelayURL(u); err == nil {
		return n
	}
	return u
}
