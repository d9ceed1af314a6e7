package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/internal/localrelay"
	"provideragent/internal/relaytest"
	"provideragent/internal/sqlitedb"
	"provideragent/lease"
	"provideragent/relay"
)

// TestFailoverOn runs the end-to-end paths that matter over each relay
// implementation (khatru, @nostr-relay/core 0.0.40, the strfry emulation),
// three relays of that kind, every one requiring NIP-42 AUTH:
//   - connect and sync: three agents authenticate and reach EOSE everywhere
//     (the two primaries through tunnels: AUTH must name the canonical URL);
//   - a grant: a trusted issuer publishes both leases through its own
//     authenticated connection and the agents start and stand by;
//   - heartbeats of both kinds (38384, 20384) accepted by all three relays;
//   - cut-off failover with revocation: primary 1 loses relays 0 and 1,
//     fences, and its revocation reaches the standby through relay 2, which
//     runs w1 at epoch 2 only after the old copy stopped;
//   - takeover of a silent primary: primary 2 loses every relay (nothing it
//     sends arrives), evicts itself and stops w2, and the standby takes w2
//     over at epoch 2 after takeover_after.
func TestFailoverOn(t *testing.T) {
	t.Parallel()
	for _, kind := range relaytest.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			failoverOn(t, kind)
		})
	}
}

func failoverOn(t *testing.T, kind relaytest.Kind) {
	rs := make([]*relaytest.Relay, 3)
	urls := make([]string, 3)
	for i := range rs {
		rs[i] = relaytest.StartKind(t, kind, relaytest.KindOptions{RequireAuth: true})
		urls[i] = rs[i].URL()
	}
	lcfg := lease.DemoConfig(urls)
	issuerKey := nostr.GeneratePrivateKey()
	issuer, err := identity.NewKeys(issuerKey)
	if err != nil {
		t.Fatal(err)
	}
	issuers := []string{issuer.PublicKey()}
	cut1, dial1 := cutProxies(t, rs, urls, 2) // primary 1 keeps relay 2
	cut2, dial2 := cutProxies(t, rs, urls, 3) // primary 2 can lose them all
	rec := &recordingPool{}
	p1 := startAgent(t, agentOpts{name: "primary-1", lcfg: lcfg, dial: dial1, issuers: issuers,
		wrapPool: func(p RelayPool) RelayPool { rec.RelayPool = p; return rec }})
	p2 := startAgent(t, agentOpts{name: "primary-2", lcfg: lcfg, dial: dial2, issuers: issuers})
	sb := startAgent(t, agentOpts{name: "standby", lcfg: lcfg, issuers: issuers})
	all := []*testAgent{p1, p2, sb}
	defer func() {
		if t.Failed() {
			for _, ta := range all {
				ta.log.dump(t, ta.a.me.name)
				st, _ := json.Marshal(ta.a.Status().Relays)
				t.Logf("%s relays: %s", ta.a.me.name, st)
			}
		}
	}()

	// Connect and sync over AUTH.
	waitFor(t, 30*time.Second, "every agent authenticated and synced with 3 relays", func() bool {
		for _, ta := range all {
			if eoseCount(ta.a.pool) != 3 {
				return false
			}
		}
		return true
	})

	// A grant per workload, published by the trusted issuer itself.
	ipcfg := relay.DefaultConfig()
	ipcfg.URLs = urls
	ipool, err := relay.New(ipcfg, relay.Options{SecretKey: issuerKey})
	if err != nil {
		t.Fatal(err)
	}
	defer ipool.Close()
	grant := func(id string, primary *testAgent) {
		ev, err := heartbeat.BuildLeaseGrant(issuer, heartbeat.LeaseGrantParams{
			WorkloadID: id, Primary: primary.pub, Standbys: []string{sb.pub}, Relays: urls, Quorum: 2,
			Replication: lease.ReplicationWarmStandby, RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure, MaxAttempts: 3},
			Command: []string{"sh", "-c", "while :; do sleep 1; done"}, At: time.Now(),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if res := ipool.Publish(ctx, *ev); res.AcceptedCount() != 3 {
			t.Fatalf("issuer Publish(grant %s) = %+v, want 3 relays accepting", id, res)
		}
	}
	grant("w1", p1)
	grant("w2", p2)
	p1.waitState("w1", lease.StateLive, 1, 20*time.Second)
	p2.waitState("w2", lease.StateLive, 1, 20*time.Second)
	sb.waitState("w1", lease.StateStandby, 1, 10*time.Second)
	sb.waitState("w2", lease.StateStandby, 1, 10*time.Second)

	// Heartbeats of both kinds, listing w1@1, accepted by every relay.
	live := time.Now()
	for _, k := range []int{heartbeat.KindHeartbeat, heartbeat.KindHeartbeatEphemeral} {
		waitFor(t, 15*time.Second, "primary-1 heartbeat accepted by 3 relays", func() bool {
			r, ok := rec.last(k, live)
			return ok && len(rec.acceptedBy(r.ev.ID)) == 3 && strings.Contains(r.ev.Content, `"w1"`)
		})
	}

	// Cut: primary 1 keeps only relay 2, primary 2 keeps nothing.
	for _, p := range append(cut1, cut2...) {
		p.Cut()
	}
	bound := lcfg.T1 + lcfg.T2 + lcfg.Stale + lcfg.RelayDelay + 2*time.Second
	sb.waitState("w1", lease.StateLive, 2, bound+20*time.Second)
	p1.waitState("w1", lease.StateFenced, 1, 10*time.Second)
	if got := testutil.ToFloat64(sb.a.obs.met.revocations.WithLabelValues("received")); got < 1 {
		t.Fatalf("standby revocations received = %v, want the revocation of w1 through relay 2", got)
	}
	stopBeforeStart(t, p1, sb, "w1")

	// The silent primary: takeover after takeover_after, never two copies.
	sb.waitState("w2", lease.StateLive, 2, lcfg.TakeoverAfter+bound+30*time.Second)
	// Cut off from everything, primary 2 evicted itself (it can hear of
	// epoch 2 only when it is back) and stopped the workload first.
	p2.waitState("w2", lease.StateEvicted, 1, 10*time.Second)
	stopBeforeStart(t, p2, sb, "w2")
	// Live is the lease state; the standby's process starts right after it,
	// on the actuator's goroutine. The primaries' stops came first.
	onlyStandby := func() bool {
		return sb.backend.Running("w1") && sb.backend.Running("w2") && !p1.backend.Running("w1") && !p2.backend.Running("w2")
	}
	if p1.backend.Running("w1") || p2.backend.Running("w2") {
		t.Fatalf("running after the handovers: primary-1 w1 %v, primary-2 w2 %v; want both stopped", p1.backend.Running("w1"), p2.backend.Running("w2"))
	}
	waitFor(t, 15*time.Second, "the standby running w1 and w2, and no primary", onlyStandby)
}

// stopBeforeStart checks that old's stop of id came before neu's start of
// it at epoch 2.
func stopBeforeStart(t *testing.T, old, neu *testAgent, id string) {
	t.Helper()
	stop, ok := old.log.find(func(e Event) bool { return e.Kind == "stop" && e.Workload == id })
	if !ok {
		t.Fatalf("%s: no stop of %s (states %v)", old.a.me.name, id, old.log.states())
	}
	start, ok := neu.log.find(func(e Event) bool {
		return e.Kind == "start" && e.Workload == id && strings.Contains(e.Detail, "epoch 2")
	})
	if !ok || !stop.Time.Before(start.Time) {
		t.Fatalf("%s stop of %s at %v, %s start at %v (found %v): want the stop first", old.a.me.name, id, stop.Time, neu.a.me.name, start.Time, ok)
	}
}

// logBuffer is a concurrency-safe slog destination.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newIngestAgent builds an agent (never run) that trusts issuers and logs
// to the returned buffer, for driving decode directly.
func newIngestAgent(t *testing.T, key string, issuers []string) (*Agent, *logBuffer, *prometheus.Registry) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Lease = lease.DemoConfig(stepRelays)
	cfg.SecretKey = key
	cfg.Listen = ""
	cfg.TrustedIssuers = issuers
	db, err := sqlitedb.Open(context.Background(), filepath.Join(t.TempDir(), "ingest.db"), sqlitedb.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	logs := &logBuffer{}
	reg := prometheus.NewRegistry()
	a, err := New(context.Background(), cfg, Deps{DB: db, Backend: newMemBackend(), Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() { _ = a.out.courier.Close() })
	return a, logs, reg
}

func grantEvent(t *testing.T, k *identity.Keys, id, primary string) *nostr.Event {
	t.Helper()
	ev, err := heartbeat.BuildLeaseGrant(k, heartbeat.LeaseGrantParams{
		WorkloadID: id, Primary: primary, Relays: stepRelays, Quorum: 2, Replication: lease.ReplicationNone,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever}, Command: []string{"true"}, At: time.Now(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func rejectedTotal(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" && lp.GetValue() == reason {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// TestOwnGrantNotCountedAsRejection: a grant this agent published itself
// (operators may sign grants with the agent's key) comes back from every relay; it is
// not a rejection (not counted wrong_signer once per relay).
func TestOwnGrantNotCountedAsRejection(t *testing.T) {
	key := nostr.GeneratePrivateKey()
	a, _, reg := newIngestAgent(t, key, nil)
	self, _ := identity.NewKeys(key)
	ev := grantEvent(t, self, "mine", self.PublicKey())
	for _, r := range stepRelays {
		if _, ok := a.decode(context.Background(), time.Now(), relay.Received{Relay: r, Event: ev}); ok {
			t.Fatalf("decode(own grant) = ok, want it ignored (not a trusted issuer)")
		}
	}
	for _, name := range []string{"agent_events_rejected_total", "heartbeat_events_rejected_total"} {
		if got := rejectedTotal(t, reg, name, string(heartbeat.ReasonWrongSigner)); got != 0 {
			t.Errorf("%s{reason=wrong_signer} = %v after our own grant from 3 relays, want 0", name, got)
		}
	}
}

// TestTrustedIssuerGrantRefusedWarns: a grant from a trusted issuer that
// cannot be used is
// logged at WARN with the reason, once however many relays deliver it; a
// refused grant from anyone else stays at DEBUG.
func TestTrustedIssuerGrantRefusedWarns(t *testing.T) {
	issuerKey, strangerKey := nostr.GeneratePrivateKey(), nostr.GeneratePrivateKey()
	issuer, _ := identity.NewKeys(issuerKey)
	stranger, _ := identity.NewKeys(strangerKey)
	a, logs, _ := newIngestAgent(t, nostr.GeneratePrivateKey(), []string{issuer.PublicKey()})
	broken := func(k *identity.Keys, secret string) *nostr.Event {
		ev := grantEvent(t, k, "w-broken", a.me.self)
		ev.Content = `{"workload_id":"w-broken","quorum":"two"}`
		if err := ev.Sign(secret); err != nil {
			t.Fatal(err)
		}
		return ev
	}
	ev, foreign := broken(issuer, issuerKey), broken(stranger, strangerKey)
	for _, r := range stepRelays {
		for _, e := range []*nostr.Event{ev, foreign} {
			if _, ok := a.decode(context.Background(), time.Now(), relay.Received{Relay: r, Event: e}); ok {
				t.Fatalf("decode(broken grant) = ok, want refused")
			}
		}
	}
	out := logs.String()
	if n := strings.Count(out, "lease grant from a trusted issuer refused"); n != 1 {
		t.Fatalf("WARN lines about the refused grant = %d, want 1 (logs:\n%s)", n, out)
	}
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "reason=") || !strings.Contains(out, ev.ID) {
		t.Fatalf("log = %s, want a WARN with the reason and the event id", out)
	}
	if strings.Contains(out, foreign.ID) {
		t.Fatalf("log = %s, want nothing above DEBUG about a stranger's grant", out)
	}
}

// The fence wording names the relays that refused our heartbeats within
// stale + t1 + t2, and only for a quorum loss.
func TestFenceReasonNamesRefusingRelays(t *testing.T) {
	now := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	relays := []RelayStatus{
		{URL: "ws://b", LastRejection: &RelayRejection{At: now.Add(-2 * time.Second), Kind: heartbeat.KindHeartbeat, Reason: "invalid: event too large: 65792"}},
		{URL: "ws://a", LastRejection: &RelayRejection{At: now.Add(-time.Second), Kind: heartbeat.KindHeartbeatEphemeral, Reason: "blocked: not on the list"}},
		{URL: "ws://c", LastRejection: &RelayRejection{At: now.Add(-time.Second), Kind: heartbeat.KindPromotion, Reason: "blocked: claims"}},
		{URL: "ws://d", LastRejection: &RelayRejection{At: now.Add(-time.Hour), Kind: heartbeat.KindHeartbeat, Reason: "rate-limited: old"}},
		{URL: "ws://e"},
	}
	got := heartbeatRefusals(relays, now.Add(-time.Minute))
	want := "ws://a (blocked: not on the list), ws://b (invalid: event too large: 65792)"
	if got != want {
		t.Fatalf("heartbeatRefusals() = %q, want %q", got, want)
	}
	a := newStepAgent(t, stepOpts{pool: &statusPool{relays: relays}})
	a.cfg.Lease.Stale, a.cfg.Lease.T1, a.cfg.Lease.T2 = 30*time.Second, 20*time.Second, 10*time.Second
	reason := "relay quorum lost at " + now.Add(-time.Second).Format(time.RFC3339)
	if got := a.fenceWording(now)(reason); got != reason+": relays refused our heartbeats: "+want {
		t.Fatalf("fenceReason(%q) = %q", reason, got)
	}
	if got := a.fenceWording(now)("released by operator"); got != "released by operator" {
		t.Fatalf("fenceReason(other) = %q, want it unchanged", got)
	}
}

// A relay that takes shard 0 of our beats but refuses the big shards
// (kind 38389) is named too: it costs the quorum as surely.
func TestFenceReasonNamesShardRefusals(t *testing.T) {
	now := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	relays := []RelayStatus{
		{URL: "ws://a", LastRejection: &RelayRejection{At: now.Add(-time.Second), Kind: heartbeat.KindHeartbeatShard, Reason: "invalid: event too large: 65792"}},
	}
	if got, want := heartbeatRefusals(relays, now.Add(-time.Minute)), "ws://a (invalid: event too large: 65792)"; got != want {
		t.Fatalf("heartbeatRefusals() = %q, want %q", got, want)
	}
}

// statusPool is a RelayPool that only reports a fixed status.
type statusPool struct {
	RelayPool
	relays []RelayStatus
}

func (p *statusPool) Status() []RelayStatus { return p.relays }

// A relay that refuses our heartbeats is shown in /status with its last
// refusal: when, which kind and event, and the relay's words.
func TestStatusShowsARelaysLastRejection(t *testing.T) {
	t.Parallel()
	_, urls := relaytest.StartN(t, 2)
	refusing := relaytest.Start(t, "--reject-writes")
	urls = append(urls, refusing.URL())
	lcfg := lease.DemoConfig(urls)
	ta := startAgent(t, agentOpts{name: "refused", lcfg: lcfg})
	ta.a.Track(context.Background(), soloSpec("w1", ta.pub))
	ta.waitState("w1", lease.StateLive, 1, 15*time.Second)
	var lr *RelayRejection
	waitFor(t, 10*time.Second, "the refusing relay's last rejection in /status", func() bool {
		for _, r := range ta.a.Status().Relays {
			if r.URL == refusing.URL() && r.LastRejection != nil {
				lr = r.LastRejection
				return true
			}
		}
		return false
	})
	if !heartbeat.IsHeartbeatKind(lr.Kind) || lr.EventID == "" || lr.At.IsZero() || lr.Outcome != "rejected" ||
		lr.Reason != localrelay.DefaultRejectReason {
		t.Fatalf("last_rejection = %+v, want a heartbeat rejected with %q", lr, localrelay.DefaultRejectReason)
	}
	for _, r := range ta.a.Status().Relays {
		if r.URL != refusing.URL() && r.LastRejection != nil {
			t.Fatalf("relay %s shows last_rejection %+v, want none: it accepts everything", r.URL, r.LastRejection)
		}
	}
}

// TestStatusShowsEachRelaysWatch: /status, over real HTTP, shows per
// relay the stretch its live stream counts as evidence of a holder's
// silence: watched since its catch-up, shown up to the newest own beat
// that came back on it. A stalled link (bytes held, nothing closed) and a
// cut one show nothing past what came through before; the reconnect
// watches the relay anew from its new catch-up.
func TestStatusShowsEachRelaysWatch(t *testing.T) {
	t.Parallel()
	rs, urls := relaytest.StartN(t, 3)
	proxies, dial := cutProxies(t, rs, urls, 1)
	lcfg := lease.DemoConfig(urls)
	ta := startAgent(t, agentOpts{name: "watcher", lcfg: lcfg, dial: dial})
	ta.a.Track(context.Background(), soloSpec("w1", ta.pub))
	base := "http://" + ta.a.Addr()
	relays := func() map[string]RelayStatus {
		var st Status
		getJSON(t, base+"/status", &st)
		out := map[string]RelayStatus{}
		for _, r := range st.Relays {
			out[r.URL] = r
		}
		return out
	}
	stalled, other := urls[0], urls[1]
	waitFor(t, 15*time.Second, "every relay watched with silence shown", func() bool {
		rs := relays()
		for _, u := range urls {
			if r := rs[u]; r.WatchedSince.IsZero() || !r.SilenceShownUntil.After(r.WatchedSince) {
				return false
			}
		}
		return true
	})

	proxies[0].Hold()
	heldAt := time.Now()
	time.Sleep(3 * lcfg.HeartbeatInterval)
	waitFor(t, 10*time.Second, "the other relays showing silence past the stall", func() bool {
		return relays()[other].SilenceShownUntil.After(heldAt)
	})
	got := relays()[stalled]
	proxies[0].Release()
	if got.WatchedSince.IsZero() {
		t.Fatalf("stalled relay's watched_since is zero after a %v stall: a stall is no gap the agent can see", time.Since(heldAt))
	}
	// A beat created before the stall may come back after it: shown until
	// is its created_at less relay_delay, never past the stall.
	if got.SilenceShownUntil.After(heldAt) {
		t.Fatalf("stalled relay's silence_shown_until = %v, past the stall at %v: nothing came through it since", got.SilenceShownUntil, heldAt)
	}

	proxies[0].Cut()
	cutAt := time.Now()
	time.Sleep(3 * lcfg.HeartbeatInterval)
	if r := relays()[stalled]; r.SilenceShownUntil.After(cutAt) {
		t.Fatalf("cut relay's silence_shown_until = %v, past the cut at %v", r.SilenceShownUntil, cutAt)
	}
	if err := proxies[0].Restore(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the cut relay watched anew after its reconnect", func() bool {
		r := relays()[stalled]
		return r.WatchedSince.After(cutAt) && r.SilenceShownUntil.After(r.WatchedSince)
	})
}
