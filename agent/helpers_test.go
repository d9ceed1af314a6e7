package agent

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/sqlitedb"
	"provideragent/lease"
	"provideragent/relay"
)

func openTestDB(ctx context.Context, path string) (*sql.DB, error) {
	return sqlitedb.Open(ctx, path, sqlitedb.Options{Synchronous: "NORMAL"})
}

// stepRelays are the relay URLs of agents built by newStepAgent; nothing
// listens on them (the agent is never run).
var stepRelays = []string{"ws://127.0.0.1:1", "ws://127.0.0.1:2", "ws://127.0.0.1:3"}

// stepOpts tune newStepAgent; the zero value is fine.
type stepOpts struct {
	key        string    // "" generates one
	dbPath     string    // "" uses a new file in tb.TempDir()
	busyMillis int       // SQLite busy timeout; 0 is sqlitedb's default
	pool       RelayPool // nil: the real pool (never run)
}

// newStepAgent builds an agent on a fresh database and an in-memory backend,
// without running it: tests drive its ingest and machine step directly with
// decode and feed.
func newStepAgent(tb testing.TB, o stepOpts) *Agent {
	tb.Helper()
	if o.key == "" {
		o.key = nostr.GeneratePrivateKey()
	}
	if o.dbPath == "" {
		o.dbPath = filepath.Join(tb.TempDir(), "step.db")
	}
	cfg := DefaultConfig()
	cfg.Lease = lease.DemoConfig(stepRelays)
	cfg.SecretKey = o.key
	cfg.Listen = ""
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, o.dbPath, sqlitedb.Options{Synchronous: "NORMAL", BusyTimeoutMillis: o.busyMillis})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	a, err := New(ctx, cfg, Deps{DB: db, Backend: newMemBackend(), Pool: o.pool})
	if err != nil {
		tb.Fatalf("New() = %v, want nil", err)
	}
	tb.Cleanup(func() { _ = a.out.courier.Close() })
	return a
}

// eoseCount is how many relays sent EOSE for the live subscription on their
// current connection.
func eoseCount(p RelayPool) int {
	n := 0
	for _, r := range p.Status() {
		if r.EOSE {
			n++
		}
	}
	return n
}

// testAgentConfig is the agent settings the end-to-end tests run with:
// lease.DemoConfig(relays), identity secretKey, timeline name, no status
// listener, 2 s publishes, workload processes stopped when Run returns, and
// an outbox that retries within a second.
func testAgentConfig(relays []string, secretKey, name string) Config {
	c := DefaultConfig()
	c.Lease = lease.DemoConfig(relays)
	c.SecretKey = secretKey
	c.Name = name
	c.Listen = ""
	c.PublishTimeout = 2 * time.Second
	c.StopWorkloadsOnExit = true
	c.Courier.MaxAttempts = 20
	c.Courier.InitialBackoff = 200 * time.Millisecond
	c.Courier.MaxBackoff = time.Second
	c.Courier.ForwardTimeout = 5 * time.Second
	c.Courier.ClaimTimeout = 6 * time.Second
	return c
}

// clientPool is a relay pool of the default configuration over urls (a
// client beside the agent: to publish or query), closed when the test
// ends.
func clientPool(tb testing.TB, urls []string) *relay.Pool {
	tb.Helper()
	cfg := relay.DefaultConfig()
	cfg.URLs = urls
	p, err := relay.New(cfg, relay.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}
