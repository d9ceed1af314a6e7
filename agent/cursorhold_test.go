package agent

import (
	"context"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/identity"
	"provideragent/internal/relaytest"
	"provideragent/internal/sqlitedb"
	"provideragent/lease"
)

// TestCursorNeverPassesAnUnappliedEvent: the machine loop
// is held while two revocations arrive (one a minute old, one new); both
// are ingested and wait for the machine. The agent is then stopped, which
// saves its cursor. The persisted since must not pass the unapplied old
// revocation, and the restarted agent must read it again and apply it.
// Finishing an event's cursor token when ingest begins (instead of once
// its step is persisted) moves the cursor past both and loses the old one.
func TestCursorNeverPassesAnUnappliedEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	lcfg.TakeoverAfter = 5 * time.Minute // the silent primary must not be taken over meanwhile
	if err := lcfg.Validate(); err != nil {
		t.Fatal(err)
	}
	primaryKeys, _ := identity.NewKeys(nostr.GeneratePrivateKey())
	standby := startAgent(t, agentOpts{name: "standby", lcfg: lcfg})
	for _, id := range []string{"w1", "w2"} {
		// Granted five minutes ago: the minute-old revocation below belongs
		// to this grant (an older one would be ignored as an earlier
		// grant's).
		spec := warmSpec(id, primaryKeys.PublicKey(), standby.pub, urls)
		spec.CreatedAt = time.Now().Add(-5 * time.Minute)
		standby.a.Track(ctx, spec)
		standby.waitState(id, lease.StateStandby, 1, 10*time.Second)
	}
	waitFor(t, 10*time.Second, "standby subscribed on 3 relays", func() bool { return eoseCount(standby.a.pool) == 3 })

	holdMachineInputs(t, standby.a)
	now := time.Now()
	old := buildRevocation(t, primaryKeys, "w1", standby.pub, now.Add(-time.Minute))
	recent := buildRevocation(t, primaryKeys, "w2", standby.pub, now)
	for _, r := range rs {
		r.Inject(old, true)
		r.Inject(recent, true)
	}
	// Accepted (verified, first delivery) means handed to the held machine.
	waitFor(t, 10*time.Second, "both revocations ingested, waiting for the held machine", func() bool {
		return testutil.ToFloat64(standby.a.obs.met.eventsAccepted.WithLabelValues("revocation")) == 2
	})
	standby.stop() // saves the cursor
	if receivedRevocation(standby, "w1")() {
		t.Fatalf("the held machine applied the revocation of w1, want it unapplied")
	}
	since := persistedCursor(t, standby.dbPath)
	if since > int64(old.CreatedAt) {
		t.Fatalf("persisted since = %d passes the unapplied revocation at %d", since, old.CreatedAt)
	}

	restarted := startAgent(t, agentOpts{name: "standby", key: standby.key, dbPath: standby.dbPath, lcfg: lcfg})
	waitFor(t, 15*time.Second, "the unapplied revocation of w1 read again and applied after the restart", receivedRevocation(restarted, "w1"))
	restarted.waitState("w1", lease.StateLive, 2, 20*time.Second)
}

// persistedCursor reads the agent's persisted subscription cursor through a
// connection of its own.
func persistedCursor(t *testing.T, dbPath string) int64 {
	t.Helper()
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, dbPath, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var since int64
	if err := db.QueryRowContext(ctx, `SELECT since FROM agent_relay_cursors WHERE relay = ?`, cursorKey).Scan(&since); err != nil {
		t.Fatalf("read the persisted cursor: %v", err)
	}
	return since
}

// holdMachineInputs makes a's machine loop stop applying inputs and returns
// once it has: the loop reads the flag at each iteration, so after a tick
// that began later has completed, no iteration can still take an input.
func holdMachineInputs(t *testing.T, a *Agent) {
	t.Helper()
	a.in.hold.Store(true)
	mark := a.now().UnixNano()
	waitFor(t, 10*time.Second, "machine loop holding its inputs", func() bool { return a.steps.last.Load() > mark })
}
