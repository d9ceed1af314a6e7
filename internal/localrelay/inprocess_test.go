//go:build !race

// khatru races on its own listener slice, so the in-process relay is only
// tested in binaries built without -race (the demo's configuration).

package localrelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/localrelay"
	"provideragent/internal/relaytest"
)

func TestInProcessStartShutdown(t *testing.T) {
	r := localrelay.New(localrelay.Options{Admin: true})
	if r.URL() != "" {
		t.Fatalf("URL() before Start = %q, want empty", r.URL())
	}
	if err := r.Start(context.Background(), "127.0.0.1:0"); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	c := relaytest.Dial(t, r.URL())
	ev := signed(t, testKey, 1, "in process", time.Now())
	if ok := publish(t, c, ev); !ok.OK {
		t.Fatalf("publish() = %v, want OK true", ok)
	}
	if n, err := r.Inject(ev, false); err != nil || n != 0 {
		t.Fatalf("Inject() = %d, %v; want 0 subscribers", n, err)
	}
	if got := r.Stats().Events; got != 1 {
		t.Fatalf("Stats().Events = %d, want 1", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown() = %v", err)
	}
	if err := r.Shutdown(ctx); err != nil {
		t.Fatalf("second Shutdown() = %v", err)
	}
	if _, err := c.Read(wait); err == nil {
		t.Fatalf("Read() after Shutdown succeeded, want closed connection")
	}
}

func TestInProcessShutdownBeforeStart(t *testing.T) {
	r := localrelay.New(localrelay.Options{})
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown() before Start = %v, want nil", err)
	}
	if _, err := r.Inject(nostr.Event{}, false); err == nil {
		t.Fatalf("Inject() before Start = nil, want ErrNotStarted")
	}
}

func TestInProcessStartInvalid(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts localrelay.Options
		addr string
	}{
		{"bad options", localrelay.Options{ClosedTimes: -1}, "127.0.0.1:0"},
		{"bad addr", localrelay.Options{}, "nonsense"},
		{"bad port", localrelay.Options{}, "127.0.0.1:99999"},
	} {
		r := localrelay.New(tt.opts)
		if err := r.Start(context.Background(), tt.addr); err == nil {
			_ = r.Shutdown(context.Background())
			t.Errorf("%s: Start(%q) = nil, want error", tt.name, tt.addr)
		}
	}
}
