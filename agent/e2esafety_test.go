package agent

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/internal/relaytest"
	"provideragent/internal/sqlitedb"
	"provideragent/lease"
)

// These tests run real agents over child-process relays and break what the
// agent stands on: its disk, its database lock, its subscription cursor.

// persistedState reads workload id's persisted state through a connection
// of its own, as another process would ("" when no row).
func persistedState(t *testing.T, dbPath, id string) string {
	t.Helper()
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, dbPath, sqlitedb.Options{})
	if err != nil {
		t.Fatalf("open %s: %v", dbPath, err)
	}
	defer db.Close()
	var state string
	err = db.QueryRowContext(ctx, `SELECT state FROM agent_workload_state WHERE id = ?`, id).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatalf("read %s from %s: %v", id, dbPath, err)
	}
	return state
}

// refuseWrites makes every write of the agent's database fail, as on a full
// disk (SQLite's query_only on the agent's one connection), or lifts it.
func refuseWrites(t *testing.T, a *Agent, refuse bool) {
	t.Helper()
	q := "PRAGMA query_only = 0"
	if refuse {
		q = "PRAGMA query_only = 1"
	}
	if _, err := a.data.db.ExecContext(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// buildRevocation is k's revocation of workload id at epoch 1 created at at,
// naming successor.
func buildRevocation(t *testing.T, k *identity.Keys, id, successor string, at time.Time) nostr.Event {
	t.Helper()
	ev, err := heartbeat.BuildRevocation(k, heartbeat.RevocationParams{WorkloadID: id, Standbys: []string{successor},
		Reason: "test", At: at, Successor: successor, Epoch: 1, QuorumAt: at})
	if err != nil {
		t.Fatal(err)
	}
	return *ev
}

// receivedRevocation reports whether ta's machine was fed a revocation of
// workload id (its timeline's "received" line).
func receivedRevocation(ta *testAgent, id string) func() bool {
	return func() bool {
		_, ok := ta.log.find(func(e Event) bool {
			return e.Kind == "received" && e.Workload == id && strings.Contains(e.Detail, "revocation")
		})
		return ok
	}
}

// TestDiskFullPrimaryStillFences: the primary's database
// refuses every write (disk full) when it is cut off from two of three
// relays. Its steps do not persist, yet it stops its workload process when
// it evicts itself; the revocation waits for the disk. Once writes work
// again the held steps persist, the revocation leaves through the outbox,
// the standby takes over at epoch 2, and the primary's persisted state
// catches up.
func TestDiskFullPrimaryStillFences(t *testing.T) {
	t.Parallel()
	rs, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	lcfg.TakeoverAfter = 90 * time.Second // the handover must come from the revocation
	if err := lcfg.Validate(); err != nil {
		t.Fatal(err)
	}
	proxies, dial := cutProxies(t, rs, urls, 2)
	primary, standby := startPair(t, lcfg, dial)
	waitFor(t, 10*time.Second, "primary process running", func() bool { return primary.backend.Running("w1") })
	defer func() {
		if t.Failed() {
			primary.log.dump(t, "primary")
			standby.log.dump(t, "standby")
		}
	}()
	primary.waitListedOnQuorum("w1", 10*time.Second)

	refuseWrites(t, primary.a, true)
	for _, p := range proxies {
		p.Cut()
	}
	bound := lcfg.Stale + lcfg.T1 + lcfg.T2 + 20*time.Second
	waitFor(t, bound, "primary process stopped although its steps do not persist", func() bool {
		return !primary.backend.Running("w1")
	})
	if got := persistedState(t, primary.dbPath, "w1"); got != string(lease.StateLive) {
		t.Fatalf("primary's persisted w1 = %q while its disk is full, want live (the eviction must not have persisted)", got)
	}
	if got := testutil.ToFloat64(primary.a.obs.met.stepErrors); got == 0 {
		t.Fatalf("primary agent_step_errors_total = 0, want the failed commits counted")
	}
	if got := testutil.ToFloat64(standby.a.obs.met.revocations.WithLabelValues("received")); got != 0 {
		t.Fatalf("standby received %v revocations while the primary's disk is full, want 0 (a revocation leaves only once persisted)", got)
	}

	refuseWrites(t, primary.a, false)
	waitFor(t, 20*time.Second, "standby received the revocation", receivedRevocation(standby, "w1"))
	if e, _ := standby.log.find(func(e Event) bool { return e.Kind == "received" && e.Workload == "w1" }); !strings.Contains(e.Detail, "may claim on it until") {
		t.Fatalf("standby's received line %q, want one it may claim on (the revocation carries the holder's quorum time)", e.Detail)
	}
	standby.waitState("w1", lease.StateLive, 2, 40*time.Second)
	if got := testutil.ToFloat64(standby.a.obs.met.revocations.WithLabelValues("received")); got < 1 {
		t.Fatalf("standby revocations received = %v, want >= 1 (the handover came from the held revocation)", got)
	}
	waitFor(t, 20*time.Second, "primary's persisted state catches up (evicted, fenced, or rejoined as a standby)", func() bool {
		st := persistedState(t, primary.dbPath, "w1")
		return st == string(lease.StateEvicted) || st == string(lease.StateFenced) || st == string(lease.StateStandby)
	})
	if primary.backend.Running("w1") {
		t.Fatalf("primary Running(w1) = true after the handover, want false")
	}
}

// TestWriteLockHeldElsewhereDoesNotStallFencing: another
// process holds SQLite's write lock (BEGIN IMMEDIATE, meant for 25 s) when
// a standby's claim of epoch 2 reaches the primary; the primary stops its
// workload while the lock is still held (its fencing step cannot commit:
// the persisted state is still live), and its state persists once the lock
// is released.
func TestWriteLockHeldElsewhereDoesNotStallFencing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	standbyKeys, err := identity.NewKeys(nostr.GeneratePrivateKey())
	if err != nil {
		t.Fatal(err)
	}
	primary := startAgent(t, agentOpts{name: "primary", lcfg: lcfg})
	primary.a.Track(ctx, warmSpec("w1", primary.pub, standbyKeys.PublicKey(), urls))
	primary.waitState("w1", lease.StateLive, 1, 15*time.Second)
	waitFor(t, 10*time.Second, "primary process running", func() bool { return primary.backend.Running("w1") })
	waitFor(t, 10*time.Second, "live persisted", func() bool {
		return persistedState(t, primary.dbPath, "w1") == string(lease.StateLive)
	})

	other, err := sqlitedb.Open(ctx, primary.dbPath, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	lock, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	locked := time.Now()
	released := false
	release := func() {
		if !released {
			released = true
			if _, err := lock.ExecContext(ctx, "ROLLBACK"); err != nil {
				t.Errorf("ROLLBACK: %v", err)
			}
		}
	}
	defer release()

	claim, err := heartbeat.BuildPromotion(standbyKeys, heartbeat.PromotionParams{WorkloadID: "w1", At: time.Now(), Epoch: 2, Status: heartbeat.ClaimActive})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		r.Inject(*claim, true)
	}
	// Well inside the 25 s the other process means to hold the lock.
	waitFor(t, 20*time.Second, "primary process stopped while another process holds the write lock", func() bool {
		return !primary.backend.Running("w1")
	})
	t.Logf("stopped %v after the lock was taken", time.Since(locked).Round(time.Millisecond))
	// Read through a reader (WAL readers are not blocked by the lock).
	if got := persistedState(t, primary.dbPath, "w1"); got != string(lease.StateLive) {
		t.Fatalf("persisted w1 with the lock held = %q, want live (the stop must not wait for the commit)", got)
	}
	release()
	waitFor(t, 20*time.Second, "fenced (or rejoined as a standby) persisted once the lock is released", func() bool {
		st := persistedState(t, primary.dbPath, "w1")
		return st == string(lease.StateFenced) || st == string(lease.StateStandby)
	})
}

// TestForgedFutureEventDoesNotBlindTheAgent: relays serve
// two revocations dated in the year 2100, one with a bad signature and one
// validly signed by a random key. The standby rejects both, and its
// subscription cursor does not move: after every relay connection is cut
// and restored (the agent resubscribes with since from its cursor) it still
// receives a real revocation, and after a restart another one.
func TestForgedFutureEventDoesNotBlindTheAgent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	lcfg.TakeoverAfter = 5 * time.Minute // the silent primary must not be taken over meanwhile
	if err := lcfg.Validate(); err != nil {
		t.Fatal(err)
	}
	proxies, dial := cutProxies(t, rs, urls, 3)
	primaryKeys, _ := identity.NewKeys(nostr.GeneratePrivateKey())
	stranger, _ := identity.NewKeys(nostr.GeneratePrivateKey())
	standby := startAgent(t, agentOpts{name: "standby", lcfg: lcfg, dial: dial})
	for _, id := range []string{"w1", "w2"} {
		standby.a.Track(ctx, warmSpec(id, primaryKeys.PublicKey(), standby.pub, urls))
		standby.waitState(id, lease.StateStandby, 1, 10*time.Second)
	}
	waitFor(t, 10*time.Second, "standby subscribed on 3 relays", func() bool { return eoseCount(standby.a.pool) == 3 })

	revocation := func(k *identity.Keys, id string, at time.Time) nostr.Event {
		return buildRevocation(t, k, id, standby.pub, at)
	}
	y2100 := time.Unix(4102444800, 0)
	badSig := revocation(primaryKeys, "w1", y2100)
	badSig.Content = strings.Replace(badSig.Content, `"test"`, `"forged"`, 1)
	badSig.ID = badSig.GetID() // a well-formed id; the signature no longer matches
	fromStranger := revocation(stranger, "w1", y2100)
	for _, r := range rs {
		r.Inject(badSig, true)
		r.Inject(fromStranger, true)
	}
	waitFor(t, 10*time.Second, "both forged revocations rejected", func() bool {
		return testutil.ToFloat64(standby.a.obs.met.eventsRejected.WithLabelValues(string(heartbeat.ReasonFuture))) >= 2
	})
	if s := int64(standby.a.since()); s > time.Now().Unix() {
		t.Fatalf("since() = %d after the forged events, want <= now", s)
	}

	// Resubscribe everywhere: since now comes from the cursor.
	for _, p := range proxies {
		p.Cut()
	}
	waitFor(t, 10*time.Second, "standby disconnected", func() bool { return eoseCount(standby.a.pool) == 0 })
	for _, p := range proxies {
		if err := p.Restore(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 15*time.Second, "standby resubscribed on 3 relays", func() bool { return eoseCount(standby.a.pool) == 3 })
	received := receivedRevocation
	real1 := revocation(primaryKeys, "w1", time.Now())
	for _, r := range rs {
		r.Inject(real1, true)
	}
	waitFor(t, 10*time.Second, "the real revocation of w1 received after resubscribing", received(standby, "w1"))

	// And after a restart, from the persisted cursor.
	standby.stop()
	restarted := startAgent(t, agentOpts{name: "standby", key: standby.key, dbPath: standby.dbPath, lcfg: lcfg, dial: dial})
	waitFor(t, 15*time.Second, "restarted standby subscribed on 3 relays", func() bool { return eoseCount(restarted.a.pool) == 3 })
	if s := int64(restarted.a.since()); s > time.Now().Unix() {
		t.Fatalf("since() after the restart = %d, want <= now", s)
	}
	real2 := revocation(primaryKeys, "w2", time.Now())
	for _, r := range rs {
		r.Inject(real2, true)
	}
	waitFor(t, 10*time.Second, "the real revocation of w2 received after the restart", received(restarted, "w2"))
}
