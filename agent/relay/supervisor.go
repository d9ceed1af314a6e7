package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/nbd-wtf/go-nostr"
	"github.com/nbd-wtf/go-nostr/nip42"
	"github.com/prometheus/client_golang/prometheus"
)

// Status is a snapshot of one relay's state.
type Status struct {
	// URL is the normalised relay URL.
	URL string
	// Connected is true while the websocket is open.
	Connected bool
	// ConnectedSince is when the current connection opened (zero if none).
	ConnectedSince time.Time
	// LastMessageAt is when the last frame arrived from the relay.
	LastMessageAt time.Time
	// Reconnects counts connection attempts after the first.
	Reconnects int
	// EOSESeen is true once the current connection's subscription reached
	// EOSE on every REQ.
	EOSESeen bool
	// Authenticated is true once NIP-42 AUTH succeeded on this connection.
	Authenticated bool
	// LastError is the last connection, subscription or AUTH error.
	LastError string
	// ClosedPermanently is true when the relay refused the subscription with
	// a permanent reason (blocked:, restricted:, auth-required: after AUTH
	// failed or without a key). It is retried only on the next connection
	// and cleared by the next EOSE.
	ClosedPermanently bool
	// ClosedReason is the permanent CLOSED reason.
	ClosedReason string
	// Limits are the relay's NIP-11 limits (zero when absent).
	Limits Limits
}

type supervisor struct {
	p              *Pool
	url            string
	dial           string // websocket URL dialled (Config.DialAddrs)
	log            *slog.Logger
	filtersChanged chan struct{}
	received       prometheus.Counter // cached: one increment per frame

	mu       sync.Mutex
	cur      *conn
	changed  chan struct{} // closed and replaced whenever cur changes
	st       Status
	limitsOK bool
	attempt  int // reconnect backoff attempt; reset by EOSE or a stable connection
}

func newSupervisor(p *Pool, url string) *supervisor {
	return &supervisor{
		p:              p,
		url:            url,
		dial:           p.cfg.dialAddr(url),
		log:            p.logger.With("relay", url),
		filtersChanged: make(chan struct{}, 1),
		changed:        make(chan struct{}),
		st:             Status{URL: url},
		received:       p.m.received.WithLabelValues(url),
	}
}

func (s *supervisor) status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Connected = s.cur != nil
	return st
}

func (s *supervisor) limits() Limits {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Limits
}

func (s *supervisor) setErr(err error) {
	s.mu.Lock()
	s.st.LastError = err.Error()
	s.mu.Unlock()
}

func (s *supervisor) setConn(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cur = c
	close(s.changed)
	s.changed = make(chan struct{})
	if c != nil {
		s.st.ConnectedSince = s.p.opts.Now()
		s.st.EOSESeen = false
		s.st.Authenticated = false
		s.p.m.connected.WithLabelValues(s.url).Set(1)
	} else {
		s.st.ConnectedSince = time.Time{}
		s.st.EOSESeen = false
		s.st.Authenticated = false
		s.p.m.connected.WithLabelValues(s.url).Set(0)
	}
}

// waitConn returns the open connection, waiting for one until ctx ends.
func (s *supervisor) waitConn(ctx context.Context) (*conn, error) {
	for {
		s.mu.Lock()
		c, ch := s.cur, s.changed
		s.mu.Unlock()
		if c != nil {
			select {
			case <-c.closed:
				// Being torn down; wait for the next one.
			default:
				return c, nil
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrNotConnected, ctx.Err())
		}
	}
}

func (s *supervisor) run(ctx context.Context) {
	backoff := Backoff{Initial: s.p.cfg.BackoffInitial, Max: s.p.cfg.BackoffMax}
	for first := true; ; first = false {
		if ctx.Err() != nil {
			return
		}
		if !first {
			s.p.m.reconnect.WithLabelValues(s.url).Inc()
			s.mu.Lock()
			s.st.Reconnects++
			s.mu.Unlock()
		}
		s.fetchLimits(ctx)
		start := time.Now()
		err := s.connectAndServe(ctx)
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		if time.Since(start) >= s.p.cfg.StableAfter {
			s.attempt = 0
		}
		attempt := s.attempt
		s.attempt++
		s.mu.Unlock()
		if err != nil {
			s.setErr(err)
		}
		delay := backoff.Delay(attempt, s.p.opts.Rand())
		s.log.Info("relay disconnected, reconnecting", "err", err, "in", delay, "attempt", attempt+1)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (s *supervisor) fetchLimits(ctx context.Context) {
	s.mu.Lock()
	known := s.limitsOK
	s.mu.Unlock()
	if known {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, s.p.cfg.NIP11Timeout)
	defer cancel()
	l, err := fetchLimits(fctx, s.p.infoHTTP, s.dial)
	if err != nil {
		// Absence is fine; try again on the next connection.
		s.log.Debug("no NIP-11 limits", "err", err)
		return
	}
	s.mu.Lock()
	s.st.Limits = l
	s.limitsOK = true
	s.mu.Unlock()
	if l != (Limits{}) {
		s.log.Debug("NIP-11 limits", "limits", l)
	}
}

func (s *supervisor) connectAndServe(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, s.p.cfg.DialTimeout)
	ws, resp, err := websocket.Dial(dctx, s.dial, &websocket.DialOptions{HTTPClient: s.p.dialHTTP})
	cancel()
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		return fmt.Errorf("dial %s: %w", s.dial, err)
	}
	ws.SetReadLimit(s.p.cfg.MaxMessageSize)
	sctx, scancel := context.WithCancel(ctx)
	c := newConn(sctx, ws, s.p.cfg.WriteTimeout)
	s.setConn(c)
	s.log.Info("relay connected")
	sess := &session{s: s, c: c, byID: make(map[string]*mainSub)}
	err = sess.serve(sctx)
	scancel()
	c.shutdown()
	s.setConn(nil)
	return err
}

// conn is one open websocket. Writes may come from any goroutine.
type conn struct {
	ctx          context.Context // the session's; writes end with it
	ws           *websocket.Conn
	writeTimeout time.Duration
	closed       chan struct{} // closed when the session ends
	closeOnce    sync.Once

	mu         sync.Mutex
	pending    map[string][]chan nostr.OKEnvelope
	queries    map[string]*querySink
	authed     chan struct{} // closed when AUTH succeeded
	authFailed bool
	seq        int
}

func newConn(ctx context.Context, ws *websocket.Conn, writeTimeout time.Duration) *conn {
	return &conn{
		ctx:          ctx,
		ws:           ws,
		writeTimeout: writeTimeout,
		closed:       make(chan struct{}),
		pending:      make(map[string][]chan nostr.OKEnvelope),
		queries:      make(map[string]*querySink),
		authed:       make(chan struct{}),
	}
}

func (c *conn) shutdown() {
	c.closeOnce.Do(func() {
		close(c.closed)
		_ = c.ws.CloseNow()
	})
}

func (c *conn) writeRaw(b []byte) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.writeTimeout)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}

func (c *conn) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode frame: %w", err)
	}
	return c.writeRaw(b)
}

func (c *conn) nextID(prefix string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return fmt.Sprintf("%s%d", prefix, c.seq)
}

func (c *conn) addPending(id string) chan nostr.OKEnvelope {
	ch := make(chan nostr.OKEnvelope, 1)
	c.mu.Lock()
	c.pending[id] = append(c.pending[id], ch)
	c.mu.Unlock()
	return ch
}

func (c *conn) removePending(id string, ch chan nostr.OKEnvelope) {
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.pending[id]
	for i, x := range list {
		if x == ch {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(c.pending, id)
	} else {
		c.pending[id] = list
	}
}

// resolve hands an OK to everyone waiting for that event id on this connection.
func (c *conn) resolve(ok nostr.OKEnvelope) bool {
	c.mu.Lock()
	list := c.pending[ok.EventID]
	delete(c.pending, ok.EventID)
	c.mu.Unlock()
	for _, ch := range list {
		ch <- ok // buffered 1, one OK per waiter
	}
	return len(list) > 0
}

func (c *conn) isAuthed() bool {
	select {
	case <-c.authed:
		return true
	default:
		return false
	}
}

func (c *conn) activeQueries() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queries)
}

// reasonPrefix returns the machine-readable prefix of an OK or CLOSED
// reason ("blocked" for "blocked: spam"), or "" when there is none.
func reasonPrefix(reason string) string {
	i := strings.IndexByte(reason, ':')
	if i <= 0 || strings.ContainsAny(reason[:i], " \t") {
		return ""
	}
	return reason[:i]
}

// permanentClosed reports whether a CLOSED reason means "do not retry".
func permanentClosed(prefix string) bool {
	switch prefix {
	case "blocked", "restricted", "unsupported", "invalid", "pow":
		return true
	}
	return false
}

type subState int

const (
	subActive subState = iota
	subWaitAuth
	subRetry
	subPermanent
)

// mainSub is one REQ of the pool's subscription on one connection.
type mainSub struct {
	id         string
	base       nostr.Filters // without since
	sentAuthed bool
	eose       bool
	state      subState
	attempt    int
	retryAt    time.Time
}

// session runs one connection: the subscription, AUTH, and routing of
// frames. Its fields are touched only by the serve goroutine.
type session struct {
	s            *supervisor
	c            *conn
	subs         []*mainSub
	byID         map[string]*mainSub
	eoseReported bool
	authOK       chan nostr.OKEnvelope
	authID       string
	retry        *time.Timer
}

func (ss *session) serve(ctx context.Context) error {
	frames := make(chan nostr.Envelope, 64)
	readErr := make(chan error, 1)
	// On return: close the socket and cancel (unblocking the reader even
	// when it waits to hand over a frame), then wait for both goroutines.
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	defer ss.c.shutdown()
	wg.Add(2)
	go func() {
		defer wg.Done()
		readErr <- ss.read(ctx, frames)
	}()
	go func() {
		defer wg.Done()
		ss.ping(ctx)
	}()
	defer func() {
		if ss.retry != nil {
			ss.retry.Stop()
		}
	}()

	if err := ss.subscribeAll(); err != nil {
		return err
	}
	for {
		var retryC <-chan time.Time
		if ss.retry != nil {
			retryC = ss.retry.C
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-readErr:
			return err
		case env := <-frames:
			if err := ss.handle(ctx, env); err != nil {
				return err
			}
		case ok := <-ss.authOK:
			if err := ss.handleAuthOK(ok); err != nil {
				return err
			}
		case <-retryC:
			ss.retry = nil
			if err := ss.retryDue(); err != nil {
				return err
			}
		case <-ss.s.filtersChanged:
			if err := ss.subscribeAll(); err != nil {
				return err
			}
		}
	}
}

// read parses frames; OKs and query frames are handled here so that a slow
// consumer of the subscription never delays a publish or a query.
func (ss *session) read(ctx context.Context, frames chan<- nostr.Envelope) error {
	parser := nostr.NewMessageParser()
	for {
		_, b, err := ss.c.ws.Read(ctx)
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		ss.s.received.Inc()
		ss.s.mu.Lock()
		ss.s.st.LastMessageAt = ss.s.p.opts.Now()
		ss.s.mu.Unlock()
		env, err := parseFrame(parser, b)
		if err != nil {
			ss.s.p.m.dropped.WithLabelValues(ss.s.url, "unparsable").Inc()
			ss.s.log.Debug("unparsable frame", "err", err)
			continue
		}
		if ss.routeDirect(env) {
			continue
		}
		select {
		case frames <- env:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// parseFrame parses one relay frame into a go-nostr envelope; it never
// panics on any input.
func parseFrame(parser nostr.MessageParser, b []byte) (nostr.Envelope, error) {
	env, err := parser.ParseMessage(string(b))
	if err != nil {
		return nil, fmt.Errorf("parse frame: %w", err)
	}
	if env == nil {
		return nil, errors.New("parse frame: empty envelope")
	}
	return env, nil
}

func (ss *session) routeDirect(env nostr.Envelope) bool {
	switch e := env.(type) {
	case *nostr.OKEnvelope:
		if !ss.c.resolve(*e) {
			ss.s.p.m.dropped.WithLabelValues(ss.s.url, "unexpected_ok").Inc()
		}
		return true
	case *nostr.EventEnvelope:
		if e.SubscriptionID == nil {
			ss.s.p.m.dropped.WithLabelValues(ss.s.url, "no_subscription").Inc()
			return true
		}
		if q := ss.c.query(*e.SubscriptionID); q != nil {
			q.add(e.Event)
			return true
		}
	case *nostr.EOSEEnvelope:
		if q := ss.c.query(string(*e)); q != nil {
			q.finish(true, "")
			return true
		}
	case *nostr.ClosedEnvelope:
		if q := ss.c.query(e.SubscriptionID); q != nil {
			q.finish(false, e.Reason)
			return true
		}
	}
	return false
}

func (ss *session) ping(ctx context.Context) {
	t := time.NewTicker(ss.s.p.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, ss.s.p.cfg.PingTimeout)
			err := ss.c.ws.Ping(pctx)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					ss.s.log.Info("relay ping failed, dropping connection", "err", err)
					ss.s.setErr(fmt.Errorf("ping: %w", err))
				}
				ss.c.shutdown()
				return
			}
		}
	}
}

func (ss *session) handle(ctx context.Context, env nostr.Envelope) error {
	switch e := env.(type) {
	case *nostr.EventEnvelope:
		sub := ss.byID[*e.SubscriptionID]
		if sub == nil || sub.state != subActive {
			ss.s.p.m.dropped.WithLabelValues(ss.s.url, "stale_subscription").Inc()
			return nil
		}
		ev := e.Event
		if !ss.s.p.deliver(ctx, Received{Relay: ss.s.url, At: ss.s.p.opts.Now(), Event: &ev}) {
			return ctx.Err()
		}
	case *nostr.EOSEEnvelope:
		sub := ss.byID[string(*e)]
		if sub == nil {
			return nil
		}
		sub.eose = true
		sub.attempt = 0
		ss.s.mu.Lock()
		ss.s.attempt = 0
		ss.s.mu.Unlock()
		return ss.maybeEOSE(ctx)
	case *nostr.ClosedEnvelope:
		sub := ss.byID[e.SubscriptionID]
		if sub == nil {
			return nil
		}
		return ss.handleClosed(sub, e.Reason)
	case *nostr.AuthEnvelope:
		if e.Challenge == nil {
			return nil
		}
		return ss.authenticate(*e.Challenge)
	case *nostr.NoticeEnvelope:
		ss.s.log.Debug("relay notice", "notice", string(*e))
	}
	return nil
}

func (ss *session) maybeEOSE(ctx context.Context) error {
	live := 0
	for _, sub := range ss.subs {
		if sub.state == subPermanent {
			continue
		}
		live++
		if !sub.eose {
			return nil
		}
	}
	if live == 0 || ss.eoseReported {
		return nil
	}
	ss.eoseReported = true
	ss.s.mu.Lock()
	ss.s.st.EOSESeen = true
	ss.s.st.ClosedPermanently = false
	ss.s.st.ClosedReason = ""
	ss.s.mu.Unlock()
	if !ss.s.p.deliver(ctx, Received{Relay: ss.s.url, At: ss.s.p.opts.Now(), EOSE: true}) {
		return ctx.Err()
	}
	return nil
}

// subscribeAll replaces the current subscription with the pool's filters.
func (ss *session) subscribeAll() error {
	for _, sub := range ss.subs {
		if sub.state == subActive {
			if err := ss.c.write(nostr.CloseEnvelope(sub.id)); err != nil {
				return err
			}
		}
	}
	ss.subs = nil
	clear(ss.byID)
	ss.eoseReported = false
	base := ss.s.p.currentFilters()
	if len(base) == 0 {
		return nil
	}
	groups := prepareFilters(base, nil, ss.s.limits())
	for _, g := range groups {
		sub := &mainSub{base: g}
		ss.subs = append(ss.subs, sub)
		if err := ss.send(sub); err != nil {
			return err
		}
	}
	return nil
}

// send (re)sends sub's REQ under a fresh id, with since from the cursor.
func (ss *session) send(sub *mainSub) error {
	if sub.id != "" {
		delete(ss.byID, sub.id)
	}
	sub.id = ss.c.nextID("pa-sub-")
	ss.byID[sub.id] = sub
	sub.eose = false
	ss.eoseReported = false
	sub.state = subActive
	sub.sentAuthed = ss.c.isAuthed()
	filters := prepareFilters(sub.base, ss.s.p.opts.sinceOf(), ss.s.limits())
	var fs nostr.Filters
	for _, g := range filters {
		fs = append(fs, g...)
	}
	return ss.c.write(nostr.ReqEnvelope{SubscriptionID: sub.id, Filters: fs})
}

func (ss *session) handleClosed(sub *mainSub, reason string) error {
	prefix := reasonPrefix(reason)
	permanent := permanentClosed(prefix)
	if prefix == "auth-required" {
		switch {
		case sub.sentAuthed || ss.s.p.opts.SecretKey == "" || ss.c.authFailed:
			permanent = true
		case ss.c.isAuthed():
			// The REQ raced the AUTH: send it again now.
			ss.s.p.m.closed.WithLabelValues(ss.s.url, "false").Inc()
			return ss.send(sub)
		default:
			sub.state = subWaitAuth
			ss.s.p.m.closed.WithLabelValues(ss.s.url, "false").Inc()
			return nil
		}
	}
	if permanent {
		sub.state = subPermanent
		ss.s.p.m.closed.WithLabelValues(ss.s.url, "true").Inc()
		ss.s.mu.Lock()
		ss.s.st.ClosedPermanently = true
		ss.s.st.ClosedReason = reason
		ss.s.st.LastError = "subscription closed: " + reason
		ss.s.mu.Unlock()
		ss.s.log.Warn("relay closed the subscription permanently", "reason", reason)
		return nil
	}
	ss.s.p.m.closed.WithLabelValues(ss.s.url, "false").Inc()
	backoff := Backoff{Initial: ss.s.p.cfg.BackoffInitial, Max: ss.s.p.cfg.BackoffMax}
	delay := backoff.Delay(sub.attempt, ss.s.p.opts.Rand())
	sub.attempt++
	sub.state = subRetry
	sub.retryAt = time.Now().Add(delay)
	ss.s.log.Info("relay closed the subscription, resubscribing", "reason", reason, "in", delay)
	ss.armRetry()
	return nil
}

func (ss *session) armRetry() {
	var next time.Time
	for _, sub := range ss.subs {
		if sub.state == subRetry && (next.IsZero() || sub.retryAt.Before(next)) {
			next = sub.retryAt
		}
	}
	if ss.retry != nil {
		ss.retry.Stop()
		ss.retry = nil
	}
	if !next.IsZero() {
		ss.retry = time.NewTimer(time.Until(next))
	}
}

func (ss *session) retryDue() error {
	now := time.Now()
	for _, sub := range ss.subs {
		if sub.state == subRetry && !sub.retryAt.After(now) {
			if err := ss.send(sub); err != nil {
				return err
			}
		}
	}
	ss.armRetry()
	return nil
}

func (ss *session) authenticate(challenge string) error {
	sk := ss.s.p.opts.SecretKey
	if sk == "" {
		ss.s.log.Debug("relay asks for AUTH, no key configured")
		return nil
	}
	if ss.c.isAuthed() || ss.authOK != nil {
		return nil
	}
	// The relay checks the tag against the address it was reached at.
	ev := nip42.CreateUnsignedAuthEvent(challenge, ss.s.p.pubkey, ss.s.dial)
	if err := ev.Sign(sk); err != nil {
		return fmt.Errorf("sign auth event: %w", err)
	}
	ss.authID = ev.ID
	ss.authOK = ss.c.addPending(ev.ID)
	return ss.c.write(nostr.AuthEnvelope{Event: ev})
}

func (ss *session) handleAuthOK(ok nostr.OKEnvelope) error {
	ss.authOK = nil
	if !ok.OK {
		ss.c.mu.Lock()
		ss.c.authFailed = true
		ss.c.mu.Unlock()
		ss.s.setErr(fmt.Errorf("auth failed: %s", ok.Reason))
		ss.s.log.Warn("relay rejected AUTH", "reason", ok.Reason)
		for _, sub := range ss.subs {
			if sub.state == subWaitAuth {
				if err := ss.handleClosed(sub, "auth-required: AUTH failed: "+ok.Reason); err != nil {
					return err
				}
			}
		}
		return nil
	}
	close(ss.c.authed)
	ss.s.mu.Lock()
	ss.s.st.Authenticated = true
	ss.s.mu.Unlock()
	ss.s.log.Info("authenticated to relay")
	for _, sub := range ss.subs {
		if sub.state == subWaitAuth {
			if err := ss.send(sub); err != nil {
				return err
			}
		}
	}
	return nil
}
