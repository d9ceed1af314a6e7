package agent

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/sqlitedb"
)

func openTestDB(ctx context.Context, path string) (*sql.DB, error) {
	return sqlitedb.Open(ctx, path, sqlitedb.Options{Synchronous: "NORMAL"})
}

// stepRelays are the relay URLs of agents built by newStepAgent; nothing
// listens on them (the agent is never run).
var stepRelays = []string{"ws://127.0.0.1:1", "ws://127.0.0.1:2", "ws://127.0.0.1:3"}

// newStepAgent builds an agent with key (generated when "") on a fresh
// database and an in-memory backend, without running it: tests drive its
// ingest and machine step directly with decode and feed.
func newStepAgent(tb testing.TB, key string) *Agent {
	tb.Helper()
	if key == "" {
		key = nostr.GeneratePrivateKey()
	}
	cfg := DefaultConfig()
	cfg.Lease = DemoLeaseConfig(stepRelays)
	cfg.SecretKey = key
	cfg.Listen = ""
	ctx := context.Background()
	db, err := openTestDB(ctx, filepath.Join(tb.TempDir(), "step.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	a, err := New(ctx, cfg, Deps{DB: db, Backend: newMemBackend()})
	if err != nil {
		tb.Fatalf("New() = %v, want nil", err)
	}
	tb.Cleanup(func() { _ = a.outbox.Close() })
	return a
}
