package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus"
)

// Errors reported per relay.
var (
	// ErrNotConnected: the relay had no open connection before the deadline.
	ErrNotConnected = errors.New("relay not connected")
	// ErrConnectionLost: the connection dropped before the relay answered.
	ErrConnectionLost = errors.New("relay connection lost")
	// ErrSubscriptionLimit: no query slot (Config.QuerySlots, kept within
	// the relay's max_subscriptions) became free before the context ended.
	ErrSubscriptionLimit = errors.New("relay subscription limit reached")
)

// Options are the Pool's collaborators and subscription; all are optional.
type Options struct {
	// Filters are subscribed on every relay (none: publish/query only), as
	// one Interest. SetFilters replaces them later.
	Filters []nostr.Filter
	// Interests, when set, replace Filters: each relay subscribes, per
	// interest, the narrowest alternative that fits its limits (see
	// Interest). SetInterests replaces them later.
	Interests []Interest
	// Known, when set, is asked for the id of every event frame of the
	// subscription after its catch-up (EOSE): when it returns true the
	// event is not parsed and arrives as a Received with only ID set (the
	// consumer knows the event: one it published itself). Called from the
	// relays' read goroutines; it must be cheap and safe for concurrent use.
	Known func(id string) bool
	// Since returns the persisted cursor; it is called on every
	// (re)subscription and set as since on every filter that has none
	// (0: no since). Reconnects therefore resume from the cursor.
	Since func() nostr.Timestamp
	// SinceFor, when set, replaces Since: it is called on every
	// (re)subscription for each filter that has no since of its own, so
	// different filters can resume from different points (the agent reads
	// stored heartbeats back one stale window and everything else from the
	// cursor). 0: no since.
	SinceFor func(f nostr.Filter) nostr.Timestamp
	// SecretKey (hex) answers NIP-42 AUTH challenges; empty: never
	// authenticate (a relay that requires auth then closes us permanently).
	SecretKey string
	// Logger (default: discard).
	Logger *slog.Logger
	// Registerer for the relay_* metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Now stamps received events (default time.Now).
	Now func() time.Time
	// Rand returns a uniform float in [0,1) for backoff jitter (default math/rand/v2).
	Rand func() float64
}

// Received is one event or end-of-stored-events marker from one relay.
type Received struct {
	// Relay is the normalised relay URL.
	Relay string
	// At is the local receive time (Options.Now).
	At time.Time
	// Event is the event as received: NOT verified (heartbeat/ does that).
	// Nil when EOSE is set, or when ID is.
	Event *nostr.Event
	// ID is set instead of Event for an event Options.Known knew: the
	// frame's event id, unparsed and unverified (a relay that lies about it
	// could as well have served the real event).
	ID string
	// EOSE reports that the relay has sent all its stored events for the
	// current subscription (after each (re)subscription).
	EOSE bool
	// Gap reports that the relay's live stream to this pool may have
	// missed, or may miss, events from here on: a connection began (its
	// stored events, and later its EOSE, follow) or ended, a REQ was
	// closed by the relay or had to be sent again, or the subscription's
	// REQs were replaced without overlap. Until the next EOSE marker the
	// stream is not complete. A change of REQs that could overlap (the
	// new ones caught up before the old ones closed) is no gap.
	Gap bool
}

// Pool supervises one connection per relay. Its methods are safe for
// concurrent use.
type Pool struct {
	cfg    Config
	opts   Options
	logger *slog.Logger
	m      *metrics
	pubkey string

	out      chan Received
	sups     []*supervisor
	byURL    map[string]*supervisor
	dialHTTP *http.Client
	infoHTTP *http.Client

	interestsMu sync.Mutex
	interests   []Interest

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// New validates cfg, registers metrics and starts one supervisor per relay.
// Close stops them.
func New(cfg Config, opts Options) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new relay pool: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	var pubkey string
	if opts.SecretKey != "" {
		pk, err := nostr.GetPublicKey(opts.SecretKey)
		if err != nil || len(opts.SecretKey) != 64 {
			return nil, fmt.Errorf("new relay pool: %w: SecretKey is not a 64-char hex key", ErrInvalidConfig)
		}
		pubkey = pk
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("new relay pool: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{
		cfg:      cfg,
		opts:     opts,
		logger:   opts.Logger,
		m:        m,
		pubkey:   pubkey,
		out:      make(chan Received, cfg.ReceiveBuffer),
		byURL:    make(map[string]*supervisor),
		dialHTTP: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		infoHTTP: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		cancel:   cancel,
	}
	interests := opts.Interests
	if len(interests) == 0 {
		interests = interestsOf(opts.Filters)
	}
	p.interests = cloneInterests(interests)
	for _, u := range cfg.normalizedURLs() {
		s := newSupervisor(p, u)
		p.sups = append(p.sups, s)
		p.byURL[u] = s
		m.exportRelay(u)
	}
	for _, s := range p.sups {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			s.run(ctx)
		}()
	}
	return p, nil
}

// Received returns the channel of received events and EOSE markers, in
// arrival order per relay. It is closed when Close returns. A consumer that
// stops reading stalls the relays' reads (backpressure), never drops events;
// OKs queued behind a stalled read wait too, so do not call Publish from the
// goroutine that consumes Received without a deadline you can afford.
func (p *Pool) Received() <-chan Received { return p.out }

// Synced returns the relays whose current connection has delivered EOSE for
// the whole subscription (the "synced at least M relays" check).
func (p *Pool) Synced() []string {
	var out []string
	for _, s := range p.sups {
		if st := s.status(); st.Connected && st.EOSESeen {
			out = append(out, s.url)
		}
	}
	return out
}

// URLs returns the normalised relay URLs, in configuration order.
func (p *Pool) URLs() []string {
	out := make([]string, len(p.sups))
	for i, s := range p.sups {
		out[i] = s.url
	}
	return out
}

// SetFilters replaces the subscription's filters with one interest (see
// SetInterests).
func (p *Pool) SetFilters(filters []nostr.Filter) { p.SetInterests(interestsOf(filters)) }

// SetInterests replaces the subscription. Every connected relay keeps the
// REQs whose filters did not change, sends the new ones (since from
// Options.SinceFor or Since) and only then closes the old ones, so no
// stored event matching both is missed in between.
func (p *Pool) SetInterests(interests []Interest) {
	p.interestsMu.Lock()
	p.interests = cloneInterests(interests)
	p.interestsMu.Unlock()
	for _, s := range p.sups {
		select {
		case s.filtersChanged <- struct{}{}:
		default:
		}
	}
}

func (p *Pool) currentInterests() []Interest {
	p.interestsMu.Lock()
	defer p.interestsMu.Unlock()
	return p.interests // replaced, never modified in place
}

// Status returns a snapshot of every relay's state, in configuration order.
func (p *Pool) Status() []Status {
	out := make([]Status, len(p.sups))
	for i, s := range p.sups {
		out[i] = s.status()
	}
	return out
}

// Connected is how many relays have an open connection now.
func (p *Pool) Connected() int {
	n := 0
	for _, s := range p.sups {
		if s.status().Connected {
			n++
		}
	}
	return n
}

// Close stops every supervisor, closes every websocket, waits for all the
// pool's goroutines and then closes the Received channel. It is idempotent.
func (p *Pool) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		p.wg.Wait()
		close(p.out)
		p.dialHTTP.CloseIdleConnections()
		p.infoHTTP.CloseIdleConnections()
		for _, s := range p.sups {
			p.m.connected.WithLabelValues(s.url).Set(0)
		}
	})
	return nil
}

func (p *Pool) deliver(ctx context.Context, r Received) bool {
	select {
	case p.out <- r:
		return true
	case <-ctx.Done():
		return false
	}
}

func cloneFilters(fs []nostr.Filter) []nostr.Filter {
	out := make([]nostr.Filter, len(fs))
	for i, f := range fs {
		out[i] = f.Clone()
	}
	return out
}

// sinceOf returns the since hook for a (re)subscription: SinceFor, else
// Since for every filter, else nil (no since).
func (o Options) sinceOf() func(nostr.Filter) nostr.Timestamp {
	switch {
	case o.SinceFor != nil:
		return o.SinceFor
	case o.Since != nil:
		since := o.Since()
		return func(nostr.Filter) nostr.Timestamp { return since }
	}
	return nil
}

// withSince returns copies of base with since applied to the filters
// without one (sinceOf nil, or returning 0: none).
func withSince(base []nostr.Filter, sinceOf func(nostr.Filter) nostr.Timestamp) nostr.Filters {
	fs := make(nostr.Filters, 0, len(base))
	for _, f := range base {
		f = f.Clone()
		if sinceOf != nil && f.Since == nil {
			if s := sinceOf(f); s > 0 {
				f.Since = &s
			}
		}
		fs = append(fs, f)
	}
	return fs
}
