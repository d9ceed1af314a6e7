package courier

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"provideragent/internal/logcapture"
	"provideragent/internal/sqlitedb"
)

// TestSendTokenLimits: a sender and an idempotency key are visible ASCII,
// '!' (0x21) to '~' (0x7e), up to 256 bytes each.
func TestSendTokenLimits(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	tests := []struct {
		name   string
		sender string
		key    string
		wantOK bool
	}{
		{"sender of 256 bytes", strings.Repeat("s", maxSenderBytes), "", true},
		{"sender of 257 bytes", strings.Repeat("s", maxSenderBytes+1), "", false},
		{"key of 256 bytes", "alice", strings.Repeat("k", maxKeyBytes), true},
		{"key of 257 bytes", "alice", strings.Repeat("k", maxKeyBytes+1), false},
		{"sender !", "!", "", true},
		{"sender ~", "~", "", true},
		{"sender with a space", "a b", "", false},
		{"sender with DEL", "a\x7f", "", false},
		{"key with a space", "alice", "k k", false},
	}
	for i, tt := range tests {
		_, err := e.c.Send(context.Background(), []byte(strconv.Itoa(i)), tt.sender, SendOptions{IdempotencyKey: tt.key})
		if ok := err == nil; ok != tt.wantOK {
			t.Errorf("Send(%s) = %v, want ok = %v", tt.name, err, tt.wantOK)
		}
		if err != nil && !errors.Is(err, ErrInvalidSend) {
			t.Errorf("Send(%s) = %v, want ErrInvalidSend", tt.name, err)
		}
	}
}

// TestTruncate: a string of at most n bytes is kept as is; a longer one is
// cut to n bytes and marked.
func TestTruncate(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 4, "abc"},
		{"abc", 3, "abc"},
		{"abcd", 3, "abc..."},
	}
	for _, tt := range tests {
		if got := truncate(tt.s, tt.n); got != tt.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tt.s, tt.n, got, tt.want)
		}
	}
}

// TestHTTPForwarderRedirectLimit: a chain of method-preserving redirects is
// followed as net/http's default client follows one: 9 redirects, the
// tenth stops the request (a transport error, retried later).
func TestHTTPForwarderRedirectLimit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r/"))
		if n > 0 {
			http.Redirect(w, r, fmt.Sprintf("/r/%d", n-1), http.StatusTemporaryRedirect)
		}
	}))
	defer srv.Close()
	tests := []struct {
		redirects int
		wantClass ErrorClass // "" acknowledged
	}{
		{9, ""},
		{10, ClassTransport},
	}
	for _, tt := range tests {
		f, err := NewHTTPForwarder(fmt.Sprintf("%s/r/%d", srv.URL, tt.redirects), srv.Client())
		if err != nil {
			t.Fatal(err)
		}
		err = f.Forward(context.Background(), Delivery{ReceiptID: 1, Bundle: []byte("b")})
		if class, _ := Classify(err); (tt.wantClass == "") != (err == nil) || (err != nil && class != tt.wantClass) {
			t.Errorf("Forward(%d redirects) = %v, want class %q", tt.redirects, err, tt.wantClass)
		}
	}
}

// TestReplayRate: Replay forwards at most rate receipts per second, and a
// rate of 0 means Config.ReplayRate.
func TestReplayRate(t *testing.T) {
	const rate = 20 // one per 50 ms
	e := newEnv(t, func(c *Config) { c.ReplayRate = rate }, Deps{})
	deadReceipts(t, e, "a", "b", "c")
	var at []time.Time
	fwd := ForwarderFunc(func(context.Context, Delivery) error {
		at = append(at, time.Now())
		return nil
	})
	// The deadline only bounds a hang; the replay takes about 100 ms.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.c.Replay(ctx, fwd, 0)
	if err != nil || res.Acknowledged != 3 {
		t.Fatalf("Replay(rate 0, ReplayRate %d) = %+v, %v, want 3 acknowledged", rate, res, err)
	}
	for i := 1; i < len(at); i++ {
		// Each forward starts at least 1/rate after the previous one began
		// (less the previous one's read of the receipt): half is a safe
		// floor on a loaded machine.
		if gap := at[i].Sub(at[i-1]); gap < time.Second/rate/2 {
			t.Errorf("forward %d came %v after the previous one, want about %v (rate %d/s)", i, gap, time.Second/rate, rate)
		}
	}
}

// TestReplaySkipsReceiptsResentMeanwhile: Replay reads each dead receipt
// again before forwarding it; one an operator resent (back to pending)
// since Replay listed it is left to Flush.
func TestReplaySkipsReceiptsResentMeanwhile(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	rs := deadReceipts(t, e, "a", "b")
	other := map[ID]ID{rs[0].ID: rs[1].ID, rs[1].ID: rs[0].ID}
	var forwarded []ID
	fwd := ForwarderFunc(func(ctx context.Context, d Delivery) error {
		if len(forwarded) == 0 {
			// The operator resends the other receipt while this one is
			// being replayed.
			if _, err := e.c.Resend(ctx, other[d.ReceiptID]); err != nil {
				t.Errorf("Resend = %v", err)
			}
		}
		forwarded = append(forwarded, d.ReceiptID)
		return nil
	})
	res, err := e.c.Replay(context.Background(), fwd, 1000)
	if err != nil || res.Acknowledged != 1 || len(forwarded) != 1 {
		t.Fatalf("Replay with a receipt resent meanwhile = %+v, %v, forwarded %v, want only the first", res, err, forwarded)
	}
	if got := e.get(t, other[forwarded[0]]); got.State != StatePending {
		t.Errorf("the resent receipt after Replay = %s, want pending", got.State)
	}
}

// TestDeferredWithoutDelay: a delivery deferred without saying for how
// long is due again after InitialBackoff.
func TestDeferredWithoutDelay(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	r := e.send(t, "x")
	res, err := e.c.Flush(context.Background(), ForwarderFunc(func(context.Context, Delivery) error {
		return Deferred(errors.New("not yet"), 0)
	}))
	if err != nil || res.Deferred != 1 {
		t.Fatalf("Flush(deferred) = %+v, %v, want 1 deferred", res, err)
	}
	if got := e.get(t, r.ID); !got.NextAttemptAt.Equal(e.clock.Now().Add(e.c.Config().InitialBackoff)) {
		t.Errorf("NextAttemptAt = %v, want now + InitialBackoff (%v)", got.NextAttemptAt, e.clock.Now().Add(e.c.Config().InitialBackoff))
	}
}

// TestQuietWhenAllIsWell: sends, flushes, a replay, a resend and a drop that
// all succeed, and Run flushing them, log nothing at WARN or above.
func TestQuietWhenAllIsWell(t *testing.T) {
	h := logcapture.New(slog.LevelDebug)
	e := newEnv(t, nil, Deps{Logger: slog.New(h)})
	ctx := context.Background()
	deadReceipts(t, e, "a", "b", "c")
	if _, err := e.c.Replay(ctx, &recorder{}, 1000); err != nil {
		t.Fatal(err)
	}
	more := deadReceipts(t, e, "d", "e")
	if _, err := e.c.Resend(ctx, more[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Drop(ctx, more[1].ID); err != nil {
		t.Fatal(err)
	}
	delivered := make(chan string, 10)
	startRun(t, e, ForwarderFunc(func(_ context.Context, d Delivery) error {
		delivered <- string(d.Bundle)
		return nil
	}))
	if got := <-delivered; got != "d" {
		t.Errorf("Run delivered %q, want the resent d", got)
	}
	e.send(t, "f")
	if got := <-delivered; got != "f" {
		t.Errorf("Run delivered %q, want f", got)
	}
	waitUntil(t, "f acknowledged", func() bool {
		got, err := e.c.List(ctx, ListOptions{State: StatePending})
		return err == nil && len(got) == 0
	})
	for _, r := range h.Records() {
		if r.Level >= slog.LevelWarn {
			t.Errorf("logged %v %q %v, want nothing at WARN or above", r.Level, r.Message, r.Attrs)
		}
	}
}

// TestRunLogsWhatItDid: each of Run's flushes that delivered, retried or
// dead-lettered something logs one DEBUG line with the counts (an idle
// flush logs none); Run prunes acknowledged receipts past Retention when it
// starts and then about once a minute, with an INFO line when it deleted
// any.
func TestRunLogsWhatItDid(t *testing.T) {
	h := logcapture.New(slog.LevelDebug)
	e := newEnv(t, func(c *Config) {
		c.Retention = time.Hour
		c.FlushInterval = time.Millisecond // idle flushes all along
	}, Deps{Logger: slog.New(h)})
	ctx := context.Background()
	old := e.send(t, "old")
	if _, err := e.c.Flush(ctx, &recorder{}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Hour) // old's acknowledgement is past Retention
	e.send(t, "new")
	flushLines := func() []logcapture.Record { return h.Find("courier flush") }
	pruneLines := func() []logcapture.Record { return h.Find("courier pruned acknowledged receipts") }

	startRun(t, e, &recorder{fail: map[string]error{"bad": ClientError(errBoom), "retry": ServerError(errBoom)}})
	waitUntil(t, "the first flush line", func() bool { return len(flushLines()) >= 1 })
	waitUntil(t, "old pruned", func() bool { _, err := e.c.Get(ctx, old.ID); return errors.Is(err, ErrNotFound) })
	// A minute later: another prune, which finds nothing to delete; then
	// a flush that acknowledges one receipt and dead-letters another.
	e.clock.Advance(time.Minute + time.Second)
	err := sqlitedb.InTx(ctx, e.db, func(tx *sql.Tx) error {
		for _, b := range []string{"bad", "good"} {
			if _, err := e.c.SendTx(ctx, tx, []byte(b), "alice", SendOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the second flush line", func() bool { return len(flushLines()) >= 2 })
	// Run prunes after it logs a flush: one more flush line means that
	// flush's prune is done. That flush only retries.
	e.send(t, "retry")
	waitUntil(t, "the third flush line", func() bool { return len(flushLines()) >= 3 })

	lines := flushLines()
	want := []map[string]int64{
		{"acknowledged": 1, "dead_lettered": 0, "retried": 0},
		{"acknowledged": 1, "dead_lettered": 1, "retried": 0},
		{"acknowledged": 0, "dead_lettered": 0, "retried": 1},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d %q lines, want %d (none for idle flushes): %v", len(lines), "courier flush", len(want), lines)
	}
	for i, w := range want {
		if lines[i].Level != slog.LevelDebug {
			t.Errorf("flush line %d level = %v, want DEBUG", i, lines[i].Level)
		}
		for key, v := range w {
			if got := attr(t, lines[i], key); got != v {
				t.Errorf("flush line %d %s = %d, want %d", i, key, got, v)
			}
		}
	}
	pl := pruneLines()
	if len(pl) != 1 || pl[0].Level != slog.LevelInfo || attr(t, pl[0], "count") != 1 {
		t.Errorf("prune lines = %v, want one INFO line with count 1 (none when nothing was deleted)", pl)
	}
}

// TestRunRetriesWhenDue: Run tries a rescheduled receipt again when it
// falls due, not at the next FlushInterval.
func TestRunRetriesWhenDue(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.FlushInterval = time.Hour }, Deps{})
	r := e.send(t, "x")
	var calls atomic.Int32
	startRun(t, e, ForwarderFunc(func(context.Context, Delivery) error {
		if calls.Add(1) == 1 {
			return RateLimited(errors.New("slow down"), 20*time.Millisecond)
		}
		return nil
	}))
	waitUntil(t, "the first attempt", func() bool { return calls.Load() >= 1 })
	e.clock.Advance(20 * time.Millisecond)
	// The retry comes when it is due (20 ms), well before the hour is up.
	waitUntil(t, "x acknowledged", func() bool { return e.get(t, r.ID).State == StateAcknowledged })
}

// TestRetryLogCounts: the summary counts failed flushes, retried and
// dead-lettered receipts, and the acknowledgements since the first failure
// counted; a line is due when something failed and the last line is at
// least RetryLogInterval old.
func TestRetryLogCounts(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var l retryLog
	for _, res := range []FlushResult{
		{Acknowledged: 5}, // before any failure: not counted
		{Retried: 2, DeadLettered: 1, Acknowledged: 1}, // the first failure
		{Retried: 1, DeadLettered: 3, Acknowledged: 4}, // another
		{Acknowledged: 2}, // no failure, counted as acknowledged since
	} {
		l.add(res)
	}
	want := retryLog{flushes: 2, retried: 3, dead: 4, acked: 7}
	if l.flushes != want.flushes || l.retried != want.retried || l.dead != want.dead || l.acked != want.acked {
		t.Errorf("after four flushes: flushes %d retried %d dead %d acked %d, want %d %d %d %d",
			l.flushes, l.retried, l.dead, l.acked, want.flushes, want.retried, want.dead, want.acked)
	}
	tests := []struct {
		since time.Duration // since the last line
		want  bool
	}{
		{RetryLogInterval - time.Second, false},
		{RetryLogInterval, true},
		{-time.Second, true}, // the clock went backwards
	}
	for _, tt := range tests {
		l := retryLog{flushes: 1, last: t0}
		if got := l.due(t0.Add(tt.since)); got != tt.want {
			t.Errorf("due(%v after the last line) = %v, want %v", tt.since, got, tt.want)
		}
	}
	if (&retryLog{}).due(t0) {
		t.Error("due() with nothing failed = true, want false")
	}
}

// TestOpenDamagedSchema: Open on a database whose courier tables were
// damaged after migrating (a table dropped by hand) fails with an error.
func TestOpenDamagedSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "courier.db")
	db := openDB(t, path)
	defer db.Close()
	c, err := Open(context.Background(), db, DefaultConfig(), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := db.Exec(`DROP TABLE courier_bundles`); err != nil {
		t.Fatal(err)
	}
	if c, err := Open(context.Background(), db, DefaultConfig(), Deps{}); err == nil {
		c.Close()
		t.Fatal("Open(courier_bundles dropped) = nil error, want one")
	}
}

// TestFlushReturnsClaimErrors: when the database refuses to claim due
// receipts, Flush returns that error (it does not try again and again).
func TestFlushReturnsClaimErrors(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	e.send(t, "x")
	if _, err := e.db.Exec(`CREATE TRIGGER no_claims BEFORE UPDATE OF next_attempt_at ON courier_receipts
		BEGIN SELECT RAISE(ABORT, 'disk says no'); END`); err != nil {
		t.Fatal(err)
	}
	fwd := &recorder{}
	if _, err := e.c.Flush(context.Background(), fwd); err == nil || !strings.Contains(err.Error(), "disk says no") {
		t.Errorf("Flush(claims refused) = %v, want the database's error", err)
	}
	if n := fwd.count("x"); n != 0 {
		t.Errorf("forwarded %d times, want 0", n)
	}
}
