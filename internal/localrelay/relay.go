package localrelay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/fiatjaf/khatru"
	"github.com/nbd-wtf/go-nostr"
	"github.com/nbd-wtf/go-nostr/nip11"
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
	switch {
	case o.WriteDelay < 0:
		return fmt.Errorf("%w: WriteDelay = %v, want >= 0", ErrInvalidOptions, o.WriteDelay)
	case o.ClosedAfter < 0:
		return fmt.Errorf("%w: ClosedAfter = %v, want >= 0", ErrInvalidOptions, o.ClosedAfter)
	case o.ClosedTimes < 0:
		return fmt.Errorf("%w: ClosedTimes = %d, want >= 0", ErrInvalidOptions, o.ClosedTimes)
	case o.WriteTimeout < 0:
		return fmt.Errorf("%w: WriteTimeout = %v, want >= 0", ErrInvalidOptions, o.WriteTimeout)
	case o.MaxPendingOutbound < 0:
		return fmt.Errorf("%w: MaxPendingOutbound = %d, want >= 0", ErrInvalidOptions, o.MaxPendingOutbound)
	case o.PingInterval < 0:
		return fmt.Errorf("%w: PingInterval = %v, want >= 0", ErrInvalidOptions, o.PingInterval)
	case o.SendBuffer < 0:
		return fmt.Errorf("%w: SendBuffer = %d, want >= 0", ErrInvalidOptions, o.SendBuffer)
	case o.ReplayEvery < 0:
		return fmt.Errorf("%w: ReplayEvery = %v, want >= 0", ErrInvalidOptions, o.ReplayEvery)
	case o.FutureShift < 0:
		return fmt.Errorf("%w: FutureShift = %v, want >= 0", ErrInvalidOptions, o.FutureShift)
	case o.PastShift < 0:
		return fmt.Errorf("%w: PastShift = %v, want >= 0", ErrInvalidOptions, o.PastShift)
	case o.Limits.MaxMessageLength < 0 || o.Limits.MaxSubscriptions < 0 || o.Limits.MaxLimit < 0 ||
		o.Limits.MaxContentLength < 0 || o.Limits.MaxEventTags < 0:
		return fmt.Errorf("%w: Limits = %+v, want no negative value", ErrInvalidOptions, o.Limits)
	}
	if err := o.RateLimit.validate(); err != nil {
		return err
	}
	if o.ServiceURL != "" && !strings.HasPrefix(o.ServiceURL, "ws://") && !strings.HasPrefix(o.ServiceURL, "wss://") {
		return fmt.Errorf("%w: ServiceURL = %q, want ws://host or wss://host", ErrInvalidOptions, o.ServiceURL)
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

// Stats is a snapshot of what the relay holds.
type Stats struct {
	// Events is the number of stored events.
	Events int `json:"events"`
	// Closed is the number of subscriptions that got a fault CLOSED.
	Closed int `json:"closed"`
	// Held is the number of EVENTs waiting for their OK (HoldOK, WriteDelay).
	Held int `json:"held"`
	// Refusals counts what the strfry emulation refused, by its words with
	// every number replaced by N ("OK invalid: event too large: N",
	// "NOTICE ERROR: too many concurrent REQs", "CLOSED ERROR: bad req:
	// error parsing #d: filter item too large"); "duplicate:" and other
	// acceptances are not refusals. At most maxRefusalKinds kinds.
	Refusals map[string]int `json:"refusals,omitempty"`
	// Dropped counts the client connections the relay closed because the
	// client stopped reading: no byte accepted for WriteTimeout, a backlog
	// over MaxPendingOutbound or, with Strfry, nothing received between
	// two keep-alive pings.
	Dropped int `json:"dropped"`
	// PendingOutbound is the number of bytes queued toward clients that the
	// kernel has not taken yet.
	PendingOutbound int `json:"pending_outbound"`
	// EventsIn counts the EVENT messages clients sent (accepted or not),
	// and KindsIn the same by event kind (as a decimal string).
	EventsIn int64            `json:"events_in"`
	KindsIn  map[string]int64 `json:"kinds_in,omitempty"`
	// BytesIn and BytesOut count the bytes of the client connections, both
	// ways (websocket frames, as on the wire).
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// Connections is the number of client connections open now.
	Connections int `json:"connections"`
	// Subscriptions is the number of subscriptions open now (a REQ until
	// its CLOSE, a CLOSED from the relay, or its connection's end).
	Subscriptions int `json:"subscriptions"`
}

type subKey struct {
	ws *khatru.WebSocket
	id string
}

// Relay is a local khatru relay. It is safe for concurrent use.
type Relay struct {
	opts   Options
	logger *slog.Logger
	kr     *khatru.Relay
	store  *memStore

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	started  bool
	addr     string
	srv      *http.Server // serves kr
	out      *outbound    // kr's client connections
	wss      map[*khatru.WebSocket]struct{}
	front    *strfryFront // Options.Strfry
	serveErr chan error
	dropped  int             // Stats.Dropped
	subs     map[subKey]bool // subscriptions seen by the CLOSED fault
	closed   int
	held     int
	refusals map[string]int            // Stats.Refusals
	replayTo map[subKey][]nostr.Filter // subscriptions the replay fault serves
	limiter  *rateLimiter              // Options.RateLimit
	eventsIn atomic.Int64              // Stats.EventsIn
	kindsIn  map[int]int64             // Stats.KindsIn
	// open counts the open subscriptions of khatru's clients (Stats.
	// Subscriptions; the strfry front end counts its own): each REQ's
	// context, which khatru ends at its CLOSE or its connection's end.
	open map[context.Context]struct{}

	shutdownOnce sync.Once
}

// New builds a relay from opts, which must be valid (see Options.Validate);
// invalid options make Start fail.
func New(opts Options) *Relay {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.RejectReason == "" {
		opts.RejectReason = DefaultRejectReason
	}
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.MaxPendingOutbound == 0 {
		opts.MaxPendingOutbound = DefaultMaxPendingOutbound
	}
	if opts.PingInterval == 0 {
		opts.PingInterval = 30 * time.Second // khatru's PingPeriod
		if opts.Strfry {
			opts.PingInterval = StrfryAutoPing
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Relay{
		opts:     opts,
		logger:   logger,
		ctx:      ctx,
		cancel:   cancel,
		subs:     make(map[subKey]bool),
		wss:      make(map[*khatru.WebSocket]struct{}),
		replayTo: make(map[subKey][]nostr.Filter),
		limiter:  newRateLimiter(opts.RateLimit),
		kindsIn:  make(map[int]int64),
		open:     make(map[context.Context]struct{}),
	}
	return r
}

// Start validates the options, listens on addr (host:port, port 0 picks a
// free one) and serves in the background until Shutdown. It returns once the
// relay accepts connections.
func (r *Relay) Start(ctx context.Context, addr string) error {
	if err := r.opts.Validate(); err != nil {
		return fmt.Errorf("start local relay: %w", err)
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("start local relay: listen address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return fmt.Errorf("start local relay: listen port %q is not a port number", portStr)
	}
	maxLimit := 5000
	if r.opts.Limits.MaxLimit > 0 {
		maxLimit = r.opts.Limits.MaxLimit
	}
	st, err := newMemStore(maxLimit)
	if err != nil {
		return fmt.Errorf("start local relay: %w", err)
	}
	st.refuseOlder = r.opts.Strfry
	khatruHost, khatruPort := host, port
	if r.opts.Strfry {
		// khatru serves behind the front end, on an internal port.
		khatruHost, khatruPort = "127.0.0.1", 0
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(khatruHost, strconv.Itoa(khatruPort)))
	if err != nil {
		return fmt.Errorf("start local relay on %s: %w", addr, err)
	}
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		_ = ln.Close()
		return fmt.Errorf("start local relay: already started")
	}
	r.started = true
	r.store = st
	r.kr = r.buildKhatru()
	r.out = newOutbound(r.opts.WriteTimeout, r.opts.MaxPendingOutbound, r.opts.SendBuffer, r.logger, r.noteDrop)
	// khatru.Relay.Start's server settings, with the client connections
	// queued (outbound.go).
	r.srv = &http.Server{
		Handler:      r.out.handler(r.kr),
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
		IdleTimeout:  30 * time.Second,
	}
	r.serveErr = make(chan error, 1)
	srv, serveErr := r.srv, r.serveErr
	r.mu.Unlock()

	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		serveErr <- err
	}()
	if err := ctx.Err(); err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.Shutdown(sctx)
		return fmt.Errorf("start local relay: %w", err)
	}
	addrNow := ln.Addr().String()
	if r.opts.Strfry {
		front, err := r.startStrfry(addr, "ws://"+addrNow)
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = r.Shutdown(sctx)
			return fmt.Errorf("start local relay: strfry front end: %w", err)
		}
		r.mu.Lock()
		r.front = front
		r.mu.Unlock()
		addrNow = front.addr()
	}
	r.mu.Lock()
	r.addr = addrNow
	r.mu.Unlock()

	if r.opts.ReplayEvery > 0 {
		r.wg.Add(1)
		go r.replayLoop()
	}
	r.logger.Info("local relay started", "url", r.URL())
	return nil
}

// Addr is the host:port the relay listens on ("" before Start).
func (r *Relay) Addr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addr
}

// URL is the relay's websocket URL, ws://host:port ("" before Start).
func (r *Relay) URL() string {
	a := r.Addr()
	if a == "" {
		return ""
	}
	return "ws://" + a
}

// Shutdown closes every client connection and the listener and waits for the
// relay's goroutines. It is safe to call more than once. (khatru's NIP-40
// expiration goroutine, started by khatru.NewRelay, cannot be stopped.)
func (r *Relay) Shutdown(ctx context.Context) error {
	var err error
	r.shutdownOnce.Do(func() {
		r.cancel()
		r.mu.Lock()
		srv, out, serveErr, front := r.srv, r.out, r.serveErr, r.front
		wss := make([]*khatru.WebSocket, 0, len(r.wss))
		for ws := range r.wss {
			wss = append(wss, ws)
		}
		r.mu.Unlock()
		if front != nil {
			if ferr := front.shutdown(ctx); ferr != nil {
				err = ferr
			}
		}
		if srv != nil {
			// What khatru.Relay.Shutdown does (it cannot be used: its server
			// is not the one serving): stop the listener, send every client
			// a close frame and close it.
			if serr := srv.Shutdown(ctx); serr != nil && err == nil {
				err = fmt.Errorf("shutdown local relay: %w", serr)
			}
			for _, ws := range wss {
				_ = ws.WriteMessage(wsCloseMessage, nil)
			}
			if cerr := out.closeAll(ctx); cerr != nil && err == nil {
				err = fmt.Errorf("shutdown local relay: %w", cerr)
			}
			select {
			case e := <-serveErr:
				if e != nil && err == nil {
					err = fmt.Errorf("serve local relay: %w", e)
				}
			case <-ctx.Done():
				err = fmt.Errorf("shutdown local relay: %w", ctx.Err())
				return
			}
		}
		done := make(chan struct{})
		go func() { r.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			err = fmt.Errorf("shutdown local relay: %w", ctx.Err())
		}
	})
	return err
}

// Stats reports what the relay holds.
func (r *Relay) Stats() Stats {
	r.mu.Lock()
	st, closed, held, dropped, out, front := r.store, r.closed, r.held, r.dropped, r.out, r.front
	var refusals map[string]int
	if len(r.refusals) > 0 {
		refusals = make(map[string]int, len(r.refusals))
		for k, v := range r.refusals {
			refusals[k] = v
		}
	}
	conns, subs := len(r.wss), len(r.open)
	var kinds map[string]int64
	if len(r.kindsIn) > 0 {
		kinds = make(map[string]int64, len(r.kindsIn))
		for k, n := range r.kindsIn {
			kinds[strconv.Itoa(k)] = n
		}
	}
	r.mu.Unlock()
	s := Stats{Closed: closed, Held: held, Refusals: refusals, Dropped: dropped, EventsIn: r.eventsIn.Load(),
		KindsIn: kinds, Connections: conns, Subscriptions: subs}
	if st != nil {
		s.Events = st.count()
	}
	switch {
	case front != nil: // the clients are the front end's
		s.PendingOutbound = front.out.pending()
		s.BytesIn, s.BytesOut = front.out.bytesIn.Load(), front.out.bytesOut.Load()
		s.Connections, s.Subscriptions = front.counts()
	case out != nil:
		s.PendingOutbound = out.pending()
		s.BytesIn, s.BytesOut = out.bytesIn.Load(), out.bytesOut.Load()
	}
	return s
}

// Inject delivers ev verbatim (no checks at all) to every live subscription
// whose filter matches, and stores it when store is true. It returns how many
// subscriptions got it.
func (r *Relay) Inject(ev nostr.Event, store bool) (int, error) {
	r.mu.Lock()
	kr, st := r.kr, r.store
	r.mu.Unlock()
	if kr == nil {
		return 0, ErrNotStarted
	}
	if store {
		if err := st.save(&ev); err != nil {
			r.logger.Debug("inject: store", "id", ev.ID, "err", err)
		}
	}
	return kr.BroadcastEvent(&ev), nil
}

func (r *Relay) buildKhatru() *khatru.Relay {
	kr := khatru.NewRelay()
	kr.Log = slog.NewLogLogger(r.logger.Handler(), slog.LevelDebug)
	kr.Info.Name = "provider-agent local relay"
	kr.Info.Software = "provider-agent/internal/localrelay (khatru)"
	if r.opts.ServiceURL != "" && !r.opts.Strfry {
		kr.ServiceURL = r.opts.ServiceURL
	}
	if l := r.opts.Limits; l != (Limits{}) || r.opts.RequireAuth || r.opts.RejectWrites {
		kr.Info.Limitation = &nip11Limitation{
			MaxMessageLength: l.MaxMessageLength,
			MaxSubscriptions: l.MaxSubscriptions,
			MaxLimit:         l.MaxLimit,
			MaxContentLength: l.MaxContentLength,
			MaxEventTags:     l.MaxEventTags,
			AuthRequired:     r.opts.RequireAuth,
			RestrictedWrites: r.opts.RejectWrites,
		}
	}
	if r.opts.Limits.MaxMessageLength > 0 {
		kr.MaxMessageSize = int64(r.opts.Limits.MaxMessageLength)
	}
	kr.PingPeriod, kr.PongWait = r.opts.PingInterval, 2*r.opts.PingInterval
	// khatru v0.19.1 reads its listener slice without a lock while
	// subscriptions are added (append) and removed: a broadcast can see a
	// listener slot before its fields are written, and WriteJSON on its nil
	// connection killed the relay (a child relay's panic failed
	// TestSingleRelayFaultsKeepQuorum in CI). PreventBroadcast runs before
	// WriteJSON: skip such a slot (the subscription being added reads the
	// event from the store, or the next one live).
	kr.PreventBroadcast = append(kr.PreventBroadcast, func(ws *khatru.WebSocket, _ *nostr.Event) bool { return ws == nil })
	kr.OnConnect = append(kr.OnConnect, func(ctx context.Context) {
		r.mu.Lock()
		r.wss[khatru.GetConnection(ctx)] = struct{}{}
		r.mu.Unlock()
	})

	if !r.opts.Strfry { // the front end counts what its clients send
		kr.RejectEvent = append(kr.RejectEvent, func(_ context.Context, ev *nostr.Event) (bool, string) {
			r.countEventIn(ev.Kind)
			return false, ""
		})
		kr.OverwriteFilter = append(kr.OverwriteFilter, r.countSubscription)
	}
	if r.limiter != nil {
		// Behind the strfry front end each client has a backend connection
		// of its own: the bound is per client there too.
		kr.RejectEvent = append(kr.RejectEvent, func(ctx context.Context, ev *nostr.Event) (bool, string) {
			if r.limiter.allow(khatru.GetConnection(ctx), ev.PubKey, time.Now()) {
				return false, ""
			}
			if !r.opts.Strfry { // the front end counts its OK false itself
				r.noteRefusal("OK " + RateLimitReason)
			}
			return true, RateLimitReason
		})
	}

	kr.StoreEvent = append(kr.StoreEvent, func(_ context.Context, ev *nostr.Event) error { return r.store.save(ev) })
	kr.ReplaceEvent = append(kr.ReplaceEvent, func(_ context.Context, ev *nostr.Event) error { return r.store.replace(ev) })
	kr.DeleteEvent = append(kr.DeleteEvent, func(_ context.Context, ev *nostr.Event) error { return r.store.delete(ev) })
	kr.QueryEvents = append(kr.QueryEvents, r.queryEvents)

	if r.opts.RequireAuth && !r.opts.Strfry { // the strfry front end does NIP-42 itself
		kr.OnConnect = append(kr.OnConnect, func(ctx context.Context) { khatru.RequestAuth(ctx) })
		kr.RejectFilter = append(kr.RejectFilter, func(ctx context.Context, _ nostr.Filter) (bool, string) {
			return r.rejectUnauthed(ctx)
		})
		kr.RejectEvent = append(kr.RejectEvent, func(ctx context.Context, _ *nostr.Event) (bool, string) {
			return r.rejectUnauthed(ctx)
		})
	}
	if l := r.opts.Limits; l.MaxContentLength > 0 || l.MaxEventTags > 0 {
		kr.RejectEvent = append(kr.RejectEvent, func(_ context.Context, ev *nostr.Event) (bool, string) {
			if n := utf8.RuneCountInString(ev.Content); l.MaxContentLength > 0 && n > l.MaxContentLength {
				return true, fmt.Sprintf("invalid: content of %d characters, max_content_length is %d", n, l.MaxContentLength)
			}
			if l.MaxEventTags > 0 && len(ev.Tags) > l.MaxEventTags {
				return true, fmt.Sprintf("invalid: %d tags, max_event_tags is %d", len(ev.Tags), l.MaxEventTags)
			}
			return false, ""
		})
	}
	if r.opts.HoldOK || r.opts.WriteDelay > 0 {
		kr.RejectEvent = append(kr.RejectEvent, r.holdWrite)
	}
	if r.opts.RejectWrites {
		kr.RejectEvent = append(kr.RejectEvent, func(context.Context, *nostr.Event) (bool, string) {
			return true, r.opts.RejectReason
		})
	}
	if r.injecting() {
		// Runs last: only events about to be accepted spawn fault copies, and
		// the copies reach subscribers before the real event.
		kr.RejectEvent = append(kr.RejectEvent, func(_ context.Context, ev *nostr.Event) (bool, string) {
			for _, v := range r.variants(ev) {
				kr.BroadcastEvent(v)
			}
			return false, ""
		})
	}
	if r.opts.ServeStale || r.opts.Limits.MaxLimit > 0 {
		kr.OverwriteFilter = append(kr.OverwriteFilter, func(_ context.Context, f *nostr.Filter) {
			if r.opts.ServeStale {
				f.Since, f.Until = nil, nil
			}
			if m := r.opts.Limits.MaxLimit; m > 0 && f.Limit > m {
				f.Limit = m
			}
		})
	}
	if r.opts.ReplayEvery > 0 {
		kr.RejectFilter = append(kr.RejectFilter, func(ctx context.Context, f nostr.Filter) (bool, string) {
			k := subKey{ws: khatru.GetConnection(ctx), id: khatru.GetSubscriptionID(ctx)}
			r.mu.Lock()
			r.replayTo[k] = append(r.replayTo[k], f)
			r.mu.Unlock()
			return false, ""
		})
	}
	if r.opts.ClosedReason != "" {
		kr.RejectFilter = append(kr.RejectFilter, r.closedFault)
	}
	kr.OnDisconnect = append(kr.OnDisconnect, func(ctx context.Context) {
		ws := khatru.GetConnection(ctx)
		if r.limiter != nil {
			r.limiter.conns.forget(ws)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.wss, ws)
		for k := range r.subs {
			if k.ws == ws {
				delete(r.subs, k)
			}
		}
		for k := range r.replayTo {
			if k.ws == ws {
				delete(r.replayTo, k)
			}
		}
	})
	if r.opts.Admin {
		mux := kr.Router()
		mux.HandleFunc("POST "+InjectPath, r.handleInject)
		mux.HandleFunc("GET "+StatsPath, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(r.Stats())
		})
	}
	return kr
}

// countEventIn counts an EVENT a client sent (Stats.EventsIn, KindsIn).
func (r *Relay) countEventIn(kind int) {
	r.eventsIn.Add(1)
	r.mu.Lock()
	if len(r.kindsIn) < maxKindsIn || r.kindsIn[kind] > 0 {
		r.kindsIn[kind]++
	}
	r.mu.Unlock()
}

// maxKindsIn bounds Stats.KindsIn.
const maxKindsIn = 64

// countSubscription counts a REQ's subscription open (khatru calls it for
// each of its filters, with the REQ's context) until khatru ends that
// context: at the CLOSE, or the connection's end.
func (r *Relay) countSubscription(ctx context.Context, _ *nostr.Filter) {
	r.mu.Lock()
	_, known := r.open[ctx]
	r.open[ctx] = struct{}{}
	r.mu.Unlock()
	if known {
		return
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-r.ctx.Done():
		}
		r.mu.Lock()
		delete(r.open, ctx)
		r.mu.Unlock()
	}()
}

func (r *Relay) rejectUnauthed(ctx context.Context) (bool, string) {
	authed := khatru.GetAuthed(ctx)
	if authed == "" {
		return true, "auth-required: authenticate with NIP-42 first"
	}
	if len(r.opts.AuthAllow) > 0 && !slices.Contains(r.opts.AuthAllow, authed) {
		return true, "restricted: this pubkey is not allowed here"
	}
	return false, ""
}

func (r *Relay) holdWrite(ctx context.Context, _ *nostr.Event) (bool, string) {
	r.mu.Lock()
	r.held++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.held--
		r.mu.Unlock()
	}()
	ws := khatru.GetConnection(ctx)
	var wsDone <-chan struct{}
	if ws != nil {
		wsDone = ws.Context.Done()
	}
	if r.opts.HoldOK {
		select {
		case <-wsDone:
		case <-r.ctx.Done():
		}
		return true, "error: connection closed before the write was answered"
	}
	t := time.NewTimer(r.opts.WriteDelay)
	defer t.Stop()
	select {
	case <-t.C:
		return false, ""
	case <-wsDone:
	case <-r.ctx.Done():
	}
	return true, "error: connection closed before the write was answered"
}

// closedFault ends subscriptions with the configured CLOSED reason. khatru
// calls it once per filter; a subscription is counted once.
func (r *Relay) closedFault(ctx context.Context, _ nostr.Filter) (bool, string) {
	ws := khatru.GetConnection(ctx)
	id := khatru.GetSubscriptionID(ctx)
	k := subKey{ws: ws, id: id}
	r.mu.Lock()
	if _, seen := r.subs[k]; seen {
		hit := r.subs[k]
		r.mu.Unlock()
		if hit && r.opts.ClosedAfter == 0 {
			return true, r.opts.ClosedReason
		}
		return false, ""
	}
	hit := r.opts.ClosedTimes == 0 || r.closed < r.opts.ClosedTimes
	r.subs[k] = hit
	if hit {
		r.closed++
	}
	r.mu.Unlock()
	if !hit {
		return false, ""
	}
	if r.opts.ClosedAfter == 0 {
		return true, r.opts.ClosedReason
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTimer(r.opts.ClosedAfter)
		defer t.Stop()
		select {
		case <-t.C:
			_ = ws.WriteJSON(nostr.ClosedEnvelope{SubscriptionID: id, Reason: r.opts.ClosedReason})
		case <-ws.Context.Done():
		case <-r.ctx.Done():
		}
	}()
	return false, ""
}

func (r *Relay) queryEvents(_ context.Context, f nostr.Filter) (chan *nostr.Event, error) {
	evs := r.store.query(f)
	out := make([]*nostr.Event, 0, len(evs))
	for _, ev := range evs {
		if r.injecting() {
			out = append(out, r.variants(ev)...)
		}
		out = append(out, ev)
	}
	ch := make(chan *nostr.Event, len(out))
	for _, ev := range out {
		ch <- ev
	}
	close(ch)
	return ch, nil
}

func (r *Relay) injecting() bool {
	return r.opts.Forge || r.opts.FutureShift > 0 || r.opts.PastShift > 0
}

// variants returns the fault copies of ev, in the order they are sent.
func (r *Relay) variants(ev *nostr.Event) []*nostr.Event {
	var out []*nostr.Event
	if r.opts.Forge {
		// The forgery is an extra tag, so the copy still decodes and only
		// the id or signature check can refuse it.
		idMismatch := cloneEvent(ev)
		idMismatch.Tags = append(idMismatch.Tags, nostr.Tag{"forged", "1"})
		out = append(out, idMismatch)

		badSig := cloneEvent(ev)
		badSig.Tags = append(badSig.Tags, nostr.Tag{"forged", "1"})
		badSig.ID = badSig.GetID()
		out = append(out, badSig)
	}
	for _, shift := range []time.Duration{r.opts.FutureShift, -r.opts.PastShift} {
		if shift == 0 {
			continue
		}
		c := cloneEvent(ev)
		c.CreatedAt = nostr.Timestamp(int64(c.CreatedAt) + int64(shift/time.Second))
		if r.opts.InjectKey != "" {
			if err := c.Sign(r.opts.InjectKey); err != nil {
				r.logger.Warn("sign shifted copy", "err", err)
				continue
			}
		} else {
			c.ID = c.GetID()
		}
		out = append(out, c)
	}
	return out
}

func cloneEvent(ev *nostr.Event) *nostr.Event {
	c := *ev
	c.Tags = make(nostr.Tags, len(ev.Tags))
	for i, t := range ev.Tags {
		c.Tags[i] = slices.Clone(t)
	}
	return &c
}

func (r *Relay) replayLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.opts.ReplayEvery)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
			r.replay()
		}
	}
}

// replay sends every stored event to every subscription whose filter
// matches it ignoring since and until (as a relay replaying old events would).
func (r *Relay) replay() {
	evs := r.store.query(nostr.Filter{})
	r.mu.Lock()
	type target struct {
		k  subKey
		fs []nostr.Filter
	}
	targets := make([]target, 0, len(r.replayTo))
	for k, fs := range r.replayTo {
		targets = append(targets, target{k, fs})
	}
	r.mu.Unlock()
	for _, tg := range targets {
		for _, ev := range evs {
			for _, f := range tg.fs {
				if f.MatchesIgnoringTimestampConstraints(ev) {
					id := tg.k.id
					_ = tg.k.ws.WriteJSON(nostr.EventEnvelope{SubscriptionID: &id, Event: *ev})
					break
				}
			}
		}
	}
}

func (r *Relay) handleInject(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var ev nostr.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, "decode event: "+err.Error(), http.StatusBadRequest)
		return
	}
	n, err := r.Inject(ev, req.URL.Query().Get("store") == "1")
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]int{"delivered": n})
}

type nip11Limitation = nip11.RelayLimitationDocument

// wsCloseMessage is the websocket close opcode (RFC 6455, 0x8), which
// fasthttp/websocket, under khatru, calls CloseMessage.
const wsCloseMessage = 8

// noteDrop counts a client dropped for not reading (Stats.Dropped).
func (r *Relay) noteDrop() {
	r.mu.Lock()
	r.dropped++
	r.mu.Unlock()
}
