package relay

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/coder/websocket"
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
