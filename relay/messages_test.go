package relay_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/internal/relaytest"
	"provideragent/relay"
)

// programmed is a relay on a real httptest server whose answers are
// written by the test: onFrame gets every client frame and may write any
// reply (or close the connection by returning false).
type programmed struct {
	srv     *httptest.Server
	onFrame func(ctx context.Context, c *websocket.Conn, n int, env nostr.Envelope) bool

	mu     sync.Mutex
	conns  int
	open   map[*websocket.Conn]bool
	frames map[string]int // by label: EVENT, REQ, AUTH, CLOSE
}

// dropAll closes every open client connection from the relay's side.
func (p *programmed) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.open {
		_ = c.CloseNow()
	}
}

func newProgrammed(t *testing.T, onFrame func(ctx context.Context, c *websocket.Conn, n int, env nostr.Envelope) bool) *programmed {
	p := &programmed{onFrame: onFrame, frames: map[string]int{}, open: map[*websocket.Conn]bool{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *programmed) url() string { return "ws" + strings.TrimPrefix(p.srv.URL, "http") }

func (p *programmed) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Accept") == "application/nostr+json" {
		http.NotFound(w, r)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	p.mu.Lock()
	p.conns++
	n := p.conns
	p.open[c] = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.open, c)
		p.mu.Unlock()
	}()
	parser := nostr.NewMessageParser()
	for {
		_, b, err := c.Read(r.Context())
		if err != nil {
			return
		}
		env, err := parser.ParseMessage(string(b))
		if err != nil {
			continue
		}
		p.mu.Lock()
		p.frames[env.Label()]++
		p.mu.Unlock()
		if !p.onFrame(r.Context(), c, n, env) {
			return
		}
	}
}

func (p *programmed) count(label string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frames[label]
}

func (p *programmed) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns
}

func writeJSON(ctx context.Context, c *websocket.Conn, frame string) {
	_ = c.Write(ctx, websocket.MessageText, []byte(frame))
}

func publishWithin(t *testing.T, h *harness, d time.Duration, ev nostr.Event) relay.PublishResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return h.pool.Publish(ctx, ev)
}

// @nostr-relay/core answers an EVENT its validator refuses with a NOTICE and
// no OK: the NOTICE is attached to the waiting publish as its probable
// reason (outcome still timed_out), counted under its class, and kept as
// the relay's last rejection.
func TestPublishNoticeWithoutOK(t *testing.T) {
	const notice = `invalid: must be less than or equal to 102400 chars at "[1].content"`
	p := newProgrammed(t, func(ctx context.Context, c *websocket.Conn, _ int, env nostr.Envelope) bool {
		if _, ok := env.(*nostr.EventEnvelope); ok {
			writeJSON(ctx, c, `["NOTICE",`+quote(notice)+`]`)
		}
		return true
	})
	h := newPool(t, fastConfig(p.url()), relay.Options{})
	ev := signed(t, 1, "big", time.Now())
	res := publishWithin(t, h, 1500*time.Millisecond, ev)
	if len(res.TimedOut) != 1 {
		t.Fatalf("Publish() = %+v, want one timed out", res)
	}
	o := res.TimedOut[0]
	if o.Notice != notice || o.Prefix != relay.PrefixInvalid || !strings.Contains(o.Reason, notice) {
		t.Fatalf("timed-out outcome = %+v, want Notice %q with prefix invalid in the reason", o, notice)
	}
	if got := testutil.ToFloat64(h.publishCounter(p.url(), "timed_out", relay.PrefixInvalid)); got != 1 {
		t.Errorf("relay_publish_total{outcome=timed_out,reason=invalid} = %v, want 1", got)
	}
	lr := h.status(p.url()).LastRejection
	if lr.EventID != ev.ID || lr.Kind != 1 || lr.Reason != notice || lr.At.IsZero() || lr.Outcome != relay.OutcomeTimedOut {
		t.Errorf("Status.LastRejection = %+v, want event %s kind 1 with the NOTICE", lr, ev.ID)
	}
}

// rate-limited: backs off that relay's publishes. With a backoff longer
// than the deadline, the first event is rejected with the relay's words
// and the next one is not even sent.
func TestPublishRateLimitedBacksOff(t *testing.T) {
	p := newProgrammed(t, func(ctx context.Context, c *websocket.Conn, _ int, env nostr.Envelope) bool {
		if e, ok := env.(*nostr.EventEnvelope); ok {
			writeJSON(ctx, c, `["OK","`+e.Event.ID+`",false,"rate-limited: slow down there chief"]`)
		}
		return true
	})
	cfg := fastConfig(p.url())
	cfg.BackoffInitial, cfg.BackoffMax = time.Hour, 2*time.Hour
	h := newPool(t, cfg, relay.Options{})
	res := publishWithin(t, h, 5*time.Second, signed(t, 1, "one", time.Now()))
	if len(res.Rejected) != 1 || res.Rejected[0].Outcome != relay.OutcomeRejected || res.Rejected[0].Prefix != relay.PrefixRateLimited {
		t.Fatalf("Publish() = %+v, want rejected rate-limited", res)
	}
	st := h.status(p.url())
	if st.PublishBackoffUntil.Before(time.Now().Add(20 * time.Minute)) {
		t.Fatalf("Status.PublishBackoffUntil = %v, want about an hour ahead", st.PublishBackoffUntil)
	}
	res = publishWithin(t, h, 5*time.Second, signed(t, 1, "two", time.Now()))
	if len(res.Rejected) != 1 || res.Rejected[0].Outcome != relay.OutcomeRateLimited || !strings.Contains(res.Rejected[0].Reason, "slow down") {
		t.Fatalf("Publish() during backoff = %+v, want rate_limited with the relay's words", res)
	}
	if n := p.count("EVENT"); n != 1 {
		t.Fatalf("relay received %d EVENTs, want 1 (the second held back)", n)
	}
	if got := testutil.ToFloat64(h.publishCounter(p.url(), "rate_limited", relay.PrefixRateLimited)); got != 1 {
		t.Errorf("relay_publish_total{outcome=rate_limited} = %v, want 1", got)
	}
}

// A short rate-limit backoff is waited out within the deadline and the
// event is sent again; the OK true ends the backoff.
func TestPublishRateLimitedRetried(t *testing.T) {
	var events atomic.Int32
	p := newProgrammed(t, func(ctx context.Context, c *websocket.Conn, _ int, env nostr.Envelope) bool {
		if e, ok := env.(*nostr.EventEnvelope); ok {
			if events.Add(1) == 1 {
				writeJSON(ctx, c, `["OK","`+e.Event.ID+`",false,"RATE-LIMITED: one at a time"]`)
			} else {
				writeJSON(ctx, c, `["OK","`+e.Event.ID+`",true,""]`)
			}
		}
		return true
	})
	h := newPool(t, fastConfig(p.url()), relay.Options{})
	res := publishWithin(t, h, 10*time.Second, signed(t, 1, "x", time.Now()))
	if res.AcceptedCount() != 1 || events.Load() != 2 {
		t.Fatalf("Publish() = %+v after %d EVENTs, want accepted on the second", res, events.Load())
	}
	if st := h.status(p.url()); !st.PublishBackoffUntil.IsZero() {
		t.Errorf("Status.PublishBackoffUntil = %v after OK true, want zero", st.PublishBackoffUntil)
	}
}

// strfry's form of a failed AUTH: a challenge with the CLOSED, then OK
// false for our AUTH. "ERROR: auth-required: ..." after the failed AUTH is
// permanent: reported once, never resubscribed on this connection.
func TestClosedStrfryAuthRequiredAfterFailedAuthIsPermanent(t *testing.T) {
	p := newProgrammed(t, func(ctx context.Context, c *websocket.Conn, _ int, env nostr.Envelope) bool {
		switch e := env.(type) {
		case *nostr.ReqEnvelope:
			writeJSON(ctx, c, `["AUTH","challenge-1"]`)
			writeJSON(ctx, c, `["CLOSED","`+e.SubscriptionID+`","ERROR: auth-required: requested filter requires authentication"]`)
		case *nostr.AuthEnvelope:
			writeJSON(ctx, c, `["OK","`+e.Event.ID+`",false,"error: incorrect or missing relay tag, expected: wss://elsewhere.example"]`)
		}
		return true
	})
	h := newPool(t, fastConfig(p.url()), relay.Options{Filters: kind1Filter(t), SecretKey: agentKey})
	eventually(t, "closed permanently", func() bool { return h.status(p.url()).ClosedPermanently })
	st := h.status(p.url())
	if !strings.Contains(st.ClosedReason, "auth-required") || !strings.Contains(st.LastError, "incorrect or missing relay tag") && !strings.Contains(st.ClosedReason, "AUTH failed") {
		t.Fatalf("Status = %+v, want a permanent auth-required naming the failed AUTH", st)
	}
	if v := testutil.ToFloat64(mustGauge(t, h.reg, "relay_subscription_closed_total", p.url())); v < 1 {
		t.Errorf("relay_subscription_closed_total = %v, want >= 1", v)
	}
	// Nothing more is asked on this connection: a publish is rejected at
	// once (the AUTH failed), not held until the deadline.
	if n := p.count("REQ"); n != 1 {
		t.Fatalf("REQs sent = %d, want 1 (no resubscribe loop)", n)
	}
}

// TestReconnectBackoffNotResetByEOSE: a relay that sends EOSE and closes at once must be backed off
// like any failing relay; an EOSE does not reset the reconnect backoff.
func TestReconnectBackoffNotResetByEOSE(t *testing.T) {
	p := newProgrammed(t, func(ctx context.Context, c *websocket.Conn, _ int, env nostr.Envelope) bool {
		if e, ok := env.(*nostr.ReqEnvelope); ok {
			writeJSON(ctx, c, `["EOSE","`+e.SubscriptionID+`"]`)
			return false
		}
		return true
	})
	cfg := fastConfig(p.url())
	cfg.BackoffInitial, cfg.BackoffMax, cfg.StableAfter = time.Millisecond, 4*time.Millisecond, time.Hour
	h := newPool(t, cfg, relay.Options{Filters: kind1Filter(t)})
	eventually(t, "backoff grows across EOSE-and-close connections", func() bool {
		return p.connections() >= 8 && h.status(p.url()).BackoffAttempt >= 6
	})
}

// The backoff resets once a connection stayed up for StableAfter (on the
// pool's clock), and only then.
func TestReconnectBackoffResetAfterStableConnection(t *testing.T) {
	var offset atomic.Int64 // fake clock: real time plus offset
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	var drop atomic.Bool
	drop.Store(true)
	p := newProgrammed(t, func(ctx context.Context, c *websocket.Conn, _ int, env nostr.Envelope) bool {
		if e, ok := env.(*nostr.ReqEnvelope); ok {
			writeJSON(ctx, c, `["EOSE","`+e.SubscriptionID+`"]`)
			return !drop.Load()
		}
		return true
	})
	cfg := fastConfig(p.url())
	cfg.BackoffInitial, cfg.BackoffMax, cfg.StableAfter = time.Millisecond, 4*time.Millisecond, time.Minute
	h := newPool(t, cfg, relay.Options{Filters: kind1Filter(t), Now: now})
	eventually(t, "backoff grows", func() bool { return h.status(p.url()).BackoffAttempt >= 3 })
	drop.Store(false)
	eventually(t, "a connection that stays", func() bool {
		st := h.status(p.url())
		return st.Connected && st.EOSESeen
	})
	before := h.status(p.url()).BackoffAttempt
	if before < 3 {
		t.Fatalf("BackoffAttempt = %d while connected, want the earlier count kept (>= 3)", before)
	}
	offset.Add(int64(cfg.StableAfter + time.Second))
	p.dropAll()
	eventually(t, "backoff reset after a stable connection", func() bool { return h.status(p.url()).BackoffAttempt == 1 })
}

// publishCounter is relay_publish_total{relay,outcome,reason} as a gauge
// holding its value (0 when absent); reason "" sums every reason.
func (h *harness) publishCounter(relayURL, outcome, reason string) prometheus.Collector {
	h.t.Helper()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	want := map[string]string{"relay": relayURL, "outcome": outcome, "reason": reason}
	if reason == "" {
		delete(want, "reason")
	}
	for _, mf := range mfs {
		if mf.GetName() != "relay_publish_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := 0
			for _, lp := range m.GetLabel() {
				if want[lp.GetName()] == lp.GetValue() {
					match++
				}
			}
			if match == len(want) {
				g.Add(m.GetCounter().GetValue())
			}
		}
	}
	return g
}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		if r == '"' || r == '\\' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String()
}

// TestAuthThroughDialAddr: reached through another address (a tunnel), the
// pool signs AUTH for the canonical relay URL, which a relay that checks
// the relay tag against its own public URL (strfry's serviceUrl) accepts;
// signing the dialled address is refused ("incorrect or missing relay
// tag"). Reads and writes then work, labelled with the canonical URL.
func TestAuthThroughDialAddr(t *testing.T) {
	const canonical = "wss://relay-a.invalid"
	for _, kind := range []relaytest.Kind{relaytest.StrfryEmulated, relaytest.NostrRelay} {
		t.Run(string(kind), func(t *testing.T) {
			r := relaytest.StartKind(t, kind, relaytest.KindOptions{RequireAuth: true, ServiceURL: canonical})
			cfg := fastConfig(canonical)
			cfg.DialAddrs = map[string]string{canonical: r.URL()}
			h := newPool(t, cfg, relay.Options{Filters: kind1Filter(t), SecretKey: agentKey})
			h.waitEOSE(canonical)
			if st := h.status(canonical); !st.Authenticated || st.ClosedPermanently {
				t.Fatalf("Status(%s) = %+v, want authenticated", canonical, st)
			}
			ev := signed(t, 1, "through a tunnel", time.Now())
			if res := h.pool.Publish(context.Background(), ev); len(res.Accepted) != 1 || res.Accepted[0] != canonical {
				t.Fatalf("Publish() = %+v, want accepted by %s", res, canonical)
			}
			h.waitEvent(canonical, ev.ID)
		})
	}
}

// @nostr-relay/core answers a filter it saw within the last second from
// that earlier result (filterResultCacheTtl). A query right after a publish
// must still see the event: a claim read that missed a rival's claim could
// let two standbys start the same workload.
func TestQueryNotAnsweredFromRelayCache(t *testing.T) {
	r := relaytest.StartKind(t, relaytest.NostrRelay, relaytest.KindOptions{})
	h := newPool(t, fastConfig(r.URL()), relay.Options{})
	ev := signed(t, 38386, "claim", time.Now())
	ev.Tags = nostr.Tags{{"d", "paygress:promoted:v1:w-cache"}}
	if err := ev.Sign(authorKey); err != nil {
		t.Fatal(err)
	}
	f := nostr.Filter{Kinds: []int{38386}, Tags: nostr.TagMap{"d": {"paygress:promoted:v1:w-cache"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if q := h.pool.Query(ctx, f); !q[0].Complete() || len(q[0].Events) != 0 {
		t.Fatalf("Query() before the claim = %+v, want complete and empty", q[0])
	}
	if res := h.pool.Publish(ctx, ev); res.AcceptedCount() != 1 {
		t.Fatalf("Publish() = %+v, want accepted", res)
	}
	if q := h.pool.Query(ctx, f); !q[0].Complete() || len(q[0].Events) != 1 {
		t.Fatalf("Query() right after the claim = %d events (complete %v), want the claim, not a cached empty result", len(q[0].Events), q[0].Complete())
	}
}
