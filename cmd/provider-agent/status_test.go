package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"provideragent/agent"
	"provideragent/internal/relaytest"
)

// lockedWriter is a bytes.Buffer safe for the run goroutine and the test.
type lockedWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestRunAndStatusLive runs `provider-agent run` against three relays with a
// queued operator grant, then `provider-agent status` reads the running
// agent's /status; after SIGINT-style cancellation run exits 0 and status
// falls back to the database.
func TestRunAndStatusLive(t *testing.T) {
	dir := t.TempDir()
	if code, _, errs := run(t, "keygen", "--out", filepath.Join(dir, "identity.key")); code != 0 {
		t.Fatalf("keygen = exit %d %q", code, errs)
	}
	common := []string{"--data-dir", dir, "--quorum", "2"}
	for range 3 {
		common = append(common, "--relay", relaytest.Start(t).URL())
	}
	if code, out, errs := run(t, append([]string{"workloads", "grant", "--id", "svc-1", "--command", "sleep 1000"}, common...)...); code != 0 {
		t.Fatalf("workloads grant = exit %d %q %q", code, out, errs)
	}
	t.Setenv("PROVIDER_AGENT_HEARTBEAT_INTERVAL", "1s")
	t.Setenv("PROVIDER_AGENT_BACKEND_WORKLOAD_DIR", workloadDir(t))
	t.Setenv("PROVIDER_AGENT_LEASE_STALE", "3s")

	ctx, cancel := context.WithCancel(context.Background())
	var out, errb lockedWriter
	done := make(chan int, 1)
	// Port 0: run binds a free port and prints it (a port picked here and
	// closed could be taken by another process before run binds it).
	go func() {
		done <- runMain(ctx, append([]string{"run", "--listen", "127.0.0.1:0"}, common...), &out, &errb)
	}()
	defer func() {
		cancel()
		<-done
	}()

	deadline := time.Now().Add(30 * time.Second)
	statusAddr := regexp.MustCompile(`status http://(\S+)/status`)
	var listen []string
	for listen == nil {
		if m := statusAddr.FindStringSubmatch(out.String()); m != nil {
			listen = []string{"--listen", m[1]}
		} else if time.Now().After(deadline) {
			t.Fatalf("run never printed its status address:\nrun stdout:\n%s\nrun stderr:\n%s", out.String(), errb.String())
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	common = append(common, listen...)
	var status string
	for {
		code, o, _ := run(t, append([]string{"status"}, common...)...)
		status = o
		if code == 0 && strings.Contains(o, "source: agent") && strings.Contains(o, "svc-1") && strings.Contains(o, " live ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never showed svc-1 live from the agent:\n%s\nrun stdout:\n%s\nrun stderr:\n%s", status, out.String(), errb.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		done <- code
		if code != 0 {
			t.Fatalf("run after cancel = exit %d, want 0\n%s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not stop within 30 s of cancellation")
	}
	code, o, errs := run(t, append([]string{"status"}, common...)...)
	if code != 0 || !strings.Contains(o, "source: database") || !strings.Contains(o, "svc-1") {
		t.Fatalf("status after stop = exit %d %q %q, want svc-1 from the database", code, o, errs)
	}
}

// The text status names each relay's last refusal of our events: when, the
// event, its kind, the outcome and the relay's words.
func TestPrintStatusShowsLastRejection(t *testing.T) {
	at := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	st := agent.Status{Provider: "p", Source: "agent", Relays: []agent.RelayStatus{
		{URL: "ws://a", Connected: true},
		{URL: "ws://b", Connected: true, LastRejection: &agent.RelayRejection{At: at, Kind: 38384,
			EventID: strings.Repeat("ab", 32), Outcome: "rejected", Reason: "invalid: event too large: 65792"}},
	}}
	var b strings.Builder
	printStatus(&b, st)
	want := "ws://b last refused our event abababababababab… at 2026-11-23T09:00:00Z (kind 38384, rejected): invalid: event too large: 65792\n"
	if !strings.Contains(b.String(), want) {
		t.Fatalf("status output:\n%s\nwant the line %q", b.String(), want)
	}
	if strings.Contains(b.String(), "ws://a last refused") {
		t.Fatalf("status output:\n%s\nwant no refusal line for ws://a", b.String())
	}
}

// TestSilenceColumn: the relay table says over which stretch each relay's
// live stream counts as evidence of a holder's silence, or that it does
// not count (not watched, or nothing shown yet).
func TestSilenceColumn(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, "2026-11-28T"+s+"Z")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tt := range []struct {
		r    agent.RelayStatus
		want string
	}{
		{agent.RelayStatus{}, "no (not watched)"},
		{agent.RelayStatus{SilenceShownUntil: at("10:00:00")}, "no (not watched)"},
		{agent.RelayStatus{WatchedSince: at("10:00:00")}, "watched since 10:00:00, nothing shown yet"},
		{agent.RelayStatus{WatchedSince: at("10:00:00"), SilenceShownUntil: at("09:59:59")}, "watched since 10:00:00, nothing shown yet"},
		{agent.RelayStatus{WatchedSince: at("10:00:00"), SilenceShownUntil: at("10:12:30")}, "10:00:00 to 10:12:30"},
	} {
		if got := silenceColumn(tt.r); got != tt.want {
			t.Errorf("silenceColumn(watched %v, shown %v) = %q, want %q", tt.r.WatchedSince, tt.r.SilenceShownUntil, got, tt.want)
		}
	}
}
