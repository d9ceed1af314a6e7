package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"provideragent/internal/relaytest"
	"provideragent/lease"
)

func TestJudgeClock(t *testing.T) {
	s := func(d time.Duration) clockSample { return clockSample{offset: d} }
	bad := clockSample{err: errors.New("down")}
	tests := []struct {
		name        string
		samples     []clockSample
		ok, suspect bool
		offset      time.Duration
		why         string
	}{
		{"too few answers", []clockSample{s(time.Hour), bad, bad}, false, false, 0, ""},
		{"within the bound", []clockSample{s(time.Second), s(-2 * time.Second), s(0)}, true, false, 0, ""},
		{"an hour fast", []clockSample{s(-time.Hour), s(-time.Hour - time.Second), bad}, true, true, -time.Hour - time.Second/2, "local clock 1h0m1s ahead of the relays"},
		{"five minutes slow, one liar", []clockSample{s(5 * time.Minute), s(5*time.Minute + time.Second), s(-time.Hour)}, true, true, 5 * time.Minute, "local clock 5m0s behind the relays"},
		{"one relay off, two fine", []clockSample{s(0), s(time.Second), s(time.Hour)}, true, false, time.Second, ""},
	}
	for _, tc := range tests {
		v, ok := judgeClock(tc.samples, 2, 15*time.Second)
		if ok != tc.ok || v.suspect != tc.suspect || (ok && v.offset != tc.offset) || !strings.HasPrefix(v.why, tc.why) {
			t.Errorf("judgeClock(%s) = %+v, %v, want ok %v suspect %v offset %v why %q", tc.name, v, ok, tc.ok, tc.suspect, tc.offset, tc.why)
		}
	}
}

// TestSampleRelayClock reads a relay's Date header over real HTTP, at the
// address the agent dials (ws -> http).
func TestSampleRelayClock(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/nostr+json" {
			t.Errorf("Accept = %q, want application/nostr+json", r.Header.Get("Accept"))
		}
		w.Header().Set("Date", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
		w.WriteHeader(http.StatusUpgradeRequired) // a relay without NIP-11 still has a Date
	}))
	defer srv.Close()
	dial := "ws" + strings.TrimPrefix(srv.URL, "http")
	s := sampleRelayClock(context.Background(), srv.Client(), "wss://relay.example", dial, time.Now, 2*time.Second)
	if s.err != nil {
		t.Fatalf("sampleRelayClock = %v", s.err)
	}
	if d := s.offset - time.Hour; d > 2*time.Second || d < -2*time.Second {
		t.Fatalf("offset = %v, want about +1h (relay ahead)", s.offset)
	}
	if s := sampleRelayClock(context.Background(), srv.Client(), "wss://x", "ftp://x", time.Now, time.Second); s.err == nil {
		t.Fatalf("sampleRelayClock(ftp) = nil error, want one naming the scheme")
	}
}

// TestFastStandbyNeverTakesOver: a standby whose clock is
// an hour fast sees a healthy primary's heartbeats as an hour old: silence.
// It must find its clock outside the bound of the relays' and refuse to
// take over, for longer than takeover_after; the primary stays Live and
// nothing runs twice. Without the clock check it takes over.
func TestFastStandbyNeverTakesOver(t *testing.T) {
	t.Parallel()
	_, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	primary := startAgent(t, agentOpts{name: "primary", lcfg: lcfg})
	fast := func() time.Time { return time.Now().Add(time.Hour) }
	standby := startAgent(t, agentOpts{name: "standby", lcfg: lcfg, now: fast, clockCheck: 200 * time.Millisecond})
	spec := warmSpec("w1", primary.pub, standby.pub, urls)
	ctx := context.Background()
	primary.a.Track(ctx, spec)
	standby.a.Track(ctx, spec)
	primary.waitState("w1", lease.StateLive, 1, 15*time.Second)
	waitFor(t, 10*time.Second, "standby finds its clock outside the bound", func() bool { return standby.a.Status().ClockSuspect })
	deadline := time.Now().Add(lcfg.TakeoverAfter + 8*time.Second)
	for time.Now().Before(deadline) {
		if _, ok := standby.log.find(func(e Event) bool { return e.Kind == "state" && e.State == string(lease.StatePromoting) }); ok {
			t.Fatalf("the standby an hour fast entered the claim step: %v", standby.log.states())
		}
		if standby.backend.Running("w1") {
			t.Fatalf("the standby an hour fast runs w1 beside the primary")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st := primary.a.Status(); len(st.Workloads) != 1 || st.Workloads[0].State != string(lease.StateLive) {
		t.Fatalf("primary status %+v, want w1 live", st.Workloads)
	}
	if why := standby.a.Status().ClockWhy; !strings.Contains(why, "ahead of the relays") {
		t.Fatalf("standby /status clock_why = %q, want the offset named", why)
	}
}

// TestSlowPrimaryFences: a primary whose clock is five
// minutes slow publishes heartbeats every other provider reads as stale,
// and never sees claims made after its clock. It must find its clock
// outside the bound and fence (stop, then revoke) so the standby's takeover
// never overlaps it. Without the clock check it keeps running while the
// standby takes over.
func TestSlowPrimaryFences(t *testing.T) {
	t.Parallel()
	_, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	slow := func() time.Time { return time.Now().Add(-5 * time.Minute) }
	primary := startAgent(t, agentOpts{name: "primary", lcfg: lcfg, now: slow, clockCheck: 200 * time.Millisecond})
	standby := startAgent(t, agentOpts{name: "standby", lcfg: lcfg})
	spec := warmSpec("w1", primary.pub, standby.pub, urls)
	ctx := context.Background()
	primary.a.Track(ctx, spec)
	standby.a.Track(ctx, spec)
	standby.waitState("w1", lease.StateLive, 2, lcfg.TakeoverAfter+20*time.Second)
	stop, ok := primary.log.find(func(e Event) bool { return e.Kind == "stop" && e.Workload == "w1" })
	if !ok {
		t.Fatalf("the slow primary never stopped w1: %v", primary.log.states())
	}
	if !strings.Contains(stop.Detail, "clock outside the bound") {
		t.Fatalf("primary stop = %q, want the clock named as the reason", stop.Detail)
	}
	start, _ := standby.log.find(func(e Event) bool { return e.Kind == "start" && strings.Contains(e.Detail, "epoch 2") })
	// The two agents' event times come from different clocks: compare on
	// the real clock (the slow one is five minutes behind).
	if stopReal := stop.Time.Add(5 * time.Minute); !stopReal.Before(start.Time) {
		t.Fatalf("primary stop at %v (real), standby start at %v: want the stop first", stopReal, start.Time)
	}
	waitFor(t, 5*time.Second, "primary process stopped", func() bool { return !primary.backend.Running("w1") })
}
