package agent

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/internal/logcapture"
	"provideragent/internal/relaytest"
	"provideragent/lease"
	"provideragent/relay"
)

// publishRecord is one publish made through a recordingPool: to every
// relay (Publish), or to the one relay named (PublishTo).
type publishRecord struct {
	at, done time.Time
	relay    string // PublishTo's relay; "" for Publish
	ev       *nostr.Event
	res      relay.PublishResult
}

// recordingPool is a real RelayPool that also records every publish and
// the relays' answers.
type recordingPool struct {
	RelayPool
	mu   sync.Mutex
	recs []publishRecord
}

func (p *recordingPool) Publish(ctx context.Context, ev *nostr.Event) relay.PublishResult {
	res := p.RelayPool.Publish(ctx, ev)
	p.mu.Lock()
	p.recs = append(p.recs, publishRecord{at: time.Now(), ev: ev, res: res})
	p.mu.Unlock()
	return res
}

func (p *recordingPool) PublishQuorum(ctx context.Context, ev *nostr.Event, need int) relay.PublishResult {
	res := p.RelayPool.PublishQuorum(ctx, ev, need)
	p.mu.Lock()
	p.recs = append(p.recs, publishRecord{at: time.Now(), ev: ev, res: res})
	p.mu.Unlock()
	return res
}

func (p *recordingPool) PublishTo(ctx context.Context, url string, f relay.Frame) relay.RelayOutcome {
	at := time.Now()
	o := p.RelayPool.PublishTo(ctx, url, f)
	ev := f.Event
	res := relay.PublishResult{EventID: ev.ID, All: []relay.RelayOutcome{o}}
	if o.Outcome == relay.OutcomeAccepted {
		res.Accepted = []string{url}
	}
	p.mu.Lock()
	p.recs = append(p.recs, publishRecord{at: at, done: time.Now(), relay: url, ev: ev, res: res})
	p.mu.Unlock()
	return o
}

// acceptedBy returns the relays that accepted the event id, over every
// publish of it.
func (p *recordingPool) acceptedBy(id string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, r := range p.recs {
		if r.ev.ID == id {
			out = append(out, r.res.Accepted...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// to returns the publishes of kind made to the one relay url, in the
// order they started.
func (p *recordingPool) to(url string, kind int) []publishRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []publishRecord
	for _, r := range p.recs {
		if r.relay == url && r.ev.Kind == kind {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b publishRecord) int { return a.at.Compare(b.at) })
	return out
}

// last returns the latest publish of kind started after since, if any.
func (p *recordingPool) last(kind int, since time.Time) (publishRecord, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.recs) - 1; i >= 0; i-- {
		r := p.recs[i]
		if r.ev.Kind == kind && r.ev.CreatedAt.Time().After(since) {
			return r, true
		}
	}
	return publishRecord{}, false
}

// TestHeartbeatsListLivePairs: over three real relays, the agent publishes
// both heartbeat kinds (stored 38384 and ephemeral 20384), and both list
// exactly the (workload, epoch) pairs it holds Live, with their epochs,
// and not a workload it only stands by for. The relays accept the stored
// kind.
func TestHeartbeatsListLivePairs(t *testing.T) {
	t.Parallel()
	_, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	// The standby of w3 never sees its primary: keep it a standby for the
	// whole test.
	lcfg.TakeoverAfter = 10 * time.Minute
	rec := &recordingPool{}
	ta := startAgent(t, agentOpts{name: "hb", lcfg: lcfg, wrapPool: func(p RelayPool) RelayPool {
		rec.RelayPool = p
		return rec
	}})
	other := newTestKeys(t)
	ctx := context.Background()
	w2 := soloSpec("w2", ta.pub)
	w2.Epoch = 4
	ta.a.Track(ctx, soloSpec("w1", ta.pub))
	ta.a.Track(ctx, w2)
	ta.a.Track(ctx, warmSpec("w3", other.PublicKey(), ta.pub, urls))
	ta.waitState("w1", lease.StateLive, 1, 15*time.Second)
	ta.waitState("w2", lease.StateLive, 4, 15*time.Second)
	// From the events, as for w1 and w2: /status is refreshed a moment later.
	ta.waitState("w3", lease.StateStandby, 1, 15*time.Second)

	// Heartbeats made (created_at, whole seconds) after both went Live.
	since := time.Now().Add(time.Second)
	want := []string{"w1@1", "w2@4"}
	for _, tc := range []struct {
		kind      int
		ephemeral bool
	}{{heartbeat.KindHeartbeat, false}, {heartbeat.KindHeartbeatEphemeral, true}} {
		var r publishRecord
		waitFor(t, 10*time.Second, fmt.Sprintf("a kind %d heartbeat after %v", tc.kind, since), func() bool {
			var ok bool
			r, ok = rec.last(tc.kind, since)
			return ok
		})
		hb, err := heartbeat.DecodeHeartbeat(r.ev)
		if err != nil {
			t.Fatalf("DecodeHeartbeat(kind %d) = %v, want nil", tc.kind, err)
		}
		var got []string
		for _, w := range hb.Workloads {
			got = append(got, fmt.Sprintf("%s@%d", w.ID, w.Epoch))
		}
		slices.Sort(got)
		if hb.Ephemeral != tc.ephemeral || hb.Provider != ta.pub || !hb.ListsWorkloads || !slices.Equal(got, want) {
			t.Errorf("heartbeat kind %d = ephemeral %v, provider %s, lists %v %v, want ephemeral %v, provider %s, lists %v",
				tc.kind, hb.Ephemeral, hb.Provider, hb.ListsWorkloads, got, tc.ephemeral, ta.pub, want)
		}
		// Wire form: provider_npub is our hex key, as Paygress
		// writes its own, and the NIP-40 expiration is the one heartbeat
		// TTL, Paygress's 300 s live window (stale + max_skew is shorter
		// here).
		if hb.ProviderNpub != ta.pub {
			t.Errorf("heartbeat kind %d provider_npub = %q, want the hex key %s", tc.kind, hb.ProviderNpub, ta.pub)
		}
		if got := hb.Expiration.Sub(hb.CreatedAt); got != 300*time.Second {
			t.Errorf("heartbeat kind %d expiration = created_at + %v, want + 5m0s", tc.kind, got)
		}
		if !tc.ephemeral {
			waitFor(t, 5*time.Second, fmt.Sprintf("stored heartbeat %s accepted by %d relays", r.ev.ID, lcfg.M), func() bool {
				return len(rec.acceptedBy(r.ev.ID)) >= lcfg.M
			})
		}
	}
}

// Every relay takes our beats one at a time: a relay slow to
// answer (every OK 1.5 s late, beats every second) delays no other relay's
// beats, is never sent a beat while it still answers the one before, and
// the beats built meanwhile replace each other, counted in
// agent_heartbeats_superseded_total.
func TestSlowRelayTakesOneBeatAtATime(t *testing.T) {
	t.Parallel()
	rs := []*relaytest.Relay{relaytest.Start(t), relaytest.Start(t), relaytest.Start(t, "--write-delay", "1500ms")}
	urls := []string{rs[0].URL(), rs[1].URL(), rs[2].URL()}
	lcfg := lease.DemoConfig(urls)
	rec := &recordingPool{}
	ta := startAgent(t, agentOpts{name: "slow-relay", lcfg: lcfg, wrapPool: func(p RelayPool) RelayPool {
		rec.RelayPool = p
		return rec
	}})
	ta.a.Track(context.Background(), soloSpec("w1", ta.pub))
	fast, slow := urls[0], urls[2]
	waitFor(t, 30*time.Second, "8 beats published to a fast relay", func() bool {
		return len(rec.to(fast, heartbeat.KindHeartbeat)) >= 8
	})
	beats := rec.to(slow, heartbeat.KindHeartbeat)
	for i := 1; i < len(beats); i++ {
		if beats[i].at.Before(beats[i-1].done) {
			t.Fatalf("beat %d sent to the slow relay at %v, before it answered beat %d (at %v)",
				i, beats[i].at.Format(time.StampMilli), i-1, beats[i-1].done.Format(time.StampMilli))
		}
	}
	for _, b := range beats {
		if b.done.Sub(b.at) < time.Second || len(b.res.Accepted) != 1 {
			t.Fatalf("slow relay answered a beat after %v (accepted %v), want accepted after its 1.5 s delay", b.done.Sub(b.at), b.res.Accepted)
		}
	}
	// Coupled to the slow relay, beats would start at least 1.5 s apart.
	fastBeats := rec.to(fast, heartbeat.KindHeartbeat)
	if n := len(fastBeats); fastBeats[n-1].at.Sub(fastBeats[0].at) > time.Duration(n-1)*1250*time.Millisecond {
		t.Errorf("a fast relay was sent %d beats in %v, want one a second: delayed by the slow relay?", n, fastBeats[n-1].at.Sub(fastBeats[0].at))
	}
	if v := counterWith(t, ta.reg, "agent_heartbeats_superseded_total", "relay", slow); v < 1 {
		t.Errorf("agent_heartbeats_superseded_total{relay=slow} = %v, want >= 1", v)
	}
	if v := counterWith(t, ta.reg, "agent_heartbeats_superseded_total", "relay", fast); v != 0 {
		t.Errorf("agent_heartbeats_superseded_total{relay=fast} = %v, want 0", v)
	}
}

// TestConfigValidateHeartbeatTTL: a configured heartbeat TTL must be at least
// Paygress's live window and at least stale + max_skew (a heartbeat must not
// expire, or be deleted by a relay, while it can still count); 0 means
// exactly that minimum.
func TestConfigValidateHeartbeatTTL(t *testing.T) {
	base := DefaultConfig()
	base.SecretKey = nostr.GeneratePrivateKey()
	base.Lease.Relays = []string{"ws://127.0.0.1:1", "ws://127.0.0.1:2", "ws://127.0.0.1:3"}
	long := base.Lease
	long.Stale, long.HeartbeatInterval = 400*time.Second, 60*time.Second
	long.TakeoverAfter = long.T1 + long.T2 + long.Stale + long.MaxSkew + long.RelayDelay + 2*time.Second
	tests := []struct {
		name  string
		lease lease.Config
		ttl   time.Duration
		ok    bool
	}{
		{"default", base.Lease, 0, true},
		{"live window", base.Lease, 300 * time.Second, true},
		{"a week", base.Lease, 168 * time.Hour, true},
		{"below the live window", base.Lease, 299 * time.Second, false},
		{"old default 2 x stale", base.Lease, 2 * base.Lease.Stale, true},
		{"negative", base.Lease, -time.Second, false},
		{"long stale, default", long, 0, true},
		{"long stale, live window", long, 300 * time.Second, false},
		{"long stale, stale alone", long, 400 * time.Second, false},
		{"long stale, stale + max_skew", long, 430 * time.Second, true},
	}
	for _, tt := range tests {
		c := base
		c.Lease, c.HeartbeatTTL = tt.lease, tt.ttl
		err := c.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: Validate(heartbeat_ttl %v, stale %v) = %v, want ok %v", tt.name, tt.ttl, tt.lease.Stale, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "heartbeat_ttl = "+tt.ttl.String()) {
			t.Errorf("%s: Validate error %q does not name heartbeat_ttl = %v", tt.name, err, tt.ttl)
		}
	}
}

// Every event of our beats fits what each relay advertises in NIP-11
// over three real relays enforcing their limits: one
// with max_message_length 20,000, one with max_content_length 8,000, one
// with max_event_tags 4, fewer than a heartbeat's tags, which the agent
// cannot meet (the tags are Paygress's): it says so in a WARN line naming
// the relay. With 1,000 workloads listed (about 27 KB of list) the first two
// accept every event of a whole beat.
func TestBeatsFitEveryRelaysAdvertisedLimits(t *testing.T) {
	t.Parallel()
	rs := []*relaytest.Relay{
		relaytest.Start(t, "--max-message-length", "20000"),
		relaytest.Start(t, "--max-content-length", "8000"),
		relaytest.Start(t, "--max-event-tags", "4"),
	}
	urls := []string{rs[0].URL(), rs[1].URL(), rs[2].URL()}
	logs := logcapture.New(slog.LevelWarn)
	const n = 1000
	a, _, stop := startBulkAgentLogging(t, n, lease.DemoConfig(urls), filepath.Join(t.TempDir(), "limits.db"), slog.New(logs))
	defer stop()
	waitFor(t, 60*time.Second, "1000 workloads Live", func() bool { return liveCount(a) == n })

	qpool := clientPool(t, urls)
	ours := nostr.Filter{Kinds: []int{heartbeat.KindHeartbeat, heartbeat.KindHeartbeatShard}, Authors: []string{a.me.self}}
	var latest map[string][]nostr.Event // relay -> the events of its newest whole beat
	waitFor(t, 30*time.Second, "a beat listing all 1,000 workloads on the first two relays", func() bool {
		latest = map[string][]nostr.Event{}
		for _, q := range qpool.Query(context.Background(), ours) {
			var newest nostr.Timestamp
			for _, ev := range q.Events {
				newest = max(newest, ev.CreatedAt)
			}
			listed := 0
			for _, ev := range q.Events {
				if ev.CreatedAt != newest {
					continue
				}
				hb, err := heartbeat.DecodeHeartbeat(&ev)
				if err != nil {
					t.Fatalf("relay %s serves our heartbeat %s that does not decode: %v", q.Relay, ev.ID, err)
				}
				listed += len(hb.Workloads)
				latest[q.Relay] = append(latest[q.Relay], ev)
			}
			if q.Relay != urls[2] && listed != n {
				return false
			}
		}
		return true
	})
	for _, ev := range latest[urls[0]] {
		if frame, _ := (nostr.EventEnvelope{Event: ev}).MarshalJSON(); len(frame) > 20000 {
			t.Errorf("relay with max_message_length 20,000 holds a heartbeat frame of %d bytes", len(frame))
		}
	}
	if len(latest[urls[1]]) < 4 {
		t.Errorf("a beat of 1,000 workloads in %d events, want at least 4 under max_content_length 8,000 (about 27 KB of list)", len(latest[urls[1]]))
	}
	for _, ev := range latest[urls[1]] {
		if c := utf8.RuneCountInString(ev.Content); c > 8000 {
			t.Errorf("relay with max_content_length 8,000 holds a heartbeat of %d characters", c)
		}
	}
	if len(latest[urls[2]]) != 0 {
		t.Errorf("the relay with max_event_tags 4 holds %d of our heartbeats, want none (they have 5 tags)", len(latest[urls[2]]))
	}
	for _, st := range a.pool.Status() {
		if lr := st.LastRejection; st.URL != urls[2] && lr != nil {
			t.Errorf("relay %s refused %s: %s", st.URL, lr.EventID, lr.Reason)
		}
	}
	warned := logs.Find("relay takes fewer tags per event than a heartbeat has: it will refuse our heartbeats")
	if len(warned) != 1 || warned[0].String("relay") != urls[2] {
		t.Errorf("WARN lines about max_event_tags = %+v, want one naming %s", warned, urls[2])
	}
}
