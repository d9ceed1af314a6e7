package relay

// A session is the life of one connection: the read loop, the frames it
// routes, pings, and the handling of every message a relay sends.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nbd-wtf/go-nostr"
)

// subState is where a subscription of the session stands.
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
