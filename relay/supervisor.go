package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
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
	// BackoffAttempt counts the connections in a row that failed or ended
	// before lasting StableAfter; the next reconnect waits about
	// Backoff.Delay(BackoffAttempt). An EOSE does not reset it: a relay that
	// answers and then drops the connection is still backed off.
	BackoffAttempt int
	// LastRejection is the last time this relay refused one of our events
	// (zero At: never since the pool started).
	LastRejection Rejection
	// PublishBackoffUntil is set while the relay's last answer to a publish
	// was "rate-limited:": publishes to it wait until then.
	PublishBackoffUntil time.Time
	// REQs is the number of REQs the subscription holds open on the current
	// connection, and Choices the alternative each interest got (Interest).
	REQs    int
	Choices []Choice
}

// Rejection is one refusal of an event we published: an OK false (other
// than mute:), a publish held back by the relay's rate-limited:, or a
// NOTICE that arrived while the publish awaited an OK that never came.
type Rejection struct {
	At      time.Time
	Kind    int
	EventID string
	Outcome Outcome
	// Reason is the relay's words (the OK message or the NOTICE).
	Reason string
	// Prefix is Reason's class (ParseReason).
	Prefix string
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
	attempt  int // reconnect backoff attempt; reset only by a connection that lasted StableAfter

	// Publish backoff after an OK "rate-limited:" (guarded by mu).
	pubAttempt    int
	pubHoldUntil  time.Time
	pubHoldReason string
	// rejectLog rate-limits the WARN line per rejection class (guarded by mu).
	rejectLog map[string]*logWindow
	// closedWarned is the permanent CLOSED class already reported at WARN
	// (cleared by the next EOSE), so reconnects do not repeat the WARN.
	closedWarned string
}

// logWindow counts log lines suppressed since the last one written.
type logWindow struct {
	last       time.Time
	suppressed int
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
	backoff := s.p.cfg.Backoff()
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
		opened, err := s.connectAndServe(ctx)
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		// Only a connection that stayed up resets the backoff: a relay that
		// accepts, sends EOSE and closes must not be redialled at the
		// initial delay forever.
		if !opened.IsZero() && s.p.opts.Now().Sub(opened) >= s.p.cfg.StableAfter {
			s.attempt = 0
		}
		attempt := s.attempt
		s.attempt++
		s.st.BackoffAttempt = s.attempt
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
	l, err := fetchLimits(fctx, s.p.infoHTTP, s.dial, s.hostHeader())
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

// hostHeader is the Host header sent when the relay is dialled through
// another address (Config.DialAddrs): the canonical relay's host, as a
// tunnel to it expects and as relays that check AUTH's relay tag against
// the Host header (khatru without a ServiceURL) need. "" when dialling the
// URL itself.
func (s *supervisor) hostHeader() string {
	if s.dial == s.url {
		return ""
	}
	u, err := url.Parse(s.url)
	if err != nil {
		return ""
	}
	return u.Host
}

// connectAndServe dials the relay and serves the connection until it ends;
// opened is when it opened (zero if the dial failed).
func (s *supervisor) connectAndServe(ctx context.Context) (opened time.Time, err error) {
	dctx, cancel := context.WithTimeout(ctx, s.p.cfg.DialTimeout)
	ws, resp, err := websocket.Dial(dctx, s.dial, &websocket.DialOptions{HTTPClient: s.p.dialHTTP, Host: s.hostHeader()})
	cancel()
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("dial %s: %w", s.dial, err)
	}
	ws.SetReadLimit(s.p.cfg.MaxMessageSize)
	sctx, scancel := context.WithCancel(ctx)
	c := newConn(sctx, ws, s.p.cfg.WriteTimeout)
	s.setConn(c)
	opened = s.p.opts.Now()
	s.log.Info("relay connected")
	sess := &session{s: s, c: c, byID: make(map[string]*mainSub)}
	err = sess.serve(sctx)
	scancel()
	c.shutdown()
	s.setConn(nil)
	return opened, err
}

// conn is one open websocket. Writes may come from any goroutine.
type conn struct {
	ctx          context.Context // the session's; writes end with it
	ws           *websocket.Conn
	writeTimeout time.Duration
	closed       chan struct{} // closed when the session ends
	closeOnce    sync.Once

	mu         sync.Mutex
	pending    map[string][]*okWaiter
	queries    map[string]*querySink
	qslots     chan struct{} // query slots (Config.QuerySlots), made on first use
	authed     chan struct{} // closed when AUTH succeeded
	authBad    chan struct{} // closed when AUTH failed
	authFailed bool
	authWhy    string // the relay's words when AUTH failed
	seq        int
}

// okWaiter is one publish (or AUTH) waiting for the OK of an event id.
type okWaiter struct {
	ch chan nostr.OKEnvelope // buffered 1: one OK per waiter
	// notice is the first NOTICE the relay sent while this waiter waited
	// (guarded by conn.mu): the probable reason when no OK comes.
	notice string
}

func newConn(ctx context.Context, ws *websocket.Conn, writeTimeout time.Duration) *conn {
	return &conn{
		ctx:          ctx,
		ws:           ws,
		writeTimeout: writeTimeout,
		closed:       make(chan struct{}),
		pending:      make(map[string][]*okWaiter),
		queries:      make(map[string]*querySink),
		authed:       make(chan struct{}),
		authBad:      make(chan struct{}),
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

// write sends one of go-nostr's envelopes, encoded by its own encoder
// (json.Marshal would scan and compact the result once more: the REQ
// frames of the narrowed subscription are up to max_message_length).
func (c *conn) write(v json.Marshaler) error {
	b, err := v.MarshalJSON()
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

func (c *conn) addPending(id string) *okWaiter {
	w := &okWaiter{ch: make(chan nostr.OKEnvelope, 1)}
	c.mu.Lock()
	c.pending[id] = append(c.pending[id], w)
	c.mu.Unlock()
	return w
}

// noticeOf returns the NOTICE attached to w, if any.
func (c *conn) noticeOf(w *okWaiter) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return w.notice
}

// attachNotice hands a NOTICE to every publish still waiting for its OK on
// this connection (a relay may answer a bad EVENT with a NOTICE and no OK,
// as @nostr-relay/core does); it reports how many got it.
func (c *conn) attachNotice(text string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, list := range c.pending {
		for _, w := range list {
			if w.notice == "" {
				w.notice = text
				n++
			}
		}
	}
	return n
}

func (c *conn) removePending(id string, w *okWaiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.pending[id]
	for i, x := range list {
		if x == w {
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
	for _, w := range list {
		w.ch <- ok // buffered 1, one OK per waiter
	}
	return len(list) > 0
}

// failAuth records a failed AUTH (the relay's words) and wakes publishes
// waiting for it.
func (c *conn) failAuth(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.authFailed {
		c.authFailed = true
		c.authWhy = why
		close(c.authBad)
	}
}

// authFailure returns the relay's words for a failed AUTH, "" if none.
func (c *conn) authFailure() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.authWhy
}

func (c *conn) isAuthed() bool {
	select {
	case <-c.authed:
		return true
	default:
		return false
	}
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
	key        string        // filtersKey(base)
	base       nostr.Filters // without since
	sent       nostr.Filters // as last sent (since and limit applied)
	pageable   []bool        // per sent filter (nextPages)
	counts     []int         // stored events per sent filter, before the REQ's EOSE
	oldest     []nostr.Timestamp
	sentAuthed bool
	sentAt     time.Time // when the current REQ was sent (Options.Now)
	gotEOSE    bool      // the REQ's own EOSE came (catch-up pages may follow)
	eose       bool      // caught up: EOSE, and every catch-up page read
	state      subState
	attempt    int // resubscribe backoff; reset only when a REQ lasted StableAfter
	retryAt    time.Time
}

// pageSub is one catch-up page of a mainSub: the filters that returned
// their limit, until the oldest event they returned.
type pageSub struct {
	id     string
	parent *mainSub
	sent   nostr.Filters
	counts []int
	oldest []nostr.Timestamp
}

// session runs one connection: the subscription, AUTH, and routing of
// frames. Its fields are touched only by the serve goroutine, but for
// live, which the reader consults.
type session struct {
	s            *supervisor
	c            *conn
	subs         []*mainSub
	byID         map[string]*mainSub
	eoseReported bool
	// retiring are REQs replaced by others (subscribeAll) that stay open
	// until their replacements caught up, so that no live event falls
	// between them (relays handle a connection's REQ and CLOSE in any
	// order: khatru runs each message in a goroutine of its own).
	retiring []*mainSub
	authOK   chan nostr.OKEnvelope
	authID   string
	retry    *time.Timer

	page      *pageSub   // the catch-up page in flight (one at a time)
	pageQueue []*mainSub // subs waiting to page

	liveMu sync.Mutex
	live   map[string]bool // ids of caught-up REQs (Options.Known applies)
}

// frame is one relay frame handed from the reader to the session: parsed
// (env), or, for an event Options.Known knew on a caught-up REQ, only its
// ids (known, sub) with the raw bytes in case the REQ changed meanwhile.
// attached is, for a NOTICE, how many waiting publishes it was attached to.
type frame struct {
	env      nostr.Envelope
	known    string
	sub      string
	raw      []byte
	attached int
}

func (ss *session) setLive(id string, live bool) {
	ss.liveMu.Lock()
	defer ss.liveMu.Unlock()
	if ss.live == nil {
		ss.live = map[string]bool{}
	}
	if live {
		ss.live[id] = true
	} else {
		delete(ss.live, id)
	}
}

func (ss *session) isLive(id string) bool {
	ss.liveMu.Lock()
	defer ss.liveMu.Unlock()
	return ss.live[id]
}

// gap tells the pool's reader that the live stream may miss events from
// here on (Received.Gap), in order with the events around it.
func (ss *session) gap(ctx context.Context) error {
	if !ss.s.p.deliver(ctx, Received{Relay: ss.s.url, At: ss.s.p.opts.Now(), Gap: true}) {
		return ctx.Err()
	}
	return nil
}

func (ss *session) serve(ctx context.Context) error {
	frames := make(chan frame, 64)
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

	// A new connection: what the relay accepted before its REQs are
	// caught up may be missing (lease's relay watch starts at the EOSE).
	if err := ss.gap(ctx); err != nil {
		return err
	}
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
		case f := <-frames:
			if err := ss.handle(ctx, f); err != nil {
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
// consumer of the subscription never delays a publish or a query. An event
// of a caught-up REQ that Options.Known knows is not parsed at all.
func (ss *session) read(ctx context.Context, frames chan<- frame) error {
	parser := nostr.NewMessageParser()
	known := ss.s.p.opts.Known
	for {
		_, b, err := ss.c.ws.Read(ctx)
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		ss.s.received.Inc()
		ss.s.mu.Lock()
		ss.s.st.LastMessageAt = ss.s.p.opts.Now()
		ss.s.mu.Unlock()
		var f frame
		if known != nil {
			if sub, id, ok := peekEvent(b); ok && ss.isLive(sub) && known(id) {
				f = frame{known: id, sub: sub, raw: b}
			}
		}
		if f.known == "" {
			env, err := parseFrame(parser, b)
			if err != nil {
				ss.s.p.m.dropped.WithLabelValues(ss.s.url, "unparsable").Inc()
				ss.s.log.Debug("unparsable frame", "err", err)
				continue
			}
			if ss.routeDirect(env) {
				continue
			}
			f = frame{env: env}
			if n, ok := env.(*nostr.NoticeEnvelope); ok {
				// Attached here, in arrival order before any later OK.
				f.attached = ss.c.attachNotice(string(*n))
			}
		}
		select {
		case frames <- f:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// peekEvent reads the subscription id and the event id of an EVENT frame
// without parsing it (["EVENT","<sub>",{..."id":"<64 hex>"...}]). Inside
// JSON strings every quote is escaped, so `"id":"` can only be the event's
// id key. ok is false for any other shape (the frame is then parsed).
func peekEvent(b []byte) (sub, id string, ok bool) {
	const head = `["EVENT","`
	if !bytes.HasPrefix(b, []byte(head)) {
		return "", "", false
	}
	rest := b[len(head):]
	i := bytes.IndexByte(rest, '"')
	if i <= 0 || i > 64 || bytes.IndexByte(rest[:i], '\\') >= 0 {
		return "", "", false
	}
	k := bytes.Index(rest[i:], []byte(`"id":"`))
	if k < 0 {
		return "", "", false
	}
	start := i + k + len(`"id":"`)
	if len(rest) < start+65 || rest[start+64] != '"' {
		return "", "", false
	}
	for _, c := range rest[start : start+64] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", "", false
		}
	}
	return string(rest[:i]), string(rest[start : start+64]), true
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

func (ss *session) handle(ctx context.Context, f frame) error {
	if f.known != "" {
		sub := ss.byID[f.sub]
		if sub != nil && sub.state == subActive && sub.eose {
			if !ss.s.p.deliver(ctx, Received{Relay: ss.s.url, At: ss.s.p.opts.Now(), ID: f.known}) {
				return ctx.Err()
			}
			return nil
		}
		// The REQ changed since the reader looked: parse it after all.
		env, err := parseFrame(nostr.NewMessageParser(), f.raw)
		if err != nil {
			return nil
		}
		f = frame{env: env}
	}
	switch e := f.env.(type) {
	case *nostr.EventEnvelope:
		id := *e.SubscriptionID
		ev := e.Event
		if pg := ss.page; pg != nil && pg.id == id {
			countStored(pg.sent, pg.counts, pg.oldest, &ev)
		} else {
			sub := ss.byID[id]
			if sub == nil || sub.state != subActive {
				ss.s.p.m.dropped.WithLabelValues(ss.s.url, "stale_subscription").Inc()
				return nil
			}
			if !sub.gotEOSE {
				countStored(sub.sent, sub.counts, sub.oldest, &ev)
			}
		}
		if !ss.s.p.deliver(ctx, Received{Relay: ss.s.url, At: ss.s.p.opts.Now(), Event: &ev}) {
			return ctx.Err()
		}
	case *nostr.EOSEEnvelope:
		if pg := ss.page; pg != nil && pg.id == string(*e) {
			return ss.pageDone(ctx, true)
		}
		sub := ss.byID[string(*e)]
		if sub == nil || sub.gotEOSE {
			return nil
		}
		sub.gotEOSE = true
		pages, stuck := nextPages(sub.sent, sub.pageable, sub.counts, sub.oldest)
		ss.noteStuck(stuck)
		if len(pages) > 0 {
			ss.pageQueue = append(ss.pageQueue, sub)
			return ss.nextPage(ctx)
		}
		if err := ss.caughtUp(ctx, sub); err != nil {
			return err
		}
		// A page dropped by send() leaves the queue waiting: move it on.
		return ss.nextPage(ctx)
	case *nostr.ClosedEnvelope:
		if pg := ss.page; pg != nil && pg.id == e.SubscriptionID {
			ss.s.log.Warn("relay closed a catch-up page: events older than it may be missing", "reason", e.Reason)
			return ss.pageDone(ctx, false)
		}
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
		ss.s.logNotice(string(*e), f.attached)
	}
	return nil
}

// caughtUp marks sub as having delivered every stored event (its EOSE,
// and every page), so live events of Options.Known may skip parsing.
func (ss *session) caughtUp(ctx context.Context, sub *mainSub) error {
	sub.eose = true
	ss.setLive(sub.id, true)
	if err := ss.retire(false); err != nil {
		return err
	}
	return ss.maybeEOSE(ctx)
}

// retire closes the REQs that subscribeAll replaced, once every REQ of the
// subscription caught up (or at once with now: the relay's budget wants
// the room, and then the stream may have a gap, which the caller reports).
func (ss *session) retire(now bool) error {
	if len(ss.retiring) == 0 {
		return nil
	}
	if !now {
		for _, sub := range ss.subs {
			if sub.state != subPermanent && !sub.eose {
				return nil
			}
		}
	}
	for _, sub := range ss.retiring {
		delete(ss.byID, sub.id)
		ss.setLive(sub.id, false)
		if sub.state == subActive {
			if err := ss.c.write(nostr.CloseEnvelope(sub.id)); err != nil {
				return err
			}
		}
	}
	ss.retiring = nil
	return nil
}

// nextPage starts the catch-up page of the first queued sub, unless one is
// in flight. A sub whose REQ was sent again since it queued is skipped.
func (ss *session) nextPage(ctx context.Context) error {
	for ss.page == nil && len(ss.pageQueue) > 0 {
		sub := ss.pageQueue[0]
		ss.pageQueue = ss.pageQueue[1:]
		if ss.byID[sub.id] != sub || sub.state != subActive || !sub.gotEOSE || sub.eose {
			continue
		}
		pages, _ := nextPages(sub.sent, sub.pageable, sub.counts, sub.oldest)
		if len(pages) == 0 {
			if err := ss.caughtUp(ctx, sub); err != nil {
				return err
			}
			continue
		}
		return ss.sendPage(sub, pages)
	}
	return nil
}

func (ss *session) sendPage(parent *mainSub, filters nostr.Filters) error {
	pg := &pageSub{id: ss.c.nextID("pa-page-"), parent: parent, sent: filters,
		counts: make([]int, len(filters)), oldest: make([]nostr.Timestamp, len(filters))}
	ss.page = pg
	ss.s.p.m.pages.WithLabelValues(ss.s.url).Inc()
	return ss.c.write(nostr.ReqEnvelope{SubscriptionID: pg.id, Filters: filters})
}

// pageDone ends the page in flight (complete: its EOSE came): the next page
// of the same sub if some filter returned its limit again, else the sub is
// caught up; then the next queued sub pages.
func (ss *session) pageDone(ctx context.Context, complete bool) error {
	pg := ss.page
	if pg != nil {
		ss.page = nil
		if complete {
			if err := ss.c.write(nostr.CloseEnvelope(pg.id)); err != nil {
				return err
			}
		}
		parent := pg.parent
		if ss.byID[parent.id] == parent && parent.state == subActive {
			pages, stuck := nextPages(pg.sent, allTrue(len(pg.sent)), pg.counts, pg.oldest)
			ss.noteStuck(stuck)
			if complete && len(pages) > 0 {
				return ss.sendPage(parent, pages)
			}
			if err := ss.caughtUp(ctx, parent); err != nil {
				return err
			}
		}
	}
	return ss.nextPage(ctx)
}

func (ss *session) noteStuck(n int) {
	if n > 0 {
		ss.s.log.Warn("relay returned its limit of stored events within one second: older ones of that second cannot be paged", "filters", n)
	}
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
	ss.s.closedWarned = ""
	ss.s.mu.Unlock()
	if !ss.s.p.deliver(ctx, Received{Relay: ss.s.url, At: ss.s.p.opts.Now(), EOSE: true}) {
		return ctx.Err()
	}
	return nil
}

// subscribeAll brings the connection's REQs in line with the pool's
// interests: REQs whose filters did not change stay as they are, new ones
// are sent (before the old ones are closed when the relay's subscription
// budget allows both at once, so nothing stored in between is missed), and
// the others are closed.
func (ss *session) subscribeAll() error {
	planned, choices := plan(ss.s.p.currentInterests(), ss.s.limits(), ss.s.p.cfg)
	old := make(map[string]*mainSub, len(ss.subs))
	for _, sub := range ss.subs {
		if _, dup := old[sub.key]; !dup {
			old[sub.key] = sub
		} else {
			old[sub.key+"\x00"+sub.id] = sub
		}
	}
	var next, fresh []*mainSub
	for _, pr := range planned {
		if sub, ok := old[pr.key]; ok {
			delete(old, pr.key)
			next = append(next, sub)
			continue
		}
		sub := &mainSub{base: pr.base, key: pr.key}
		next = append(next, sub)
		fresh = append(fresh, sub)
	}
	ss.subs = next
	for _, sub := range old {
		ss.retiring = append(ss.retiring, sub)
	}
	// The replaced REQs stay open until the new ones caught up (retire),
	// when the relay's budget has room for both; otherwise they close
	// first, and the stream has a gap.
	if len(next)+len(ss.retiring) > ss.s.p.cfg.mainBudget(ss.s.limits()) {
		if err := ss.gap(ss.c.ctx); err != nil {
			return err
		}
		if err := ss.retire(true); err != nil {
			return err
		}
	}
	if len(fresh) > 0 {
		ss.eoseReported = false
	}
	for _, sub := range fresh {
		if err := ss.send(sub); err != nil {
			return err
		}
	}
	if len(fresh) == 0 {
		if err := ss.retire(false); err != nil {
			return err
		}
	}
	ss.s.mu.Lock()
	ss.s.st.REQs = len(next)
	ss.s.st.Choices = choices
	ss.s.mu.Unlock()
	for _, c := range choices {
		if !c.Fits {
			ss.s.log.Warn("relay limits leave too few subscriptions: part of an interest is not subscribed",
				"interest", c.Interest, "reqs", c.REQs)
		}
	}
	if len(ss.subs) == 0 {
		return nil
	}
	return ss.maybeEOSE(ss.c.ctx)
}

// send (re)sends sub's REQ under a fresh id, with since from the cursor and
// a limit on every filter without one (so that a relay's cut is seen and
// paged through).
func (ss *session) send(sub *mainSub) error {
	if sub.id != "" {
		// Sent again (after a CLOSED, or a REQ that raced the AUTH):
		// events between the two REQs may be missing.
		if err := ss.gap(ss.c.ctx); err != nil {
			return err
		}
		delete(ss.byID, sub.id)
		ss.setLive(sub.id, false)
		if ss.page != nil && ss.page.parent == sub {
			_ = ss.c.write(nostr.CloseEnvelope(ss.page.id))
			ss.page = nil
		}
	}
	sub.id = ss.c.nextID("pa-sub-")
	ss.byID[sub.id] = sub
	sub.eose, sub.gotEOSE = false, false
	ss.eoseReported = false
	sub.state = subActive
	sub.sentAuthed = ss.c.isAuthed()
	sub.sentAt = ss.s.p.opts.Now()
	l := ss.s.limits()
	fs, pageable := withLimits(withSince(sub.base, ss.s.p.opts.sinceOf()), l, ss.s.p.cfg.pageLimit(l))
	sub.pageable = pageable
	sub.sent = fs
	sub.counts = make([]int, len(fs))
	sub.oldest = make([]nostr.Timestamp, len(fs))
	return ss.c.write(nostr.ReqEnvelope{SubscriptionID: sub.id, Filters: fs})
}

func (ss *session) handleClosed(sub *mainSub, reason string) error {
	// The relay ended one REQ: its live events stop until it is sent
	// again (a gap whatever comes next).
	if err := ss.gap(ss.c.ctx); err != nil {
		return err
	}
	prefix := reasonPrefix(reason)
	permanent := permanentClosed(prefix)
	if prefix == PrefixAuthRequired {
		switch {
		case sub.sentAuthed || ss.s.p.opts.SecretKey == "" || ss.c.authFailed:
			permanent = true
			// The AUTH may have failed before this CLOSED came: name it.
			if why := ss.c.authFailure(); why != "" && !strings.Contains(reason, "AUTH failed") {
				reason += " (AUTH failed: " + why + ")"
			}
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
		// One WARN per class until an EOSE clears it, however often the
		// connection comes back to the same refusal.
		repeat := ss.s.closedWarned == prefix
		ss.s.closedWarned = prefix
		ss.s.mu.Unlock()
		if repeat {
			ss.s.log.Info("relay closed the subscription permanently again", "reason", reason, "class", prefix)
		} else {
			ss.s.log.Warn("relay closed the subscription permanently: no events from it until it is reconnected", "reason", reason, "class", prefix)
		}
		return nil
	}
	ss.s.p.m.closed.WithLabelValues(ss.s.url, "false").Inc()
	if ss.s.p.opts.Now().Sub(sub.sentAt) >= ss.s.p.cfg.StableAfter {
		// The REQ served for a while: a fresh CLOSED starts a fresh backoff.
		sub.attempt = 0
	}
	backoff := ss.s.p.cfg.Backoff()
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
	// The relay tag is the canonical relay URL (the one the lease lists),
	// never the address dialled: relays check it against their own public
	// URL (strfry's relay.auth.serviceUrl, @nostr-relay/core's hostname), so
	// an AUTH signed for a tunnel's local address is refused.
	ev := nip42.CreateUnsignedAuthEvent(challenge, ss.s.p.pubkey, ss.s.url)
	if err := ev.Sign(sk); err != nil {
		return fmt.Errorf("sign auth event: %w", err)
	}
	ss.authID = ev.ID
	ss.authOK = ss.c.addPending(ev.ID).ch
	return ss.c.write(nostr.AuthEnvelope{Event: ev})
}

func (ss *session) handleAuthOK(ok nostr.OKEnvelope) error {
	ss.authOK = nil
	if !ok.OK {
		ss.c.failAuth(ok.Reason)
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
