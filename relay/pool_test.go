package relay_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/internal/relaytest"
	"provideragent/relay"
)

const wait = 15 * time.Second

var (
	agentKey  = strings.Repeat("0a", 32)
	authorKey = strings.Repeat("0b", 32)
)

func pubkey(t *testing.T, sk string) string {
	t.Helper()
	pk, err := nostr.GetPublicKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	return pk
}

func signed(t *testing.T, kind int, content string, at time.Time) nostr.Event {
	t.Helper()
	ev := nostr.Event{Kind: kind, Content: content, CreatedAt: nostr.Timestamp(at.Unix()), Tags: nostr.Tags{{"t", "relaytest"}}}
	if err := ev.Sign(authorKey); err != nil {
		t.Fatalf("sign: %v", err)
	}
	return ev
}

func fastConfig(urls ...string) relay.Config {
	cfg := relay.DefaultConfig()
	cfg.URLs = urls
	cfg.BackoffInitial = 20 * time.Millisecond
	cfg.BackoffMax = 200 * time.Millisecond
	cfg.PingInterval = time.Second
	cfg.PingTimeout = 2 * time.Second
	cfg.PublishTimeout = 5 * time.Second
	return cfg
}

type harness struct {
	t    *testing.T
	pool *relay.Pool
	reg  *prometheus.Registry
	seen []relay.Received // received but not yet matched
	// gaps are the Gap markers received so far, in order (next skips
	// them unless its predicate asks for gaps: nextGap).
	gaps     []relay.Received
	gapsRead int // gaps returned by nextGap
}

func newPool(t *testing.T, cfg relay.Config, opts relay.Options) *harness {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	p, err := relay.New(cfg, opts)
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return &harness{t: t, pool: p, reg: reg}
}

// next returns the next Received matching pred, failing after wait.
func (h *harness) next(pred func(relay.Received) bool) relay.Received {
	h.t.Helper()
	return h.nextOf(pred, false)
}

// nextGap returns the next Gap marker of relayURL not returned before,
// whether next already passed it or it is still to come.
func (h *harness) nextGap(relayURL string) relay.Received {
	h.t.Helper()
	for h.gapsRead < len(h.gaps) {
		g := h.gaps[h.gapsRead]
		h.gapsRead++
		if g.Relay == relayURL {
			return g
		}
	}
	g := h.nextOf(func(r relay.Received) bool { return r.Gap && r.Relay == relayURL }, true)
	h.gapsRead = len(h.gaps)
	return g
}

func (h *harness) nextOf(pred func(relay.Received) bool, gaps bool) relay.Received {
	h.t.Helper()
	for i, r := range h.seen {
		if pred(r) {
			h.seen = append(h.seen[:i], h.seen[i+1:]...)
			return r
		}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case r, ok := <-h.pool.Received():
			if !ok {
				h.t.Fatalf("Received() closed, want more")
			}
			if r.Gap {
				h.gaps = append(h.gaps, r)
				if !gaps {
					continue
				}
			}
			if pred(r) {
				return r
			}
			h.seen = append(h.seen, r)
		case <-timer.C:
			h.t.Fatalf("no matching Received within %v; status %+v", wait, h.pool.Status())
		}
	}
}

// waitConnected waits until every relay of the pool is connected.
func (h *harness) waitConnected() {
	h.t.Helper()
	eventually(h.t, "all connected", func() bool {
		for _, s := range h.pool.Status() {
			if !s.Connected {
				return false
			}
		}
		return true
	})
}

func (h *harness) waitEOSE(urls ...string) {
	h.t.Helper()
	want := make(map[string]bool)
	for _, u := range urls {
		want[u] = true
	}
	for len(want) > 0 {
		r := h.next(func(r relay.Received) bool { return r.EOSE })
		delete(want, r.Relay)
	}
}

func (h *harness) waitEvent(relayURL, id string) relay.Received {
	h.t.Helper()
	return h.next(func(r relay.Received) bool {
		return r.Event != nil && r.Relay == relayURL && r.Event.ID == id
	})
}

func (h *harness) status(u string) relay.Status {
	for _, s := range h.pool.Status() {
		if s.URL == u {
			return s
		}
	}
	h.t.Fatalf("no status for %s", u)
	return relay.Status{}
}

// eventually polls cond (state reached through real sockets, not timers).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v", what, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func kind1Filter(t *testing.T) []nostr.Filter {
	return []nostr.Filter{{Kinds: []int{1}, Authors: []string{pubkey(t, authorKey)}}}
}

func TestPoolSubscribePublishThreeRelays(t *testing.T) {
	rs := []*relaytest.Relay{relaytest.Start(t), relaytest.Start(t), relaytest.Start(t)}
	urls := []string{rs[0].URL(), rs[1].URL(), rs[2].URL()}
	h := newPool(t, fastConfig(urls...), relay.Options{Filters: kind1Filter(t)})
	h.waitEOSE(urls...)

	ev := signed(t, 1, "hello", time.Now())
	res := h.pool.Publish(context.Background(), ev)
	if res.AcceptedCount() != 3 || len(res.All) != 3 {
		t.Fatalf("Publish() = %+v, want 3 accepted", res)
	}
	before := time.Now()
	for _, u := range urls {
		r := h.waitEvent(u, ev.ID)
		if r.At.IsZero() || r.At.After(time.Now()) || r.At.Before(before.Add(-time.Minute)) {
			t.Errorf("Received(%s).At = %v, want a local receive time", u, r.At)
		}
	}
	if got := h.pool.Synced(); len(got) != 3 {
		t.Errorf("Synced() = %v, want all 3 relays", got)
	}
	for _, s := range h.pool.Status() {
		if !s.Connected || !s.EOSESeen || s.LastMessageAt.IsZero() {
			t.Errorf("Status(%s) = %+v, want connected with EOSE", s.URL, s)
		}
	}
	if got := testutil.ToFloat64(mustGauge(t, h.reg, "relay_connected", urls[0])); got != 1 {
		t.Errorf("relay_connected{%s} = %v, want 1", urls[0], got)
	}
	if n := movedSeries(t, h.reg, "relay_publish_total"); n != 3 {
		t.Errorf("relay_publish_total series above 0 = %d, want 3 (one accepted publish per relay)", n)
	}
}

// movedSeries counts the series of metric name whose value is not 0.
func movedSeries(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetCounter().GetValue() != 0 || m.GetGauge().GetValue() != 0 {
				n++
			}
		}
	}
	return n
}

// mustGauge returns metric name of relayURL as a gauge: the sum of its
// series over every other label (counters are exported at 0 for each
// known label value, so the first series found may not be the one that
// moved).
func mustGauge(t *testing.T, reg *prometheus.Registry, name, relayURL string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "relay" && lp.GetValue() == relayURL {
					found = true
					if m.Gauge != nil {
						sum += m.GetGauge().GetValue()
					} else {
						sum += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	if !found {
		t.Fatalf("metric %s{relay=%s} not found", name, relayURL)
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
	g.Set(sum)
	return g
}

// One relay is killed mid-test and restarted on the same port: the
// supervisor reconnects and resubscribes with since from the cursor.
func TestPoolKillRestartResubscribesWithSince(t *testing.T) {
	rs := []*relaytest.Relay{relaytest.Start(t), relaytest.Start(t), relaytest.Start(t)}
	urls := []string{rs[0].URL(), rs[1].URL(), rs[2].URL()}
	var cursor atomic.Int64
	cursor.Store(time.Now().Add(-time.Hour).Unix())
	h := newPool(t, fastConfig(urls...), relay.Options{
		Filters: kind1Filter(t),
		Since:   func() nostr.Timestamp { return nostr.Timestamp(cursor.Load()) },
	})
	h.waitEOSE(urls...)

	rs[0].Kill()
	eventually(t, "relay 0 disconnected", func() bool { return !h.status(urls[0]).Connected })

	// Publishing during the outage: 2 acceptances, the dead relay times out.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	res := h.pool.Publish(ctx, signed(t, 1, "during outage", time.Now()))
	cancel()
	if res.AcceptedCount() != 2 || len(res.TimedOut) != 1 || res.TimedOut[0].Relay != urls[0] {
		t.Fatalf("Publish() during outage = %+v, want 2 accepted and %s timed out", res, urls[0])
	}

	// The restarted relay holds one event older than the cursor and one newer.
	now := time.Now()
	cursor.Store(now.Add(-10 * time.Second).Unix())
	rs[0].Restart()
	old := signed(t, 1, "before cursor", now.Add(-time.Minute))
	fresh := signed(t, 1, "after cursor", now)
	c := relaytest.Dial(t, rs[0].URL())
	for _, ev := range []nostr.Event{old, fresh} {
		c.Send(nostr.EventEnvelope{Event: ev})
		if env, err := c.Read(wait); err != nil || !env.(*nostr.OKEnvelope).OK {
			t.Fatalf("seed relay: %v %v", env, err)
		}
	}
	var got []string
	for {
		r := h.next(func(r relay.Received) bool { return r.Relay == urls[0] })
		if r.EOSE {
			break
		}
		got = append(got, r.Event.ID)
	}
	// The pool may have resubscribed before the seeding: then fresh arrives live.
	if len(got) == 0 {
		got = append(got, h.waitEvent(urls[0], fresh.ID).Event.ID)
	}
	for _, id := range got {
		if id == old.ID {
			t.Fatalf("resubscription delivered the event before the cursor; since not applied")
		}
	}
	st := h.status(urls[0])
	if !st.Connected || st.Reconnects == 0 {
		t.Fatalf("Status after restart = %+v, want connected with reconnects > 0", st)
	}
	if v := testutil.ToFloat64(mustGauge(t, h.reg, "relay_reconnects_total", urls[0])); v < 1 {
		t.Errorf("relay_reconnects_total{%s} = %v, want >= 1", urls[0], v)
	}
}

func TestPoolPublishRejectedStillReachesQuorum(t *testing.T) {
	rs := []*relaytest.Relay{relaytest.Start(t), relaytest.Start(t), relaytest.Start(t, "--reject-writes")}
	urls := []string{rs[0].URL(), rs[1].URL(), rs[2].URL()}
	h := newPool(t, fastConfig(urls...), relay.Options{})
	res := h.pool.Publish(context.Background(), signed(t, 1, "x", time.Now()))
	if res.AcceptedCount() != 2 {
		t.Fatalf("Publish() accepted = %v, want 2 (M=2 reached)", res.Accepted)
	}
	if len(res.Rejected) != 1 || res.Rejected[0].Relay != urls[2] || res.Rejected[0].Prefix != "blocked" {
		t.Fatalf("Publish() rejected = %+v, want %s with prefix blocked", res.Rejected, urls[2])
	}
}

// PublishQuorum stops waiting once need relays accepted: a relay that holds
// its OK (as a dead or slow relay would) is reported not awaited, and the
// publish returns long before the caller's deadline.
func TestPoolPublishQuorumDoesNotWaitForSlowRelay(t *testing.T) {
	rs := []*relaytest.Relay{relaytest.Start(t), relaytest.Start(t), relaytest.Start(t, "--hold-ok")}
	urls := []string{rs[0].URL(), rs[1].URL(), rs[2].URL()}
	h := newPool(t, fastConfig(urls...), relay.Options{})
	h.waitConnected()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res := h.pool.PublishQuorum(ctx, signed(t, 1, "x", time.Now()), 2)
	if ctx.Err() != nil {
		t.Fatalf("PublishQuorum(need 2) waited out the caller's deadline")
	}
	if res.AcceptedCount() != 2 || len(res.TimedOut) != 0 {
		t.Fatalf("PublishQuorum(need 2) = accepted %v, timed out %+v, want 2 accepted and none timed out", res.Accepted, res.TimedOut)
	}
	if o := res.All[2]; o.Relay != urls[2] || o.Outcome != relay.OutcomeNotAwaited {
		t.Fatalf("PublishQuorum(need 2) holding relay = %+v, want %s not awaited", o, urls[2])
	}
}

// PublishTo publishes on the one relay named: a relay that holds its OK
// delays no publish to another, the event reaches only the relay named,
// outcomes are counted as Publish counts them, and an url the pool does
// not have fails at once.
func TestPoolPublishToOneRelay(t *testing.T) {
	rs := []*relaytest.Relay{relaytest.Start(t), relaytest.Start(t, "--hold-ok")}
	urls := []string{rs[0].URL(), rs[1].URL()}
	h := newPool(t, fastConfig(urls...), relay.Options{})
	h.waitConnected()
	held := make(chan relay.RelayOutcome, 1)
	hctx, hcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer hcancel()
	heldEv := signed(t, 1, "held", time.Now())
	go func() { held <- h.pool.PublishTo(hctx, urls[1], frame(t, heldEv)) }()
	ev := signed(t, 1, "one relay", time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if o := h.pool.PublishTo(ctx, urls[0], frame(t, ev)); o.Outcome != relay.OutcomeAccepted || o.Relay != urls[0] {
		t.Fatalf("PublishTo(%s) = %+v, want accepted there while the other relay holds its OK", urls[0], o)
	}
	if o := <-held; o.Outcome != relay.OutcomeTimedOut {
		t.Fatalf("PublishTo(holding relay) = %+v, want timed out", o)
	}
	for _, q := range h.pool.Query(context.Background(), nostr.Filter{IDs: []string{ev.ID}}) {
		if want := q.Relay == urls[0]; !q.Complete() || (len(q.Events) == 1) != want {
			t.Fatalf("query on %s = %d events (complete %v), want the event only on %s", q.Relay, len(q.Events), q.Complete(), urls[0])
		}
	}
	if v := testutil.ToFloat64(h.publishCounter(urls[0], "accepted", "")); v != 1 {
		t.Errorf("relay_publish_total{%s,accepted} = %v, want 1", urls[0], v)
	}
	if v := testutil.ToFloat64(h.publishCounter(urls[1], "timed_out", "")); v != 1 {
		t.Errorf("relay_publish_total{%s,timed_out} = %v, want 1", urls[1], v)
	}
	if o := h.pool.PublishTo(ctx, "ws://127.0.0.1:1", frame(t, ev)); o.Outcome != relay.OutcomeFailed {
		t.Fatalf("PublishTo(unknown relay) = %+v, want failed", o)
	}
}

// frame is ev's relay.Frame.
func frame(t *testing.T, ev nostr.Event) relay.Frame {
	t.Helper()
	f, err := relay.NewFrame(&ev)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A relay that holds the OK and is then killed is never counted as accepted.
func TestPoolPublishRelayKilledBeforeOK(t *testing.T) {
	rs := []*relaytest.Relay{relaytest.Start(t), relaytest.Start(t), relaytest.Start(t, "--hold-ok")}
	urls := []string{rs[0].URL(), rs[1].URL(), rs[2].URL()}
	h := newPool(t, fastConfig(urls...), relay.Options{})
	h.waitConnected()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	done := make(chan relay.PublishResult, 1)
	go func() { done <- h.pool.Publish(ctx, signed(t, 1, "x", time.Now())) }()
	eventually(t, "event held by the relay", func() bool { return rs[2].Stats().Held == 1 })
	rs[2].Kill()
	res := <-done
	if res.AcceptedCount() != 2 {
		t.Fatalf("Publish() accepted = %v, want exactly the 2 healthy relays", res.Accepted)
	}
	if len(res.TimedOut) != 1 || res.TimedOut[0].Relay != urls[2] {
		t.Fatalf("Publish() timed out = %+v, want %s", res.TimedOut, urls[2])
	}
	if !strings.Contains(res.TimedOut[0].Reason, "lost") && !strings.Contains(res.TimedOut[0].Reason, "not connected") {
		t.Errorf("timed-out reason = %q, want connection lost / not connected", res.TimedOut[0].Reason)
	}
}

func TestPoolClosedTransientResubscribes(t *testing.T) {
	r := relaytest.Start(t, "--send-closed", "error: shutting down", "--closed-times", "2")
	h := newPool(t, fastConfig(r.URL()), relay.Options{Filters: kind1Filter(t)})
	h.waitEOSE(r.URL())
	if st := h.status(r.URL()); st.ClosedPermanently {
		t.Fatalf("Status = %+v, want not closed permanently", st)
	}
	if got := r.Stats().Closed; got != 2 {
		t.Fatalf("relay closed %d subscriptions, want 2", got)
	}
	ev := signed(t, 1, "after resubscribe", time.Now())
	if res := h.pool.Publish(context.Background(), ev); res.AcceptedCount() != 1 {
		t.Fatalf("Publish() = %+v, want accepted", res)
	}
	h.waitEvent(r.URL(), ev.ID)
}

// A relay that sends CLOSED after EOSE (mid-stream): the supervisor
// resubscribes and live events flow again.
func TestPoolClosedMidStreamResubscribes(t *testing.T) {
	r := relaytest.Start(t, "--send-closed", "error: rotating", "--closed-after", "50ms", "--closed-times", "1")
	h := newPool(t, fastConfig(r.URL()), relay.Options{Filters: kind1Filter(t)})
	h.waitEOSE(r.URL())
	h.waitEOSE(r.URL()) // the second subscription's EOSE
	ev := signed(t, 1, "live", time.Now())
	h.pool.Publish(context.Background(), ev)
	got := h.waitEvent(r.URL(), ev.ID)
	// Exactly once: the relay still feeds the closed subscription id, which
	// the pool must ignore.
	for _, r := range h.seen {
		if r.Event != nil && r.Event.ID == got.Event.ID {
			t.Fatalf("event delivered twice (closed subscription not ignored)")
		}
	}
	select {
	case dup := <-h.pool.Received():
		if dup.Event != nil && dup.Event.ID == got.Event.ID {
			t.Fatalf("event delivered twice (closed subscription not ignored)")
		}
	case <-time.After(200 * time.Millisecond):
	}
}

func TestPoolClosedPermanent(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		key    string
		prefix string
	}{
		{"blocked", []string{"--send-closed", "blocked: no reads for you"}, "", "blocked:"},
		{"auth without key", []string{"--require-auth"}, "", "auth-required:"},
		{"auth not allowed", []string{"--require-auth", "--auth-allow", pubkey(t, authorKey)}, agentKey, "restricted:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := relaytest.Start(t, tt.args...)
			h := newPool(t, fastConfig(r.URL()), relay.Options{Filters: kind1Filter(t), SecretKey: tt.key})
			eventually(t, "closed permanently", func() bool { return h.status(r.URL()).ClosedPermanently })
			st := h.status(r.URL())
			if !strings.HasPrefix(st.ClosedReason, tt.prefix) || !st.Connected || st.EOSESeen {
				t.Fatalf("Status = %+v, want connected, closed permanently with %s", st, tt.prefix)
			}
			if v := testutil.ToFloat64(mustGauge(t, h.reg, "relay_subscription_closed_total", r.URL())); v < 1 {
				t.Errorf("relay_subscription_closed_total = %v, want >= 1", v)
			}
		})
	}
}

func TestPoolAuth(t *testing.T) {
	r := relaytest.Start(t, "--require-auth", "--auth-allow", pubkey(t, agentKey))
	h := newPool(t, fastConfig(r.URL()), relay.Options{Filters: kind1Filter(t), SecretKey: agentKey})
	h.waitEOSE(r.URL())
	if st := h.status(r.URL()); !st.Authenticated || st.ClosedPermanently {
		t.Fatalf("Status = %+v, want authenticated", st)
	}
	ev := signed(t, 1, "authed write", time.Now())
	if res := h.pool.Publish(context.Background(), ev); res.AcceptedCount() != 1 {
		t.Fatalf("Publish() = %+v, want accepted after AUTH", res)
	}
	h.waitEvent(r.URL(), ev.ID)
	q := h.pool.Query(context.Background(), nostr.Filter{IDs: []string{ev.ID}})
	if !q[0].Complete() || len(q[0].Events) != 1 {
		t.Fatalf("Query() = %+v, want the event and EOSE", q[0])
	}
}

func TestPoolMutedEphemeral(t *testing.T) {
	r := relaytest.Start(t)
	h := newPool(t, fastConfig(r.URL()), relay.Options{})
	res := h.pool.Publish(context.Background(), signed(t, 20384, "hb", time.Now()))
	if len(res.Muted) != 1 || res.AcceptedCount() != 0 || res.Muted[0].Prefix != "mute" {
		t.Fatalf("Publish(ephemeral, no listener) = %+v, want muted", res)
	}
}

func TestPoolQuery(t *testing.T) {
	rs := []*relaytest.Relay{relaytest.Start(t), relaytest.Start(t, "--max-limit", "2"), relaytest.Start(t)}
	urls := []string{rs[0].URL(), rs[1].URL(), rs[2].URL()}
	h := newPool(t, fastConfig(urls...), relay.Options{})
	base := time.Now().Add(-time.Minute)
	for i := 0; i < 3; i++ {
		if res := h.pool.Publish(context.Background(), signed(t, 1, "q", base.Add(time.Duration(i)*time.Second))); res.AcceptedCount() != 3 {
			t.Fatalf("Publish() = %+v, want 3 accepted", res)
		}
	}
	eventually(t, "limits fetched", func() bool { return h.status(urls[1]).Limits.MaxLimit == 2 })
	rs[2].Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	// The relay that cuts at 2 (its max_limit, below the 10 asked for) is
	// read page by page: all 3 come back (reads page through
	// relay limits).
	got := h.pool.Query(ctx, nostr.Filter{Kinds: []int{1}, Limit: 10})
	want := []int{3, 3}
	for i, n := range want {
		if !got[i].Complete() || len(got[i].Events) != n {
			t.Errorf("Query()[%s] = %d events, EOSE %v, err %v; want %d events and EOSE", urls[i], len(got[i].Events), got[i].EOSE, got[i].Err, n)
		}
	}
	if !errors.Is(got[2].Err, relay.ErrNotConnected) {
		t.Errorf("Query()[killed] err = %v, want ErrNotConnected", got[2].Err)
	}
}

func TestPoolMaxMessageLength(t *testing.T) {
	r := relaytest.Start(t, "--max-message-length", "2048")
	h := newPool(t, fastConfig(r.URL()), relay.Options{})
	eventually(t, "limits fetched", func() bool { return h.status(r.URL()).Limits.MaxMessageLength == 2048 })
	res := h.pool.Publish(context.Background(), signed(t, 1, strings.Repeat("x", 4096), time.Now()))
	if len(res.Failed) != 1 || !strings.Contains(res.Failed[0].Reason, "max_message_length") {
		t.Fatalf("Publish(big) = %+v, want failed by max_message_length", res)
	}
}

// Forged, stale and future-dated copies are delivered as received: the pool
// does not verify (heartbeat/ does), but it keeps per-relay arrival order.
func TestPoolDeliversFaultEventsInOrder(t *testing.T) {
	r := relaytest.Start(t, "--forged", "--future", "1h")
	h := newPool(t, fastConfig(r.URL()), relay.Options{Filters: kind1Filter(t)})
	h.waitEOSE(r.URL())
	ev := signed(t, 1, "real", time.Now())
	h.pool.Publish(context.Background(), ev)
	var got []nostr.Event
	for len(got) < 4 {
		x := h.next(func(x relay.Received) bool { return x.Event != nil })
		got = append(got, *x.Event)
	}
	if got[0].CheckID() || got[3].ID != ev.ID || got[2].CreatedAt != ev.CreatedAt+3600 {
		t.Fatalf("delivery order = %v, want id-mismatch, bad-sig, future, real", got)
	}
}

func TestPoolSetFilters(t *testing.T) {
	r := relaytest.Start(t)
	h := newPool(t, fastConfig(r.URL()), relay.Options{Filters: []nostr.Filter{{Kinds: []int{7}}}})
	h.waitEOSE(r.URL())
	h.pool.SetFilters(kind1Filter(t))
	h.waitEOSE(r.URL())
	ev := signed(t, 1, "now wanted", time.Now())
	h.pool.Publish(context.Background(), ev)
	h.waitEvent(r.URL(), ev.ID)
}

func TestPoolCloseLeavesNoGoroutines(t *testing.T) {
	rs := []*relaytest.Relay{relaytest.Start(t), relaytest.Start(t, "--hold-ok"), relaytest.Start(t, "--require-auth")}
	urls := []string{rs[0].URL(), rs[1].URL(), rs[2].URL()}
	settle := func() int {
		runtime.GC()
		return runtime.NumGoroutine()
	}
	before := settle()
	p, err := relay.New(fastConfig(append(urls, "ws://127.0.0.1:1")...), relay.Options{Filters: kind1Filter(t), SecretKey: agentKey})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "connected", func() bool {
		n := 0
		for _, s := range p.Status() {
			if s.Connected {
				n++
			}
		}
		return n == 3
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	p.Publish(ctx, signed(t, 1, "x", time.Now()))
	cancel()
	if err := p.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	for range p.Received() {
		// Drain what was buffered; the range ends because Close closed it.
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		after := settle()
		if after <= before {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("goroutines after Close = %d, before = %d\n%s", after, before, buf[:n])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// DialAddrs: the pool dials another address (a proxy in the demo) but labels
// everything with the configured URL. The Host header names the canonical
// relay, so khatru (which checks AUTH's relay tag against the Host header
// when it has no ServiceURL) accepts the AUTH signed for the canonical URL.
func TestPoolDialAddrs(t *testing.T) {
	r := relaytest.Start(t, "--require-auth")
	const canonical = "ws://relay-a.invalid:7447"
	cfg := fastConfig(canonical)
	cfg.DialAddrs = map[string]string{canonical: r.URL()}
	h := newPool(t, cfg, relay.Options{Filters: kind1Filter(t), SecretKey: agentKey})
	h.waitEOSE(canonical)
	ev := signed(t, 1, "via dial addr", time.Now())
	if res := h.pool.Publish(context.Background(), ev); len(res.Accepted) != 1 || res.Accepted[0] != canonical {
		t.Fatalf("Publish() = %+v, want accepted by %s", res, canonical)
	}
	h.waitEvent(canonical, ev.ID)
	if st := h.status(canonical); !st.Authenticated {
		t.Fatalf("Status(%s) = %+v, want authenticated", canonical, st)
	}
	bad := fastConfig(canonical)
	bad.DialAddrs = map[string]string{canonical: "http://x"}
	if err := bad.Validate(); !errors.Is(err, relay.ErrInvalidConfig) {
		t.Fatalf("Validate(bad DialAddrs) = %v, want ErrInvalidConfig", err)
	}
}
