package courier

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"provideragent/internal/logcapture"
	"provideragent/internal/sqlitedb"
)

const (
	msgRetrying    = "courier deliveries failed, retrying with backoff"
	msgDeadLetters = "courier deliveries failed, some dead-lettered (provider-agent courier dlq list)"
)

// waitUntil polls cond until it holds or a generous deadline passes (the
// machine is shared: this bounds a hang, it measures nothing).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// retryLines are the captured summary lines of Run, in order.
func retryLines(h *logcapture.Handler) []logcapture.Record {
	var out []logcapture.Record
	for _, r := range h.Records() {
		if r.Message == msgRetrying || r.Message == msgDeadLetters {
			out = append(out, r)
		}
	}
	return out
}

func attr(t *testing.T, r logcapture.Record, key string) int64 {
	t.Helper()
	v, ok := r.Int(key)
	if !ok {
		t.Fatalf("log line %q has no integer %s: %v", r.Message, key, r.Attrs)
	}
	return v
}

// startRun runs c.Run(fwd) until the test ends.
func startRun(t *testing.T, e *env, fwd Forwarder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.c.Run(ctx, fwd) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}

// TestRunLogsRetries: the first flush that fails deliveries writes one
// INFO line at once (retried, acknowledged, destination, last error, what
// is pending); failures within the next RetryLogInterval are counted, not
// logged; the next line, after the interval, sums them up and is a WARN
// once receipts were dead-lettered.
func TestRunLogsRetries(t *testing.T) {
	h := logcapture.New(slog.LevelDebug)
	e := newEnv(t, func(c *Config) {
		c.FlushInterval = time.Millisecond
		c.MaxAttempts = 3
	}, Deps{Logger: slog.New(h)})
	for _, b := range []string{"a", "b", "c", "ok"} {
		e.send(t, b)
	}
	fwd := &recorder{fail: map[string]error{
		"a": ServerError(errBoom), "b": TransportError(errBoom), "c": ServerError(errBoom),
	}}
	startRun(t, e, fwd)

	// Flush 1: three rescheduled, one acknowledged: one INFO line at once.
	waitUntil(t, "the first retry line", func() bool { return len(retryLines(h)) >= 1 })
	first := retryLines(h)[0]
	if first.Level != slog.LevelInfo || first.Message != msgRetrying {
		t.Errorf("first line = %v %q, want INFO %q", first.Level, first.Message, msgRetrying)
	}
	for key, want := range map[string]int64{"retried": 3, "dead_lettered": 0, "acknowledged": 1, "flushes": 1, "pending": 3, "dlq": 0} {
		if got := attr(t, first, key); got != want {
			t.Errorf("first line %s = %d, want %d", key, got, want)
		}
	}
	if got := first.String("destination"); got != "http" {
		t.Errorf("first line destination = %q, want http", got)
	}
	if got := first.String("last_error"); !strings.Contains(got, "boom") {
		t.Errorf("first line last_error = %q, want the forwarder's error", got)
	}

	// Flush 2, 30 s later (inside the interval): the receipts fail again;
	// counted, not logged.
	e.clock.Advance(30 * time.Second)
	waitUntil(t, "the second attempts", func() bool { return fwd.count("a") >= 2 && fwd.count("b") >= 2 && fwd.count("c") >= 2 })
	// Flush 3, past the interval: the third attempt dead-letters them; the
	// line sums flushes 2 and 3 and is a WARN.
	e.clock.Advance(RetryLogInterval)
	waitUntil(t, "the second line", func() bool { return len(retryLines(h)) >= 2 })
	lines := retryLines(h)
	second := lines[1]
	if second.Level != slog.LevelWarn || second.Message != msgDeadLetters {
		t.Errorf("second line = %v %q, want WARN %q", second.Level, second.Message, msgDeadLetters)
	}
	for key, want := range map[string]int64{"retried": 3, "dead_lettered": 3, "acknowledged": 0, "flushes": 2, "pending": 0, "dlq": 3} {
		if got := attr(t, second, key); got != want {
			t.Errorf("second line %s = %d, want %d (lines: %v)", key, got, want, lines)
		}
	}
	if len(lines) != 2 {
		t.Errorf("%d retry lines, want 2: %v", len(lines), lines)
	}
}

// TestRunRetryLogDoesNotFlood: 10,000 receipts failing at every flush make
// one line per RetryLogInterval, not one per receipt or per flush.
func TestRunRetryLogDoesNotFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 receipts")
	}
	const n = 10000
	h := logcapture.New(slog.LevelDebug)
	e := newEnv(t, func(c *Config) {
		c.FlushInterval = time.Millisecond
		c.MaxAttempts = 100
	}, Deps{Logger: slog.New(h)})
	ctx := context.Background()
	err := sqlitedb.InTx(ctx, e.db, func(tx *sql.Tx) error {
		for i := range n {
			if _, err := e.c.SendTx(ctx, tx, []byte(fmt.Sprint(i)), "s", SendOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	failing := ForwarderFunc(func(context.Context, Delivery) error { return ServerError(errBoom) })
	attempts := func(want int) func() bool {
		return func() bool {
			var min int
			err := e.db.QueryRow(`SELECT MIN(attempts) FROM courier_receipts`).Scan(&min)
			return err == nil && min >= want
		}
	}
	startRun(t, e, failing)
	waitUntil(t, "every receipt's first attempt", attempts(1))
	for round := 2; round <= 4; round++ {
		e.clock.Advance(15 * time.Second) // three more rounds inside one interval
		waitUntil(t, fmt.Sprintf("every receipt's attempt %d", round), attempts(round))
	}
	e.clock.Advance(RetryLogInterval)
	waitUntil(t, "every receipt's attempt 5", attempts(5))
	waitUntil(t, "the second line", func() bool { return len(retryLines(h)) >= 2 })
	lines := retryLines(h)
	if len(lines) != 2 {
		t.Fatalf("%d retry lines for %d failures, want 2: %v", len(lines), 5*n, lines)
	}
	if got := attr(t, lines[0], "retried"); got != n {
		t.Errorf("first line retried = %d, want %d", got, n)
	}
	if got := attr(t, lines[1], "retried"); got != 4*n {
		t.Errorf("second line retried = %d, want %d (attempts 2 to 5)", got, 4*n)
	}
}
