package agent

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"provideragent/internal/relaytest"
	"provideragent/lease"
)

// captureHandler is a slog handler that records every record at info and
// above.
type captureHandler struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *captureHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *captureHandler) WithGroup(string) slog.Handler      { return h }

// count is the number of records at level whose message starts with prefix.
func (h *captureHandler) count(level slog.Level, prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Level == level && strings.HasPrefix(r.Message, prefix) {
			n++
		}
	}
	return n
}

// TestQuorumChangesLoggedOnce: with every relay cut off
// and then back, the agent logs losing its own relay quorum, having no
// relay connected and regaining the quorum at WARN, each once however many
// ticks pass, and its real /status endpoint says synced only while M relays
// are connected and synced.
func TestQuorumChangesLoggedOnce(t *testing.T) {
	t.Parallel()
	rs, urls := relaytest.StartN(t, 3)
	proxies, dial := cutProxies(t, rs, urls, 3)
	logs := &captureHandler{}
	ta := startAgent(t, agentOpts{name: "agent", lcfg: lease.DemoConfig(urls), dial: dial, logger: slog.New(logs)})
	base := "http://" + ta.a.Addr()
	synced := func() bool {
		var st Status
		getJSON(t, base+"/status", &st)
		return st.Synced
	}
	// ticks waits until the machine loop has stepped for another d.
	ticks := func(d time.Duration) {
		mark := ta.a.now().Add(d).UnixNano()
		waitFor(t, d+10*time.Second, "machine loop ticks on", func() bool { return ta.a.steps.last.Load() > mark })
	}
	type line struct {
		level  slog.Level
		prefix string
	}
	reached := line{slog.LevelInfo, "relay quorum reached"}
	lost := line{slog.LevelWarn, "relay quorum lost"}
	regained := line{slog.LevelWarn, "relay quorum regained"}
	none := line{slog.LevelWarn, "no relay connected"}
	back := line{slog.LevelInfo, "relay connected again"}
	check := func(when string, want map[line]int) {
		t.Helper()
		for l, n := range want {
			if got := logs.count(l.level, l.prefix); got != n {
				t.Errorf("%s: %d %v lines %q, want %d", when, got, l.level, l.prefix, n)
			}
		}
	}

	waitFor(t, 15*time.Second, "quorum reached and /status synced", func() bool {
		return logs.count(reached.level, reached.prefix) == 1 && synced()
	})
	ticks(time.Second)
	check("connected", map[line]int{reached: 1, lost: 0, regained: 0, none: 0, back: 0})

	for _, p := range proxies {
		p.Cut()
	}
	waitFor(t, 20*time.Second, "quorum loss and no relay logged at WARN", func() bool {
		return logs.count(lost.level, lost.prefix) == 1 && logs.count(none.level, none.prefix) == 1
	})
	if synced() {
		t.Errorf("GET /status synced = true with no relay connected, want false")
	}
	ticks(2 * time.Second)
	check("cut off", map[line]int{reached: 1, lost: 1, regained: 0, none: 1, back: 0})

	for _, p := range proxies {
		if err := p.Restore(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, "quorum regained logged at WARN and /status synced", func() bool {
		return logs.count(regained.level, regained.prefix) == 1 && synced()
	})
	ticks(2 * time.Second)
	check("reconnected", map[line]int{reached: 1, lost: 1, regained: 1, none: 1, back: 1})
}

// TestStatusSyncedNeedsMRelays: /status, over real HTTP, says synced only
// while at least M (2) relays are connected with EOSE on their current
// connection; none connected is never synced.
func TestStatusSyncedNeedsMRelays(t *testing.T) {
	t.Parallel()
	pool := &upPool{}
	a := newStepAgent(t, stepOpts{pool: pool})
	srv, err := newHTTPServer("127.0.0.1:0", a.obs.gatherer, a.Status, a.healthy)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.serve(ctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("serve() = %v, want nil", err)
		}
	}()
	for _, tt := range []struct {
		up   int32
		want bool
	}{{0, false}, {1, false}, {2, true}, {3, true}, {0, false}} {
		pool.up.Store(tt.up)
		var st Status
		getJSON(t, "http://"+srv.Addr()+"/status", &st)
		if st.Synced != tt.want {
			t.Errorf("GET /status with %d of 3 relays connected and synced: synced = %v, want %v", tt.up, st.Synced, tt.want)
		}
	}
}
