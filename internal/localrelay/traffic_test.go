package localrelay_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/localrelay"
	"provideragent/internal/relaytest"
)

var otherKey = strings.Repeat("02", 32)

// TestTrafficStats: every kind of test relay reports the EVENTs and bytes
// its clients sent, the bytes it sent them, and its open connections and
// subscriptions (a REQ counts until its CLOSE or its connection's end).
func TestTrafficStats(t *testing.T) {
	for _, k := range relaytest.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			r := relaytest.StartKind(t, k, relaytest.KindOptions{})
			c := relaytest.Dial(t, r.URL())
			for i := range 3 {
				if ok := publish(t, c, signed(t, testKey, 1, fmt.Sprint("traffic ", i), time.Now())); !ok.OK {
					t.Fatalf("publish = %v, want OK true", ok)
				}
			}
			c.Send([]any{"REQ", "a", nostr.Filter{Kinds: []int{1}}})
			c.Send([]any{"REQ", "b", nostr.Filter{Kinds: []int{7}}})
			readUntilEOSE(t, c, "a", "b")
			// The relay counts a write's bytes once its writer has handed
			// them to the kernel: the client may read them first (BytesOut
			// 510 with 1,176 bytes pending, CI's race run, 2026-11-29).
			waitStats(t, r, "3 events in, 1 connection, 2 subscriptions, bytes both ways", func(st localrelay.Stats) bool {
				return st.EventsIn == 3 && st.KindsIn["1"] == 3 && st.Connections == 1 && st.Subscriptions == 2 && st.BytesIn >= 3*300 && st.BytesOut >= 3*300
			})
			c.Send([]any{"CLOSE", "a"})
			waitStats(t, r, "one subscription after the CLOSE", func(s localrelay.Stats) bool { return s.Subscriptions == 1 })
			c.Close()
			waitStats(t, r, "no connection or subscription after the close", func(s localrelay.Stats) bool {
				return s.Connections == 0 && s.Subscriptions == 0
			})
		})
	}
}

// TestRateLimit: with a bound per key and per connection, the events over
// the burst are refused in khatru's words and counted as refusals; the
// bucket refills at its rate, and another key on another connection has
// buckets of its own.
func TestRateLimit(t *testing.T) {
	for _, k := range []relaytest.Kind{relaytest.Khatru, relaytest.StrfryEmulated} {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			r := relaytest.StartKind(t, k, relaytest.KindOptions{RateLimit: localrelay.RateLimit{
				KeyPerSecond: 2, KeyBurst: 3, ConnPerSecond: 100, ConnBurst: 100}})
			c := relaytest.Dial(t, r.URL())
			var refused int
			for i := range 5 {
				ok := publish(t, c, signed(t, testKey, 1, fmt.Sprint("burst ", i), time.Now()))
				if !ok.OK {
					refused++
					if ok.Reason != localrelay.RateLimitReason {
						t.Fatalf("refusal = %q, want %q", ok.Reason, localrelay.RateLimitReason)
					}
				}
			}
			if refused != 2 {
				t.Fatalf("%d of 5 events at once refused, want 2 over the burst of 3", refused)
			}
			other := relaytest.Dial(t, r.URL())
			if ok := publish(t, other, signed(t, otherKey, 1, "another key", time.Now())); !ok.OK {
				t.Fatalf("another key's first event: %v, want OK true", ok)
			}
			time.Sleep(600 * time.Millisecond) // one token back at 2/s
			if ok := publish(t, c, signed(t, testKey, 1, "after a pause", time.Now())); !ok.OK {
				t.Fatalf("after the refill: %v, want OK true", ok)
			}
			if got := r.Stats().Refusals["OK "+localrelay.RateLimitReason]; got != 2 {
				t.Fatalf("Stats().Refusals = %v, want 2 rate-limited", r.Stats().Refusals)
			}
		})
	}
	t.Run("per connection", func(t *testing.T) {
		t.Parallel()
		r := relaytest.StartKind(t, relaytest.Khatru, relaytest.KindOptions{RateLimit: localrelay.RateLimit{ConnPerSecond: 0.1, ConnBurst: 2}})
		c := relaytest.Dial(t, r.URL())
		keys := []string{testKey, otherKey, testKey}
		var got []bool
		for i, sk := range keys {
			got = append(got, publish(t, c, signed(t, sk, 1, fmt.Sprint("conn ", i), time.Now())).OK)
		}
		if fmt.Sprint(got) != "[true true false]" {
			t.Fatalf("three events of two keys on one connection with a burst of 2: OK %v, want [true true false]", got)
		}
	})
}

// readUntilEOSE reads frames until each of subs had its EOSE.
func readUntilEOSE(t *testing.T, c *relaytest.Conn, subs ...string) {
	t.Helper()
	left := map[string]bool{}
	for _, s := range subs {
		left[s] = true
	}
	for len(left) > 0 {
		if e, ok := readFrame(t, c).(*nostr.EOSEEnvelope); ok {
			delete(left, string(*e))
		}
	}
}

func waitStats(t *testing.T, r *relaytest.Relay, what string, cond func(localrelay.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond(r.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: Stats() = %+v", what, r.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
