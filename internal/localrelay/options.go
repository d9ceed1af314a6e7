package localrelay

// What a local relay is built from: its options, the limits it advertises
// and enforces, and the faults it can be told to inject.

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nbd-wtf/go-nostr"
)

// Errors returned by this package.
var (
	// ErrInvalidOptions is wrapped by Options.Validate.
	ErrInvalidOptions = errors.New("invalid local relay options")
	// ErrNotStarted is returned by URL-dependent calls before Start succeeded.
	ErrNotStarted = errors.New("local relay not started")
)

// DefaultRejectReason is the OK reason sent by a relay with RejectWrites.
const DefaultRejectReason = "blocked: writes are disabled on this relay"

// InjectPath is the admin HTTP endpoint (enabled by Options.Admin) that
// takes one raw event as JSON in a POST body and delivers it verbatim to every
// matching subscriber, without any check; with the query `store=1` it is also
// stored, so later REQs return it. Tests use it to serve forged, stale,
// replayed and future-dated events.
const InjectPath = "/localrelay/inject"

// StatsPath is the admin HTTP endpoint (enabled by Options.Admin) that
// answers GET with Stats as JSON.
const StatsPath = "/localrelay/stats"

// Limits are the NIP-11 limitations the relay advertises (zero = absent).
// MaxLimit is also enforced: larger filter limits are clamped; so are
// MaxContentLength and MaxEventTags: a longer content (in characters) or
// more tags get OK false "invalid: ...".
type Limits struct {
	MaxMessageLength int
	MaxSubscriptions int
	MaxLimit         int
	MaxContentLength int
	MaxEventTags     int
}

// Options configure a local relay; the zero value is a well-behaved relay.
// Every fault is off by default.
type Options struct {
	// RejectWrites answers every EVENT with OK false and RejectReason.
	RejectWrites bool
	// RejectReason is the OK reason for RejectWrites (default DefaultRejectReason).
	RejectReason string
	// HoldOK never answers an EVENT (no OK, nothing stored) until the
	// connection closes: a relay that dies or stalls before its OK.
	HoldOK bool
	// WriteDelay delays every OK by this long (default 0).
	WriteDelay time.Duration
	// QueryDelay answers a REQ (its stored events and EOSE) this long
	// late when one of its filters asks for a kind in QueryDelayKinds (any
	// REQ when that is empty): a relay under load that takes and forwards
	// events but answers stored queries slowly. Live events still reach
	// the relay's other subscriptions at once.
	QueryDelay time.Duration
	// QueryDelayKinds are the kinds QueryDelay applies to.
	QueryDelayKinds []int

	// RequireAuth sends a NIP-42 AUTH challenge on connect and fails REQ and
	// EVENT from an unauthenticated connection with "auth-required: ...".
	RequireAuth bool
	// AuthAllow, with RequireAuth, restricts reads and writes to these hex
	// pubkeys; others get "restricted: ...". Empty allows any authenticated key.
	AuthAllow []string

	// ClosedReason, when non-empty, ends subscriptions with a CLOSED carrying
	// this reason (a "blocked:" or "restricted:" prefix reads as permanent,
	// "error:" as transient).
	ClosedReason string
	// ClosedAfter is how long after the REQ the CLOSED is sent; 0 rejects
	// the REQ at once. The relay keeps delivering live events under that
	// subscription id afterwards (khatru has no API to drop the listener);
	// a client must ignore events for subscriptions it considers closed.
	ClosedAfter time.Duration
	// ClosedTimes is how many subscriptions get the CLOSED; 0 means all.
	ClosedTimes int

	// ServeStale drops since and until from every filter, so old stored
	// events are served again after each reconnect.
	ServeStale bool
	// ReplayEvery, when positive, sends every stored event again at this
	// period to every subscription whose filter matches it, ignoring the
	// filter's since and until (replayed old events arriving as new).
	ReplayEvery time.Duration
	// Forge sends, before every event it serves (stored or live), two forged
	// copies: one with altered content and the original id and signature (id
	// mismatch), one with altered content, recomputed id and the original
	// signature (bad signature).
	Forge bool
	// FutureShift, when positive, sends before every live or served event a
	// copy with created_at moved this far into the future.
	FutureShift time.Duration
	// PastShift, when positive, sends before every live or served event a
	// copy with created_at moved this far into the past.
	PastShift time.Duration
	// InjectKey is the hex secret key that signs shifted copies (a validly
	// signed future-dated or stale event from that key); when empty the copies
	// keep the original signature and so are forged too.
	InjectKey string

	// Limits are advertised over NIP-11.
	Limits Limits

	// WriteTimeout is how long a client may accept no byte of what the
	// relay sends it before the relay drops it (closes its socket); default
	// DefaultWriteTimeout. Writes to a client never wait: each connection's
	// frames are queued and written by its own goroutine, so a client that
	// stops reading holds up nobody else. With Strfry it does not apply:
	// strfry has no write timeout, it drops such a client by
	// MaxPendingOutbound or by its keep-alive (PingInterval).
	WriteTimeout time.Duration
	// MaxPendingOutbound is the most bytes queued toward one client; a
	// client whose backlog would exceed it is dropped (default
	// DefaultMaxPendingOutbound, strfry's relay.maxPendingOutboundBytes).
	MaxPendingOutbound int
	// PingInterval is the keep-alive period. khatru pings every
	// PingInterval and drops a client that sent no pong for twice that
	// (default 30 s, so 60 s); with Strfry, as strfry's
	// relay.autoPingSeconds, a client that sent nothing since the previous
	// ping is dropped at the next (default StrfryAutoPing, so 55-110 s).
	PingInterval time.Duration
	// SendBuffer, when positive, is the kernel's send buffer for each
	// client connection (SO_SNDBUF, which Linux doubles); 0 leaves it to
	// the kernel. Over loopback the kernel grows the buffer of a peer that
	// stopped reading to hundreds of kilobytes, since its ACKs keep coming;
	// over a network, a peer that vanished sends no ACK and the buffer stays
	// at tens of kilobytes (72 KB in a partition trial
	// between real hosts). Tests of vanished
	// peers set it so that the relay meets the stall after as little
	// traffic as in the field.
	SendBuffer int

	// Strfry makes the relay behave as strfry does with its default
	// configuration: a front end on the relay's address enforces strfry's
	// limits (the Strfry* constants) with strfry's exact messages, wraps
	// every CLOSED and NOTICE in "ERROR: ", accepts ephemeral events with OK
	// true (no "mute:"), answers duplicates "duplicate: have this event" and
	// older addressable events "replaced: have newer event", serves
	// strfry's NIP-11 document, and with RequireAuth does NIP-42 as strfry
	// does (challenge sent with the first refused REQ or EVENT, relay tag
	// checked against ServiceURL). The fault options still apply behind it.
	Strfry bool
	// ServiceURL is the relay's public URL that AUTH's relay tag must name:
	// strfry's relay.auth.serviceUrl (default with Strfry: the relay's own
	// ws://host:port) or khatru's ServiceURL (default: khatru's rule, the
	// request's Host header).
	ServiceURL string
	// Admin enables the InjectPath and StatsPath HTTP endpoints.
	Admin bool

	// RateLimit bounds the events taken per key and per connection (off
	// by default; see RateLimit).
	RateLimit RateLimit

	// Logger receives the relay's logs (default: discard).
	Logger *slog.Logger
}

// Validate reports the first invalid field.
func (o Options) Validate() error {
	for _, f := range []struct {
		name string
		v    int64 // negative is invalid
		show any
	}{
		{"WriteDelay", int64(o.WriteDelay), o.WriteDelay},
		{"QueryDelay", int64(o.QueryDelay), o.QueryDelay},
		{"ClosedAfter", int64(o.ClosedAfter), o.ClosedAfter},
		{"ClosedTimes", int64(o.ClosedTimes), o.ClosedTimes},
		{"WriteTimeout", int64(o.WriteTimeout), o.WriteTimeout},
		{"MaxPendingOutbound", int64(o.MaxPendingOutbound), o.MaxPendingOutbound},
		{"PingInterval", int64(o.PingInterval), o.PingInterval},
		{"SendBuffer", int64(o.SendBuffer), o.SendBuffer},
		{"ReplayEvery", int64(o.ReplayEvery), o.ReplayEvery},
		{"FutureShift", int64(o.FutureShift), o.FutureShift},
		{"PastShift", int64(o.PastShift), o.PastShift},
	} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s = %v, want >= 0", ErrInvalidOptions, f.name, f.show)
		}
	}
	if l := o.Limits; l.MaxMessageLength < 0 || l.MaxSubscriptions < 0 || l.MaxLimit < 0 || l.MaxContentLength < 0 || l.MaxEventTags < 0 {
		return fmt.Errorf("%w: Limits = %+v, want no negative value", ErrInvalidOptions, o.Limits)
	}
	if err := o.RateLimit.validate(); err != nil {
		return err
	}
	if o.ServiceURL != "" && !strings.HasPrefix(o.ServiceURL, "ws://") && !strings.HasPrefix(o.ServiceURL, "wss://") {
		return fmt.Errorf("%w: ServiceURL = %q, want ws://host or wss://host", ErrInvalidOptions, o.ServiceURL)
	}
	if len(o.QueryDelayKinds) > 0 && o.QueryDelay == 0 {
		return fmt.Errorf("%w: QueryDelayKinds = %v needs QueryDelay", ErrInvalidOptions, o.QueryDelayKinds)
	}
	if len(o.AuthAllow) > 0 && !o.RequireAuth {
		return fmt.Errorf("%w: AuthAllow = %v needs RequireAuth", ErrInvalidOptions, o.AuthAllow)
	}
	if o.InjectKey != "" {
		if _, err := nostr.GetPublicKey(o.InjectKey); err != nil || len(o.InjectKey) != 64 {
			return fmt.Errorf("%w: InjectKey is not a 64-char hex secret key", ErrInvalidOptions)
		}
	}
	for _, pk := range o.AuthAllow {
		if !nostr.IsValidPublicKey(pk) {
			return fmt.Errorf("%w: AuthAllow entry %q is not a hex pubkey", ErrInvalidOptions, pk)
		}
	}
	return nil
}
