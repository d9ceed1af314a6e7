package courier

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"provideragent/internal/sqlitedb"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type env struct {
	c     *Courier
	db    *sql.DB
	clock *fakeClock
	path  string
}

func openDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := openDBErr(path)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func openDBErr(path string) (*sql.DB, error) {
	return sqlitedb.Open(context.Background(), path, sqlitedb.Options{})
}

// newEnv opens a courier on a fresh SQLite file with a fake clock and
// deterministic jitter (0.5).
func newEnv(t testing.TB, mutate func(*Config), deps Deps) *env {
	t.Helper()
	path := filepath.Join(t.TempDir(), "courier.db")
	db := openDB(t, path)
	cfg := DefaultConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	clock := newFakeClock()
	if deps.Clock == nil {
		deps.Clock = clock
	}
	if deps.Rand == nil {
		deps.Rand = func() float64 { return 0.5 }
	}
	c, err := Open(context.Background(), db, cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		db.Close()
	})
	return &env{c: c, db: db, clock: clock, path: path}
}

func (e *env) send(t testing.TB, bundle string) Receipt {
	t.Helper()
	r, err := e.c.Send(context.Background(), []byte(bundle), "alice", SendOptions{})
	if err != nil {
		t.Fatalf("Send(%q) = %v, want nil", bundle, err)
	}
	return r
}

func (e *env) get(t testing.TB, id ID) Receipt {
	t.Helper()
	r, err := e.c.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%s) = %v, want nil", id, err)
	}
	return r
}

// failBy returns a forwarder that fails receipts whose bundle is in fail
// with the given error and acknowledges the rest, recording every call.
type recorder struct {
	mu    sync.Mutex
	calls []Delivery
	fail  map[string]error
}

func (r *recorder) Forward(ctx context.Context, d Delivery) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, d)
	if err, ok := r.fail[string(d.Bundle)]; ok {
		return err
	}
	return nil
}

func (r *recorder) Destination() Destination { return DestinationHTTP }

func (r *recorder) count(bundle string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, d := range r.calls {
		if string(d.Bundle) == bundle {
			n++
		}
	}
	return n
}

var errBoom = errors.New("boom")
