package agent

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/sqlitedb"
	"provideragent/relay"
)

// upPool is a RelayPool whose first `up` relays report connected; it never
// delivers or accepts anything.
type upPool struct{ up atomic.Int32 }

func (p *upPool) Run(ctx context.Context, _ chan<- relay.Received) error { <-ctx.Done(); return nil }
func (p *upPool) Publish(context.Context, *nostr.Event) relay.PublishResult {
	return relay.PublishResult{}
}
func (p *upPool) PublishTo(_ context.Context, url string, _ relay.Frame) relay.RelayOutcome {
	return relay.RelayOutcome{Relay: url, Outcome: relay.OutcomeTimedOut}
}
func (p *upPool) Query(context.Context, nostr.Filter) ([]relay.Received, int) {
	return nil, 0
}
func (p *upPool) QueryFilters(context.Context, []nostr.Filter) ([]relay.Received, int) {
	return nil, 0
}
func (p *upPool) SetInterests([]relay.Interest) {}
func (p *upPool) Connected() int                { return int(p.up.Load()) }

// PublishQuorum is p's Publish (what embedding types record).
func (p *upPool) PublishQuorum(ctx context.Context, ev *nostr.Event, _ int) relay.PublishResult {
	return p.Publish(ctx, ev)
}
func (p *upPool) Status() []RelayStatus {
	up := int(p.up.Load())
	out := make([]RelayStatus, len(stepRelays))
	for i, u := range stepRelays {
		out[i] = RelayStatus{URL: u, Connected: i < up, EOSE: i < up}
	}
	return out
}

// TestHealthz: /healthz, over real HTTP, fails (503) when relays are below
// quorum, when the machine loop is not running or has not stepped for
// MaxStepAge, and while the database is not writable; it recovers once a
// write succeeds again.
func TestHealthz(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "agent.db")
	pool := &upPool{}
	pool.up.Store(3)
	a := newStepAgent(t, stepOpts{dbPath: dbPath, busyMillis: 50, pool: pool})
	srv, err := newHTTPServer("127.0.0.1:0", a.obs.gatherer, a.Status, a.healthy)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.serve(sctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("serve() = %v, want nil", err)
		}
	}()

	// A second connection holding the write lock makes the agent's writes
	// fail with SQLITE_BUSY after its 50 ms busy timeout.
	other, err := sqlitedb.Open(ctx, dbPath, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	tests := []struct {
		name  string
		setup func(t *testing.T)
		want  string // "" means healthy
	}{
		{"loop not started", func(*testing.T) {}, "machine loop not running"},
		{"healthy", func(*testing.T) { a.steps.last.Store(a.now().UnixNano()) }, ""},
		{"relays below quorum", func(*testing.T) { pool.up.Store(1) }, "1 relays connected"},
		{"loop stuck", func(*testing.T) {
			pool.up.Store(3)
			a.steps.last.Store(a.now().Add(-a.cfg.MaxStepAge - time.Second).UnixNano())
		}, "machine loop stuck"},
		{"database locked", func(t *testing.T) {
			a.steps.last.Store(a.now().UnixNano())
			if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
				t.Fatal(err)
			}
			if err := a.saveMachine(ctx); err == nil {
				t.Fatalf("saveMachine() with the database locked = nil, want an error")
			}
		}, "database not writable"},
		{"database writable again", func(t *testing.T) {
			if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
			if err := a.saveMachine(ctx); err != nil {
				t.Fatalf("saveMachine() = %v, want nil", err)
			}
		}, ""},
	}
	for _, tt := range tests {
		tt.setup(t)
		code, body := get(t, "http://"+srv.Addr()+"/healthz")
		wantCode := http.StatusOK
		if tt.want != "" {
			wantCode = http.StatusServiceUnavailable
		}
		if code != wantCode || !strings.Contains(body, tt.want) {
			t.Errorf("%s: GET /healthz = %d %q, want %d containing %q", tt.name, code, body, wantCode, tt.want)
		}
	}
}
