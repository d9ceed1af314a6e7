package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/backend"
	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/internal/cutproxy"
	"provideragent/internal/relaytest"
	"provideragent/internal/sqlitedb"
	"provideragent/lease"
	"provideragent/uploader"
)

// eventLog records an agent's timeline events.
type eventLog struct {
	mu  sync.Mutex
	evs []Event
}

func (l *eventLog) add(e Event) {
	l.mu.Lock()
	l.evs = append(l.evs, e)
	l.mu.Unlock()
}

func (l *eventLog) find(pred func(Event) bool) (Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.evs {
		if pred(e) {
			return e, true
		}
	}
	return Event{}, false
}

func (l *eventLog) snapshot() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.evs...)
}

func (l *eventLog) dump(t testing.TB, who string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.evs {
		t.Logf("%s: %s %s %s", who, e.Kind, e.Workload, e.Detail)
	}
}

func (l *eventLog) states() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.evs {
		if e.Kind == "state" {
			out = append(out, fmt.Sprintf("%s@%d", e.State, e.Epoch))
		}
	}
	return out
}

type testAgent struct {
	t       testing.TB
	a       *Agent
	key     string
	pub     string
	dbPath  string
	log     *eventLog
	backend backend.Backend
	proc    *backend.Process
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	done    chan error
}

type agentOpts struct {
	name    string
	key     string // "" generates one
	dbPath  string // "" uses a new file in t.TempDir()
	lcfg    lease.Config
	dial    map[string]string
	issuers []string
	// wrapPool, when set, replaces the agent's relay pool with
	// wrapPool(pool) before Run (to record what the agent publishes).
	wrapPool func(RelayPool) RelayPool
	// logger, when set, receives the agent's logs.
	logger *slog.Logger
	// now, when set, is the agent's clock (a skewed node); clockCheck sets
	// Config.ClockCheckInterval (0: off, as testAgentConfig has it).
	now        func() time.Time
	clockCheck time.Duration
	// blossom, when set, lets the agent publish durable workloads'
	// checkpoints (a tile store on its database; these servers).
	blossom []string
	// workloadDir is backend.workload_dir ("": a temporary one, removed
	// when the agent stops).
	workloadDir string
}

func startAgent(t testing.TB, o agentOpts) *testAgent {
	t.Helper()
	if o.key == "" {
		o.key = nostr.GeneratePrivateKey()
	}
	if o.dbPath == "" {
		o.dbPath = filepath.Join(t.TempDir(), o.name+".db")
	}
	pub, _ := nostr.GetPublicKey(o.key)
	ctx, cancel := context.WithCancel(context.Background())
	db, err := sqlitedb.Open(ctx, o.dbPath, sqlitedb.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testAgentConfig(o.lcfg.Relays, o.key, o.name)
	cfg.Lease = o.lcfg
	cfg.DialAddrs = o.dial
	cfg.TrustedIssuers = o.issuers
	cfg.Listen = "127.0.0.1:0"
	cfg.ClockCheckInterval = o.clockCheck
	pcfg := backend.DefaultProcessConfig()
	pcfg.StopGrace = 2 * time.Second
	pcfg.WorkloadDir = o.workloadDir
	proc, err := backend.NewProcess(pcfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ta := &testAgent{t: t, key: o.key, pub: pub, dbPath: o.dbPath, log: &eventLog{}, reg: prometheus.NewRegistry(),
		backend: proc, proc: proc, cancel: cancel, done: make(chan error, 1)}
	var ckpt CheckpointDeps
	if o.blossom != nil {
		store, err := uploader.NewStore(ctx, db, nil)
		if err != nil {
			t.Fatal(err)
		}
		ckpt = CheckpointDeps{Store: store, Servers: o.blossom, PollInterval: 50 * time.Millisecond}
	}
	a, err := New(ctx, cfg, Deps{DB: db, Registerer: ta.reg, Backend: ta.backend, OnEvent: ta.log.add, Logger: o.logger, Now: o.now, Checkpoints: ckpt})
	if err != nil {
		cancel()
		db.Close()
		t.Fatalf("New(%s) = %v, want nil", o.name, err)
	}
	if o.wrapPool != nil {
		a.pool = o.wrapPool(a.pool)
	}
	ta.a = a
	go func() {
		err := a.Run(ctx)
		db.Close()
		ta.done <- err
	}()
	t.Cleanup(ta.stop)
	return ta
}

// stop shuts the agent down and waits for Run (idempotent).
func (ta *testAgent) stop() {
	ta.cancel()
	if ta.done == nil {
		return
	}
	select {
	case err := <-ta.done:
		if err != nil {
			ta.t.Errorf("Run() = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		ta.t.Errorf("agent did not stop within 30 s")
	}
	ta.done = nil
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ta.proc.Close(cctx); err != nil {
		ta.t.Errorf("backend Close() = %v, want nil", err)
	}
}

func (ta *testAgent) state(id string) (string, uint64) {
	for _, w := range ta.a.Status().Workloads {
		if w.ID == id {
			return w.State, w.Epoch
		}
	}
	return "", 0
}

func (ta *testAgent) waitState(id string, want lease.State, epoch uint64, limit time.Duration) {
	ta.t.Helper()
	waitFor(ta.t, limit, fmt.Sprintf("%s: %s %s@%d (states %v)", ta.a.me.name, id, want, epoch, ta.log.states()), func() bool {
		_, ok := ta.log.find(func(e Event) bool {
			return e.Kind == "state" && e.Workload == id && e.State == string(want) && e.Epoch == epoch
		})
		return ok
	})
}

// waitListedOnQuorum waits until ta's own heartbeat listing workload id
// was accepted by at least M relays, and one heartbeat interval more for it
// to come back: only then does ta's revocation of id carry quorum_at, which
// its successor's claim by revocation needs (lease.RevocationDeadline).
// For an agent in this process it also waits until the agent saw such a
// heartbeat come back from M relays (its status row's QuorumAt): only then
// does a revocation let the successor claim at once. Accepted is not seen:
// under CI's race run the echo lagged a heartbeat interval, the revocation
// carried no quorum time, and the standby waited for the takeover rule.
func (ta *testAgent) waitListedOnQuorum(id string, limit time.Duration) {
	ta.t.Helper()
	waitListedOnQuorum(ta.t, ta.a.me.name, ta.log, id, ta.a.cfg.Lease, limit)
	waitFor(ta.t, limit, ta.a.me.name+": a heartbeat listing "+id+" seen back from M relays (status quorum_at)", func() bool {
		for _, w := range ta.a.Status().Workloads {
			if w.ID == id && !w.QuorumAt.IsZero() {
				return true
			}
		}
		return false
	})
}

// waitListedOnQuorum is testAgent.waitListedOnQuorum for any agent's
// timeline (a child process's too), with the agent's lease configuration.
func waitListedOnQuorum(t testing.TB, who string, log *eventLog, id string, lcfg lease.Config, limit time.Duration) {
	t.Helper()
	m := lcfg.M
	waitFor(t, limit, fmt.Sprintf("%s: a heartbeat listing %s accepted by %d relays", who, id, m), func() bool {
		_, ok := log.find(func(e Event) bool {
			var n, of int
			var listing string
			if e.Kind != "heartbeat" {
				return false
			}
			if _, err := fmt.Sscanf(e.Detail, "heartbeat published, accepted by %d of %d relays, listing %s", &n, &of, &listing); err != nil {
				return false
			}
			return n >= m && strings.Contains(e.Detail, id+"@")
		})
		return ok
	})
	time.Sleep(lcfg.HeartbeatInterval)
}

func warmSpec(id, primary, standby string, relays []string) lease.Spec {
	return lease.Spec{
		ID: id, Primary: primary, Standbys: []string{standby}, Replication: lease.ReplicationWarmStandby, Epoch: 1,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure, MaxAttempts: 3},
		Command:       []string{"sh", "-c", "while :; do sleep 1; done"}, CreatedAt: time.Now(),
		Relays: relays, Quorum: 2,
	}
}

// soloSpec is a lease of workload id without standby or restarts, held by
// primary: a process that runs until stopped.
func soloSpec(id, primary string) lease.Spec {
	return lease.Spec{
		ID: id, Primary: primary, Replication: lease.ReplicationNone, Epoch: 1,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever},
		Command:       []string{"sh", "-c", "while :; do sleep 1; done"}, CreatedAt: time.Now(),
	}
}

// cutProxies puts a TCP proxy in front of the first n relays and returns
// the proxies with the dial map that routes an agent through them.
func cutProxies(t testing.TB, rs []*relaytest.Relay, urls []string, n int) ([]*cutproxy.Proxy, map[string]string) {
	t.Helper()
	var proxies []*cutproxy.Proxy
	dial := map[string]string{}
	for i := range n {
		p, err := cutproxy.New(rs[i].Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		proxies = append(proxies, p)
		dial[urls[i]] = p.URL()
	}
	return proxies, dial
}

// startPair starts a primary (dialling through primaryDial) and a standby
// of the warm-standby workload "w1" and waits until the primary is Live.
func startPair(t testing.TB, lcfg lease.Config, primaryDial map[string]string) (primary, standby *testAgent) {
	t.Helper()
	primary = startAgent(t, agentOpts{name: "primary", lcfg: lcfg, dial: primaryDial})
	standby = startAgent(t, agentOpts{name: "standby", lcfg: lcfg})
	spec := warmSpec("w1", primary.pub, standby.pub, lcfg.Relays)
	ctx := context.Background()
	primary.a.Track(ctx, spec)
	standby.a.Track(ctx, spec)
	primary.waitState("w1", lease.StateLive, 1, 15*time.Second)
	return primary, standby
}

// TestPartitionedPrimaryHandsOver: the primary is cut off from relays 1 and
// 2; it fences itself, its revocation reaches the standby through relay 3,
// and the standby is Live at epoch 2 within the bound; the old copy stopped
// before the new one started.
func TestPartitionedPrimaryHandsOver(t *testing.T) {
	t.Parallel()
	rs, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	proxies, dial := cutProxies(t, rs, urls, 2)
	primary, standby := startPair(t, lcfg, dial)
	// Live is the lease state; the process is started right after it, by
	// the actuator's own goroutine.
	waitFor(t, 15*time.Second, "primary Running(w1) once Live", func() bool { return primary.backend.Running("w1") })

	cut := time.Now()
	for _, p := range proxies {
		p.Cut()
	}
	bound := lcfg.T1 + lcfg.T2 + lcfg.Stale + lcfg.RelayDelay + 2*time.Second
	standby.waitState("w1", lease.StateLive, 2, bound+10*time.Second)
	took := time.Since(cut)
	t.Logf("failover took %v (bound %v)", took, bound)

	stop, ok := primary.log.find(func(e Event) bool { return e.Kind == "stop" && e.Workload == "w1" })
	if !ok {
		t.Fatalf("primary events %v: no stop of w1", primary.log.states())
	}
	start, _ := standby.log.find(func(e Event) bool { return e.Kind == "start" && strings.Contains(e.Detail, "epoch 2") })
	if !stop.Time.Before(start.Time) {
		t.Fatalf("primary stop at %v, standby start at %v: want the stop first", stop.Time, start.Time)
	}
	waitFor(t, 5*time.Second, "primary process stopped", func() bool { return !primary.backend.Running("w1") })
	primary.waitState("w1", lease.StateFenced, 1, 10*time.Second)
	waitFor(t, 15*time.Second, "standby Running(w1) at epoch 2", func() bool { return standby.backend.Running("w1") })
	if got := testutil.ToFloat64(standby.a.obs.met.revocations.WithLabelValues("received")); got < 1 {
		t.Fatalf("standby revocations received = %v, want >= 1", got)
	}

	// The standby's /metrics, over real HTTP, shows the failover: the
	// agent's own series beside those of the relay layer, the ingest and
	// the courier sharing its registry.
	body := getMetrics(t, standby.a)
	for _, c := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"agent_transitions_total", map[string]string{"from": "standby", "to": "promoting"}, 1},
		{"agent_transitions_total", map[string]string{"from": "promoting", "to": "provisioning"}, 1},
		{"agent_transitions_total", map[string]string{"from": "provisioning", "to": "live"}, 1},
		{"agent_revocations_total", map[string]string{"direction": "received"}, 1},
		{"agent_promotions_total", map[string]string{"outcome": "claimed"}, 1},
		{"relay_connected", nil, float64(lcfg.M)},
		{"relay_publish_total", map[string]string{"outcome": "accepted"}, 1},
		{"heartbeat_events_accepted_total", nil, 1},
		{"courier_pending", nil, 0},
	} {
		if got, ok := metricSum(body, c.name, c.labels); !ok || got < c.min {
			t.Errorf("GET /metrics %s%v = %v (found %v), want >= %v", c.name, c.labels, got, ok, c.min)
		}
	}
}

// removedMetrics duplicated relay's relay_* series; they must not
// come back.
var removedMetrics = []string{"agent_relay_connected", "agent_relay_reconnects", "agent_events_received_total", "agent_publish_total"}

// getMetrics reads the agent's /metrics over real HTTP and checks that no
// removed duplicate is exported.
func getMetrics(t *testing.T, a *Agent) string {
	t.Helper()
	code, body := get(t, "http://"+a.Addr()+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d, want 200", code)
	}
	for _, name := range removedMetrics {
		if _, ok := metricSum(body, name, nil); ok {
			t.Errorf("GET /metrics exports %s, want it gone (relay's relay_* series replace it)", name)
		}
	}
	return body
}

// metricSum sums the samples of metric name in a Prometheus text
// exposition whose labels include every pair of labels; ok is false when
// none matches.
func metricSum(body, name string, labels map[string]string) (sum float64, ok bool) {
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		series, value, found := strings.Cut(line, " ")
		if !found {
			continue
		}
		n, lbls, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		match := true
		for k, v := range labels {
			if !strings.Contains(lbls, k+"="+strconv.Quote(v)) {
				match = false
			}
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		sum, ok = sum+f, true
	}
	return sum, ok
}

// TestOneRelayDownNoFalseEviction: with one of three relays dead, a healthy
// primary stays Live and the standby stays Standby for longer than the whole
// eviction path would take.
func TestOneRelayDownNoFalseEviction(t *testing.T) {
	t.Parallel()
	rs, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	primary, standby := startPair(t, lcfg, nil)
	rs[2].Kill()
	// Longer than stale + t1 + t2 + relay_delay.
	time.Sleep(lcfg.Stale + lcfg.T1 + lcfg.T2 + lcfg.RelayDelay + time.Second)
	if st, ep := primary.state("w1"); st != string(lease.StateLive) || ep != 1 {
		t.Fatalf("primary state = %s@%d (history %v), want live@1", st, ep, primary.log.states())
	}
	if st, _ := standby.state("w1"); st != string(lease.StateStandby) {
		t.Fatalf("standby state = %s (history %v), want standby", st, standby.log.states())
	}
	if got, want := primary.log.states(), []string{"provisioning@1", "live@1"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("primary transitions = %v, want %v", got, want)
	}

	// The status server reports the same, over real HTTP.
	base := "http://" + primary.a.Addr()
	var st Status
	getJSON(t, base+"/status", &st)
	if len(st.Workloads) != 1 || st.Workloads[0].State != "live" || st.Workloads[0].Epoch != 1 || !st.Workloads[0].Running {
		t.Fatalf("GET /status workloads = %+v, want w1 live at epoch 1, running", st.Workloads)
	}
	up := 0
	for _, r := range st.Relays {
		if r.Connected {
			up++
		}
	}
	if len(st.Relays) != 3 || up != 2 {
		t.Fatalf("GET /status relays = %+v, want 3 with 2 connected", st.Relays)
	}
	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("GET /healthz = %d %q, want 200 with 2 of 3 relays up", code, body)
	}
	metrics := getMetrics(t, primary.a)
	for _, want := range []string{`agent_workloads{state="live"} 1`, "agent_provider_quorum{provider=\"" + primary.pub + "\"} 1", "courier_pending", "heartbeat_"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("GET /metrics lacks %s", want)
		}
	}
	// relay_connected (relay's) tells the dead relay apart.
	for i, want := range []float64{1, 1, 0} {
		if got, ok := metricSum(metrics, "relay_connected", map[string]string{"relay": urls[i]}); !ok || got != want {
			t.Errorf("GET /metrics relay_connected{relay=%q} = %v (found %v), want %v", urls[i], got, ok, want)
		}
	}
	if got, ok := metricSum(metrics, "relay_publish_total", map[string]string{"outcome": "accepted"}); !ok || got < 1 {
		t.Errorf("GET /metrics relay_publish_total{outcome=accepted} = %v (found %v), want >= 1", got, ok)
	}
	if got, ok := metricSum(metrics, "agent_transitions_total", map[string]string{"to": "live"}); !ok || got != 1 {
		t.Errorf("GET /metrics agent_transitions_total{to=live} = %v (found %v), want 1", got, ok)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	code, body := get(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d %q, want 200", url, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: decode: %v", url, err)
	}
}

// TestRestartRestoresState: an agent stopped and started again on the same
// database restores its workload, waits for relay sync (Syncing) and
// resumes Live at the same epoch.
func TestRestartRestoresState(t *testing.T) {
	t.Parallel()
	_, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	key := nostr.GeneratePrivateKey()
	pub, _ := nostr.GetPublicKey(key)
	dbPath := filepath.Join(t.TempDir(), "agent.db")
	spec := soloSpec("solo", pub)
	first := startAgent(t, agentOpts{name: "first", key: key, dbPath: dbPath, lcfg: lcfg})
	first.a.Track(context.Background(), spec)
	first.waitState("solo", lease.StateLive, 1, 15*time.Second)
	first.stop()

	second := startAgent(t, agentOpts{name: "second", key: key, dbPath: dbPath, lcfg: lcfg})
	if st, ep := second.state("solo"); st != string(lease.StateSyncing) || ep != 1 {
		t.Fatalf("restored state = %s@%d, want syncing@1", st, ep)
	}
	second.waitState("solo", lease.StateLive, 1, 15*time.Second)
	waitFor(t, 5*time.Second, "workload running after restore", func() bool { return second.backend.Running("solo") })
}

// TestBadEventsChangeNothing: forged, future-dated, stale and replayed
// heartbeats and garbage served by a relay change no state; each is
// counted as rejected (or not counted at all).
func TestBadEventsChangeNothing(t *testing.T) {
	t.Parallel()
	rs, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	primaryKey := nostr.GeneratePrivateKey()
	primaryPub, _ := nostr.GetPublicKey(primaryKey)
	standby := startAgent(t, agentOpts{name: "standby", lcfg: lcfg})
	spec := warmSpec("w1", primaryPub, standby.pub, urls)
	standby.a.Track(context.Background(), spec)
	standby.waitState("w1", lease.StateStandby, 1, 10*time.Second)
	waitFor(t, 10*time.Second, "standby connected", func() bool { return eoseCount(standby.a.pool) == 3 })

	keys, err := identity.NewKeys(primaryKey)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	build := func(at time.Time, held []heartbeat.WorkloadEpoch) nostr.Event {
		ev, err := heartbeat.BuildHeartbeat(keys, heartbeat.HeartbeatParams{At: at, Workloads: held}, false)
		if err != nil {
			t.Fatal(err)
		}
		return *ev
	}
	// A forged claim of epoch 5 by a stranger, and a forged revocation.
	stranger, _ := identity.NewKeys(nostr.GeneratePrivateKey())
	claim, err := heartbeat.BuildPromotion(stranger, heartbeat.PromotionParams{WorkloadID: "w1", At: now, Epoch: 5})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := heartbeat.BuildRevocation(stranger, heartbeat.RevocationParams{WorkloadID: "w1", Standbys: []string{standby.pub}, Reason: "forged", At: now, Successor: standby.pub, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	good := build(now, []heartbeat.WorkloadEpoch{{ID: "w1", Epoch: 1}})
	badSig := good
	badSig.Content = strings.Replace(badSig.Content, `"epoch":1`, `"epoch":9`, 1)
	badSig.ID = badSig.GetID()
	future := build(now.Add(time.Hour), []heartbeat.WorkloadEpoch{{ID: "w1", Epoch: 1}})
	stale := build(now.Add(-time.Hour), []heartbeat.WorkloadEpoch{{ID: "w1", Epoch: 1}})
	garbage := nostr.Event{ID: "zz", PubKey: "not a key", Kind: heartbeat.KindHeartbeat, Content: "{", Sig: "00"}
	for _, r := range rs {
		for _, ev := range []nostr.Event{badSig, future, stale, garbage, *claim, *rev} {
			r.Inject(ev, false)
		}
	}
	// Nobody ever gave the primary a quorum: the standby never counts it
	// Live, and none of the bad events moved anything.
	time.Sleep(2 * time.Second)
	if got := standby.log.states(); strings.Join(got, ",") != "standby@1" {
		t.Fatalf("standby transitions = %v, want [standby@1]", got)
	}
	rejected := 0.0
	for _, r := range heartbeat.AllReasons {
		rejected += testutil.ToFloat64(standby.a.obs.met.eventsRejected.WithLabelValues(string(r)))
	}
	if rejected == 0 {
		var names []string
		mfs, _ := standby.reg.Gather()
		for _, mf := range mfs {
			if strings.Contains(mf.GetName(), "reject") {
				for _, m := range mf.GetMetric() {
					names = append(names, fmt.Sprint(m.GetLabel(), m.GetCounter().GetValue()))
				}
			}
		}
		t.Fatalf("agent_events_rejected_total = 0 over known reasons; metrics: %v", names)
	}
	if standby.backend.Running("w1") {
		t.Fatalf("standby Running(w1) = true after bad events, want false")
	}
}

// TestLeaseGrantFromTrustedIssuer: a kind 38388 grant published to the relays
// by a trusted issuer makes the agent track and start the workload; the same
// grant from an untrusted key is ignored.
func TestLeaseGrantFromTrustedIssuer(t *testing.T) {
	t.Parallel()
	rs, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	issuer, _ := identity.NewKeys(nostr.GeneratePrivateKey())
	stranger, _ := identity.NewKeys(nostr.GeneratePrivateKey())
	ta := startAgent(t, agentOpts{name: "agent", lcfg: lcfg, issuers: []string{issuer.PublicKey()}})
	waitFor(t, 10*time.Second, "agent connected", func() bool { return eoseCount(ta.a.pool) == 3 })
	grant := func(k *identity.Keys, id string) nostr.Event {
		ev, err := heartbeat.BuildLeaseGrant(k, heartbeat.LeaseGrantParams{
			WorkloadID: id, Primary: ta.pub, Relays: urls, Quorum: 2, Replication: lease.ReplicationNone,
			RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever},
			Command:       []string{"sh", "-c", "while :; do sleep 1; done"}, At: time.Now(),
		})
		if err != nil {
			t.Fatal(err)
		}
		return *ev
	}
	forged, trusted := grant(stranger, "from-stranger"), grant(issuer, "from-issuer")
	for _, r := range rs {
		r.Inject(forged, true)
		r.Inject(trusted, true)
	}
	ta.waitState("from-issuer", lease.StateLive, 1, 15*time.Second)
	waitFor(t, 5*time.Second, "granted workload running", func() bool { return ta.backend.Running("from-issuer") })
	if st, _ := ta.state("from-stranger"); st != "" {
		t.Fatalf("grant from an untrusted key: state %q, want not tracked", st)
	}
}

// TestOperatorGrantAndRelease: commands queued in the database (what
// `provider-agent workloads grant|release` write) are applied by the running
// agent: the grant starts the workload, the release stops and forgets it.
func TestOperatorGrantAndRelease(t *testing.T) {
	t.Parallel()
	_, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	ta := startAgent(t, agentOpts{name: "agent", lcfg: lcfg})
	ctx := context.Background()
	db, err := openTestDB(ctx, ta.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	spec := soloSpec("op-1", ta.pub)
	if _, err := QueueGrant(ctx, db, spec, time.Now()); err != nil {
		t.Fatalf("QueueGrant() = %v, want nil", err)
	}
	ta.waitState("op-1", lease.StateLive, 1, 15*time.Second)
	if _, err := QueueRelease(ctx, db, "op-1", time.Now()); err != nil {
		t.Fatalf("QueueRelease() = %v, want nil", err)
	}
	waitFor(t, 10*time.Second, "released workload stopped and forgotten", func() bool {
		st, _ := ta.state("op-1")
		return st == "" && !ta.backend.Running("op-1")
	})
	cmds, err := ListCommands(ctx, db, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) != 2 || cmds[0].Result != "ok" || cmds[1].Result != "ok" || cmds[1].AppliedAt.IsZero() {
		t.Fatalf("ListCommands() = %+v, want grant and release applied ok", cmds)
	}
	ws, err := LoadWorkloads(ctx, db)
	if err != nil || len(ws) != 0 {
		t.Fatalf("LoadWorkloads() = %d rows, %v; want none after release", len(ws), err)
	}
}

// TestShutdownLeavesNoGoroutines: an agent that ran a workload over three
// relays leaves no goroutine behind once Run returned and its backend closed.
// Not parallel, so that the count is this test's alone.
func TestShutdownLeavesNoGoroutines(t *testing.T) {
	_, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	runtime.GC()
	before := runtime.NumGoroutine()
	ta := startAgent(t, agentOpts{name: "agent", lcfg: lcfg})
	ta.a.Track(context.Background(), soloSpec("g-1", ta.pub))
	ta.waitState("g-1", lease.StateLive, 1, 15*time.Second)
	waitFor(t, 5*time.Second, "g-1 in GET /status", func() bool {
		_, body := get(t, "http://"+ta.a.Addr()+"/status")
		return strings.Contains(body, `"g-1"`)
	})
	http.DefaultClient.CloseIdleConnections()
	ta.stop()
	var after int
	deadline := time.Now().Add(10 * time.Second)
	for {
		after = runtime.NumGoroutine()
		if after <= before || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if after > before {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("goroutines: %d before, %d after shutdown, want no more\n%s", before, after, buf[:n])
	}
}
