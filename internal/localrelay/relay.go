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
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/fiatjaf/khatru"
	"github.com/nbd-wtf/go-nostr"
	"github.com/nbd-wtf/go-nostr/nip11"
)

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
	if r.opts.QueryDelay > 0 {
		kr.RejectFilter = append(kr.RejectFilter, r.delayQuery)
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
