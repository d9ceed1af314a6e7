package localrelay_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/relaytest"
)

// okWithin publishes ev on c and waits at most limit for its OK.
func okWithin(t *testing.T, c *relaytest.Conn, ev nostr.Event, limit time.Duration) error {
	t.Helper()
	c.Send(nostr.EventEnvelope{Event: ev})
	deadline := time.Now().Add(limit)
	for {
		env, err := c.Read(time.Until(deadline))
		if err != nil {
			return fmt.Errorf("no OK for %s within %v: %w", ev.ID, limit, err)
		}
		if ok, isOK := env.(*nostr.OKEnvelope); isOK && ok.EventID == ev.ID {
			if !ok.OK {
				return fmt.Errorf("OK false for %s: %s", ev.ID, ok.Reason)
			}
			return nil
		}
	}
}

// TestStalledSubscriberDoesNotBlockPublishers: a subscriber whose path
// stalls silently (it stops reading, nothing is closed) must not hold up a
// publisher whose events it matches, nor another subscriber; the relay
// drops it by its rules (no progress for --write-timeout, a backlog over
// --max-pending-outbound, strfry's keep-alive) or keeps its backlog queued
// (strfry, which has no write timeout) and delivers it once it reads again.
func TestStalledSubscriberDoesNotBlockPublishers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		wantDrop bool
	}{
		{"khatru/write-timeout", []string{"--write-timeout", "1s"}, true},
		{"khatru/backlog", []string{"--write-timeout", "1m", "--max-pending-outbound", "65536"}, true},
		{"strfry-emulated/queued", []string{"--strfry"}, false},
		{"strfry-emulated/backlog", []string{"--strfry", "--max-pending-outbound", "65536"}, true},
		{"strfry-emulated/keep-alive", []string{"--strfry", "--ping-interval", "1s"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := relaytest.Start(t, tc.args...)
			proxy := relaytest.NewStallProxy(t, r.Addr())
			f := nostr.Filter{Kinds: []int{1}, Since: ptr(nostr.Now())}

			stalled := relaytest.Dial(t, proxy.URL())
			subscribe(stalled, "s", f)
			collect(t, stalled, "s")
			healthy := relaytest.Dial(t, r.URL())
			subscribe(healthy, "h", f)
			collect(t, healthy, "h")
			pub := relaytest.Dial(t, r.URL())

			proxy.Stall()
			content := strings.Repeat("x", 16<<10)
			const events = 48 // 768 KiB: far more than the kernel buffers toward the stalled peer
			var ids []string
			start := time.Now()
			for i := range events {
				ev := signed(t, testKey, 1, fmt.Sprintf("%d %s", i, content), time.Now())
				ids = append(ids, ev.ID)
				if err := okWithin(t, pub, ev, 5*time.Second); err != nil {
					t.Fatalf("event %d of %d (%v after the stall): %v", i+1, events, time.Since(start).Round(time.Millisecond), err)
				}
				env, err := healthy.Read(5 * time.Second)
				if err != nil {
					t.Fatalf("healthy subscriber, event %d: %v", i+1, err)
				}
				if got, ok := env.(*nostr.EventEnvelope); !ok || got.Event.ID != ev.ID {
					t.Fatalf("healthy subscriber, event %d: got %v, want the event", i+1, env)
				}
			}
			t.Logf("%d events of 16 KiB published in %v with the subscriber stalled", events, time.Since(start).Round(time.Millisecond))

			if tc.wantDrop {
				deadline := time.Now().Add(10 * time.Second)
				for r.Stats().Dropped == 0 {
					if time.Now().After(deadline) {
						t.Fatalf("Stats() = %+v 10 s after the events, want the stalled subscriber dropped", r.Stats())
					}
					time.Sleep(50 * time.Millisecond)
				}
				t.Logf("stalled subscriber dropped %v after the stall", time.Since(start).Round(time.Millisecond))
				proxy.Resume()
				// What was in flight arrives, then the connection ends.
				for n := 0; ; n++ {
					if _, err := stalled.Read(10 * time.Second); err != nil {
						t.Logf("stalled subscriber: %d frames, then %v", n, err)
						break
					}
					if n > events {
						t.Fatalf("stalled subscriber still reading after %d frames, want its connection closed", n)
					}
				}
				return
			}
			time.Sleep(2 * time.Second) // longer than any write timeout: nothing is dropped
			if st := r.Stats(); st.Dropped != 0 || st.PendingOutbound == 0 {
				t.Fatalf("Stats() = %+v, want nothing dropped and the stalled subscriber's backlog queued", st)
			}
			proxy.Resume()
			for i, id := range ids {
				env, err := stalled.Read(10 * time.Second)
				if err != nil {
					t.Fatalf("stalled subscriber after Resume, event %d: %v", i+1, err)
				}
				if got, ok := env.(*nostr.EventEnvelope); !ok || got.Event.ID != id {
					t.Fatalf("stalled subscriber after Resume, event %d: got %v, want %s", i+1, env, id)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
