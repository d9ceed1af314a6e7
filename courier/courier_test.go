package courier

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/zeebo/blake3"

	"provideragent/internal/sqlitedb"
)

func TestSendIsDurableAcrossReopen(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	bundle := []byte("hello bundle")
	r, err := e.c.Send(context.Background(), bundle, "alice", SendOptions{})
	if err != nil {
		t.Fatalf("Send = %v, want nil", err)
	}
	sum := blake3.Sum256(bundle)
	if want := fmt.Sprintf("%x", sum); r.BundleHash != want {
		t.Errorf("Send().BundleHash = %s, want %s", r.BundleHash, want)
	}
	if r.ID == 0 || r.State != StatePending || r.Sender != "alice" || r.Size != len(bundle) || r.Attempts != 0 {
		t.Errorf("Send() = %+v, want non-zero id, pending, alice, size %d, 0 attempts", r, len(bundle))
	}
	if !r.CreatedAt.Equal(e.clock.Now()) || !r.NextAttemptAt.Equal(e.clock.Now()) {
		t.Errorf("Send() times = %v, %v, want %v", r.CreatedAt, r.NextAttemptAt, e.clock.Now())
	}
	// Reopen the file from scratch: the receipt and bundle are there.
	e.c.Close()
	e.db.Close()
	db := openDB(t, e.path)
	defer db.Close()
	c, err := Open(context.Background(), db, DefaultConfig(), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.Get(context.Background(), r.ID)
	if err != nil {
		t.Fatalf("Get(%s) after reopen = %v, want nil", r.ID, err)
	}
	if !bytes.Equal(got.Bundle, bundle) || got.BundleHash != r.BundleHash || got.State != StatePending {
		t.Errorf("Get(%s) after reopen = %+v, want the sent bundle, pending", r.ID, got)
	}
}

func TestSendRejectsBadInput(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxBundleBytes = 10 }, Deps{})
	tests := []struct {
		name   string
		bundle []byte
		sender string
		key    string
		want   error
	}{
		{"too large", make([]byte, 11), "alice", "", ErrBundleTooLarge},
		{"at limit", make([]byte, 10), "alice", "", nil},
		{"empty bundle", nil, "alice", "", nil},
		{"empty sender", []byte("x"), "", "", ErrInvalidSend},
		{"sender with space", []byte("x"), "al ice", "", ErrInvalidSend},
		{"sender with newline", []byte("x"), "alice\n", "", ErrInvalidSend},
		{"sender too long", []byte("x"), strings.Repeat("a", 257), "", ErrInvalidSend},
		{"key non-ascii", []byte("x"), "alice", "clé", ErrInvalidSend},
		{"key too long", []byte("x"), "alice", strings.Repeat("k", 257), ErrInvalidSend},
	}
	for _, tt := range tests {
		_, err := e.c.Send(context.Background(), tt.bundle, tt.sender, SendOptions{IdempotencyKey: tt.key})
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: Send() = %v, want %v", tt.name, err, tt.want)
		}
	}
	if _, err := e.c.Send(context.Background(), make([]byte, 11), "alice", SendOptions{}); err == nil || !strings.Contains(err.Error(), "11 bytes, limit 10") {
		t.Errorf("Send(too large) = %v, want message naming size and limit", err)
	}
}

func TestSendIdempotencyKeyDedupes(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	ctx := context.Background()
	first, err := e.c.Send(ctx, []byte("a"), "alice", SendOptions{IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.c.Send(ctx, []byte("a"), "alice", SendOptions{IdempotencyKey: "k1"})
	if err != nil || again.ID != first.ID {
		t.Errorf("Send(same key) = %s, %v, want %s, nil", again.ID, err, first.ID)
	}
	other, err := e.c.Send(ctx, []byte("b"), "alice", SendOptions{IdempotencyKey: "k1"})
	if !errors.Is(err, ErrIdempotencyConflict) || other.ID != first.ID {
		t.Errorf("Send(same key, other bundle) = %s, %v, want %s, ErrIdempotencyConflict", other.ID, err, first.ID)
	}
	// Concurrent sends with one key land in one group commit: still one row.
	var wg sync.WaitGroup
	ids := make([]ID, 50)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.c.Send(ctx, []byte("c"), "alice", SendOptions{IdempotencyKey: "k2"})
			if err != nil {
				t.Errorf("Send(k2) = %v, want nil", err)
			}
			ids[i] = r.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("concurrent Send(k2) ids = %v, want all equal", ids)
		}
	}
	var n int
	if err := e.db.QueryRow(`SELECT COUNT(*) FROM courier_receipts`).Scan(&n); err != nil || n != 2 {
		t.Errorf("rows = %d, %v, want 2", n, err)
	}
	// Without a key every send is stored: two sends, two receipts.
	r1, r2 := e.send(t, "same"), e.send(t, "same")
	if r1.ID == r2.ID || r1.BundleHash != r2.BundleHash {
		t.Errorf("Send twice without key = %s/%s, want two ids with one hash", r1.ID, r2.ID)
	}
}

func TestConcurrentSendsAllStored(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	const n = 300
	var wg sync.WaitGroup
	ids := make(chan ID, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.c.Send(context.Background(), []byte(fmt.Sprint(i)), "alice", SendOptions{})
			if err != nil {
				t.Errorf("Send(%d) = %v, want nil", i, err)
				return
			}
			ids <- r.ID
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[ID]bool{}
	for id := range ids {
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
		e.get(t, id)
	}
	if len(seen) != n {
		t.Errorf("stored %d receipts, want %d", len(seen), n)
	}
}

func TestSendTxCommitsWithCallerTransaction(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	ctx := context.Background()
	if _, err := e.db.Exec(`CREATE TABLE machine (step INTEGER)`); err != nil {
		t.Fatal(err)
	}
	var committed Receipt
	err := sqlitedb.InTx(ctx, e.db, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`INSERT INTO machine VALUES (1)`); err != nil {
			return err
		}
		var err error
		committed, err = e.c.SendTx(ctx, tx, []byte("revocation"), "alice", SendOptions{IdempotencyKey: "rev-1"})
		return err
	})
	if err != nil {
		t.Fatalf("InTx(SendTx) = %v, want nil", err)
	}
	if got := e.get(t, committed.ID); got.State != StatePending || string(got.Bundle) != "revocation" {
		t.Errorf("Get(committed) = %+v, want pending revocation", got)
	}
	var rolledBack Receipt
	err = sqlitedb.InTx(ctx, e.db, func(tx *sql.Tx) error {
		var err error
		rolledBack, err = e.c.SendTx(ctx, tx, []byte("lost"), "alice", SendOptions{})
		if err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("InTx = %v, want errBoom", err)
	}
	if _, err := e.c.Get(ctx, rolledBack.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(rolled back) = %v, want ErrNotFound", err)
	}
	// Same key inside a later transaction returns the committed receipt.
	err = sqlitedb.InTx(ctx, e.db, func(tx *sql.Tx) error {
		r, err := e.c.SendTx(ctx, tx, []byte("revocation"), "alice", SendOptions{IdempotencyKey: "rev-1"})
		if err == nil && r.ID != committed.ID {
			return fmt.Errorf("SendTx(rev-1) = %s, want %s", r.ID, committed.ID)
		}
		return err
	})
	if err != nil {
		t.Error(err)
	}
	if _, err := e.c.SendTx(ctx, nil, make([]byte, 2<<20), "alice", SendOptions{}); !errors.Is(err, ErrBundleTooLarge) {
		t.Errorf("SendTx(too large) = %v, want ErrBundleTooLarge", err)
	}
}

func TestFlushAcknowledgesAndPassesIdempotencyData(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	ctx := context.Background()
	keyed, err := e.c.Send(ctx, []byte("one"), "alice", SendOptions{IdempotencyKey: "key-1"})
	if err != nil {
		t.Fatal(err)
	}
	plain := e.send(t, "two")
	fwd := &recorder{}
	res, err := e.c.Flush(ctx, fwd)
	if err != nil || res != (FlushResult{Acknowledged: 2}) {
		t.Fatalf("Flush = %+v, %v, want 2 acknowledged", res, err)
	}
	for _, d := range fwd.calls {
		want := map[ID]Receipt{keyed.ID: keyed, plain.ID: plain}[d.ReceiptID]
		if d.BundleHash != want.BundleHash || d.IdempotencyKey != want.IdempotencyKey || d.Sender != "alice" || d.Attempt != 1 {
			t.Errorf("Delivery = %+v, want hash %s key %q attempt 1", d, want.BundleHash, want.IdempotencyKey)
		}
	}
	got := e.get(t, keyed.ID)
	if got.State != StateAcknowledged || got.Attempts != 1 || !got.AcknowledgedAt.Equal(e.clock.Now()) {
		t.Errorf("Get after ack = %+v, want acknowledged, 1 attempt", got)
	}
	res, err = e.c.Flush(ctx, fwd)
	if err != nil || res != (FlushResult{}) || len(fwd.calls) != 2 {
		t.Errorf("second Flush = %+v, %v (%d calls), want nothing to do", res, err, len(fwd.calls))
	}
	// Flush relaxes synchronous for its bookkeeping only: sends stay FULL.
	var sync int
	if err := e.db.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil || sync != 2 {
		t.Errorf("PRAGMA synchronous after Flush = %d, %v, want 2 (FULL)", sync, err)
	}
}

func TestFlushClassifiesErrors(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		wantState State
		wantNext  time.Duration // from now, for retried ones
	}{
		{"client", ClientError(errBoom), StateDead, 0},
		{"server", ServerError(errBoom), StatePending, 50 * time.Millisecond},
		{"transport", TransportError(errBoom), StatePending, 50 * time.Millisecond},
		{"unclassified", errBoom, StatePending, 50 * time.Millisecond},
		{"rate limited no hint", RateLimited(errBoom, 0), StatePending, 50 * time.Millisecond},
		{"rate limited retry-after", RateLimited(errBoom, 30*time.Second), StatePending, 30 * time.Second},
		{"rate limited capped", RateLimited(errBoom, 48*time.Hour), StatePending, time.Hour},
		{"wrapped server", fmt.Errorf("relay: %w", ServerError(errBoom)), StatePending, 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, Deps{})
			r := e.send(t, "x")
			res, err := e.c.Flush(context.Background(), &recorder{fail: map[string]error{"x": tt.err}})
			if err != nil {
				t.Fatal(err)
			}
			got := e.get(t, r.ID)
			if got.State != tt.wantState || got.Attempts != 1 || !strings.Contains(got.LastError, "boom") {
				t.Errorf("Get after %s = %+v, want %s, 1 attempt, last error boom", tt.name, got, tt.wantState)
			}
			if tt.wantState == StateDead {
				if res.DeadLettered != 1 || !got.FailedAt.Equal(e.clock.Now()) {
					t.Errorf("Flush = %+v, failed_at %v, want 1 dead-lettered at %v", res, got.FailedAt, e.clock.Now())
				}
				return
			}
			if res.Retried != 1 {
				t.Errorf("Flush = %+v, want 1 retried", res)
			}
			if want := e.clock.Now().Add(tt.wantNext); !got.NextAttemptAt.Equal(want) {
				t.Errorf("NextAttemptAt = %v, want %v", got.NextAttemptAt, want)
			}
		})
	}
}

func TestPoisonReceiptDeadLettersWithoutBlockingOthers(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	poison := e.send(t, "poison")
	var good []Receipt
	for i := range 20 {
		good = append(good, e.send(t, fmt.Sprint("good-", i)))
	}
	fwd := &recorder{fail: map[string]error{"poison": ServerError(errBoom)}}
	ctx := context.Background()
	res, err := e.c.Flush(ctx, fwd)
	if err != nil || res.Acknowledged != 20 || res.Retried != 1 {
		t.Fatalf("first Flush = %+v, %v, want 20 acknowledged and 1 retried in the same flush", res, err)
	}
	for _, g := range good {
		if got := e.get(t, g.ID); got.State != StateAcknowledged {
			t.Errorf("good receipt %s = %s, want acknowledged", g.ID, got.State)
		}
	}
	// The poison receipt is tried once per flush when due, never inline.
	for attempt := 2; attempt <= 5; attempt++ {
		before := fwd.count("poison")
		res, err := e.c.Flush(ctx, fwd)
		if err != nil || fwd.count("poison") != before || res != (FlushResult{}) {
			t.Fatalf("Flush before due = %+v, %v, want no attempt", res, err)
		}
		e.clock.Advance(time.Hour)
		res, err = e.c.Flush(ctx, fwd)
		if err != nil || fwd.count("poison") != before+1 {
			t.Fatalf("Flush %d = %+v, %v, want one more poison attempt", attempt, res, err)
		}
		if attempt < 5 && res.Retried != 1 || attempt == 5 && res.DeadLettered != 1 {
			t.Errorf("Flush %d = %+v, want retried until attempt 5, then dead-lettered", attempt, res)
		}
	}
	got := e.get(t, poison.ID)
	if got.State != StateDead || got.Attempts != 5 || !got.FailedAt.Equal(e.clock.Now()) {
		t.Errorf("poison = %+v, want dead after 5 attempts, failed_at now", got)
	}
	e.clock.Advance(time.Hour)
	if res, _ := e.c.Flush(ctx, fwd); res != (FlushResult{}) {
		t.Errorf("Flush after DLQ = %+v, want nothing", res)
	}
}

func TestSlowPoisonDoesNotDelayOthers(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Concurrency = 4 }, Deps{})
	e.send(t, "slow")
	for i := range 10 {
		e.send(t, fmt.Sprint("fast-", i))
	}
	release := make(chan struct{})
	acked := make(chan struct{}, 10)
	fwd := ForwarderFunc(func(ctx context.Context, d Delivery) error {
		if string(d.Bundle) == "slow" {
			<-release
			return ServerError(errBoom)
		}
		acked <- struct{}{}
		return nil
	})
	done := make(chan FlushResult)
	go func() {
		res, _ := e.c.Flush(context.Background(), fwd)
		done <- res
	}()
	for range 10 {
		<-acked // all fast ones delivered while the slow one hangs
	}
	close(release)
	if res := <-done; res.Acknowledged != 10 || res.Retried != 1 {
		t.Errorf("Flush = %+v, want 10 acknowledged, 1 retried", res)
	}
}

func TestFlushCancelReleasesClaims(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Concurrency = 2 }, Deps{})
	var ids []ID
	for i := range 5 {
		ids = append(ids, e.send(t, fmt.Sprint(i)).ID)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{}, 5)
	fwd := ForwarderFunc(func(ctx context.Context, d Delivery) error {
		started <- struct{}{}
		<-ctx.Done()
		return TransportError(ctx.Err())
	})
	done := make(chan error)
	go func() {
		_, err := e.c.Flush(ctx, fwd)
		done <- err
	}()
	<-started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Flush(cancelled) = %v, want context.Canceled", err)
	}
	for _, id := range ids {
		got := e.get(t, id)
		if got.State != StatePending || got.Attempts != 0 || got.NextAttemptAt.After(e.clock.Now()) {
			t.Errorf("receipt after cancelled flush = %+v, want pending, 0 attempts, due now", got)
		}
	}
	res, err := e.c.Flush(context.Background(), &recorder{})
	if err != nil || res.Acknowledged != 5 {
		t.Errorf("Flush after cancel = %+v, %v, want 5 acknowledged", res, err)
	}
}

func TestForwarderPanicIsServerError(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	r := e.send(t, "x")
	res, err := e.c.Flush(context.Background(), ForwarderFunc(func(context.Context, Delivery) error { panic("bad") }))
	if err != nil || res.Retried != 1 {
		t.Fatalf("Flush(panicking) = %+v, %v, want 1 retried", res, err)
	}
	if got := e.get(t, r.ID); !strings.Contains(got.LastError, "panicked") {
		t.Errorf("LastError = %q, want panic noted", got.LastError)
	}
}

func TestClaimHidesReceiptsUntilTimeout(t *testing.T) {
	// A flush that crashed after claiming leaves receipts hidden for
	// ClaimTimeout, then they are delivered.
	e := newEnv(t, nil, Deps{})
	r := e.send(t, "x")
	if _, err := e.c.claim(context.Background(), e.clock.Now(), DestinationHTTP, 10); err != nil {
		t.Fatal(err)
	}
	if res, _ := e.c.Flush(context.Background(), &recorder{}); res.Acknowledged != 0 {
		t.Errorf("Flush while claimed = %+v, want nothing", res)
	}
	e.clock.Advance(e.c.Config().ClaimTimeout)
	if res, _ := e.c.Flush(context.Background(), &recorder{}); res.Acknowledged != 1 {
		t.Errorf("Flush after claim timeout = %+v, want 1 acknowledged", res)
	}
	if got := e.get(t, r.ID); got.State != StateAcknowledged {
		t.Errorf("state = %s, want acknowledged", got.State)
	}
}

func TestBackoffNextAttemptAt(t *testing.T) {
	b := DefaultConfig().Backoff()
	now := time.Unix(1000, 0)
	tests := []struct {
		attempt int
		rnd     float64
		want    time.Duration
	}{
		{1, 0, time.Millisecond}, // floor: never the same instant
		{1, 0.5, 50 * time.Millisecond},
		{1, 0.999999, 99999900 * time.Nanosecond},
		{2, 0.5, 100 * time.Millisecond},
		{3, 1, 400*time.Millisecond - 1}, // rnd clamped below 1
		{0, 0.5, 50 * time.Millisecond},
		{5, 0.25, 400 * time.Millisecond},
		{40, 0.5, 150 * time.Second}, // capped at 5 min
		{1 << 30, 0.5, 150 * time.Second},
		{1, math.NaN(), time.Millisecond},
		{1, -3, time.Millisecond},
	}
	for _, tt := range tests {
		got := NextAttemptAt(b, now, tt.attempt, tt.rnd)
		if d := got.Sub(now); d < tt.want-time.Microsecond || d > tt.want+time.Microsecond {
			t.Errorf("NextAttemptAt(now, %d, %v) = now+%v, want now+%v", tt.attempt, tt.rnd, d, tt.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
	tests := []struct {
		field  string
		mutate func(*Config)
	}{
		{"MaxBundleBytes", func(c *Config) { c.MaxBundleBytes = 0 }},
		{"MaxAttempts", func(c *Config) { c.MaxAttempts = 0 }},
		{"InitialBackoff", func(c *Config) { c.InitialBackoff = -1 }},
		{"BackoffFactor", func(c *Config) { c.BackoffFactor = 0.5 }},
		{"BackoffFactor", func(c *Config) { c.BackoffFactor = math.NaN() }},
		{"MaxBackoff", func(c *Config) { c.MaxBackoff = time.Millisecond }},
		{"MaxRetryAfter", func(c *Config) { c.MaxRetryAfter = 0 }},
		{"Concurrency", func(c *Config) { c.Concurrency = 0 }},
		{"ClaimBatch", func(c *Config) { c.ClaimBatch = 0 }},
		{"ForwardTimeout", func(c *Config) { c.ForwardTimeout = 0 }},
		{"ClaimTimeout", func(c *Config) { c.ClaimTimeout = c.ForwardTimeout }},
		{"FlushInterval", func(c *Config) { c.FlushInterval = 0 }},
		{"SendBatch", func(c *Config) { c.SendBatch = 0 }},
		{"Retention", func(c *Config) { c.Retention = 0 }},
		{"ReplayRate", func(c *Config) { c.ReplayRate = 0 }},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.mutate(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("Validate(bad %s) = %v, want ErrInvalidConfig naming %s", tt.field, err, tt.field)
		}
	}
}

// deadReceipts sends bundles and dead-letters them with client errors.
func deadReceipts(t *testing.T, e *env, bundles ...string) []Receipt {
	t.Helper()
	fail := map[string]error{}
	var rs []Receipt
	for _, b := range bundles {
		rs = append(rs, e.send(t, b))
		fail[b] = ClientError(errors.New("rejected " + b))
	}
	res, err := e.c.Flush(context.Background(), &recorder{fail: fail})
	if err != nil || res.DeadLettered != len(bundles) {
		t.Fatalf("Flush = %+v, %v, want %d dead-lettered", res, err, len(bundles))
	}
	return rs
}

func TestReplayRemovesSuccessesAndKeepsFailures(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	rs := deadReceipts(t, e, "a", "b", "c")
	e.send(t, "pending-untouched")
	e.clock.Advance(time.Minute)
	fwd := &recorder{fail: map[string]error{"b": ServerError(errors.New("still down"))}}
	res, err := e.c.Replay(context.Background(), fwd, 1000)
	if err != nil || res.Acknowledged != 2 || res.Failed != 1 {
		t.Fatalf("Replay = %+v, %v, want 2 acknowledged, 1 failed", res, err)
	}
	if fwd.count("pending-untouched") != 0 {
		t.Errorf("Replay forwarded a pending receipt")
	}
	dead, err := e.c.List(context.Background(), ListOptions{State: StateDead})
	if err != nil || len(dead) != 1 || dead[0].ID != rs[1].ID {
		t.Fatalf("List(dead) = %+v, %v, want only b", dead, err)
	}
	if d := dead[0]; d.Attempts != 2 || !strings.Contains(d.LastError, "still down") || !d.FailedAt.Equal(e.clock.Now()) {
		t.Errorf("b after replay = %+v, want 2 attempts, new error, failed_at now", d)
	}
	for _, r := range []Receipt{rs[0], rs[2]} {
		if got := e.get(t, r.ID); got.State != StateAcknowledged {
			t.Errorf("%s after replay = %s, want acknowledged", r.ID, got.State)
		}
	}
}

func TestReplayHonoursRateAndContext(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	deadReceipts(t, e, "a", "b", "c")
	ctx, cancel := context.WithCancel(context.Background())
	fwd := ForwarderFunc(func(context.Context, Delivery) error {
		cancel() // the operator interrupts after the first replay
		return nil
	})
	res, err := e.c.Replay(ctx, fwd, 0.001) // one per 1000 s: the second waits
	if !errors.Is(err, context.Canceled) || res.Acknowledged != 1 {
		t.Errorf("Replay(interrupted) = %+v, %v, want 1 acknowledged, context.Canceled", res, err)
	}
}

func TestResendDropAndErrors(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	ctx := context.Background()
	rs := deadReceipts(t, e, "a", "b")
	pending := e.send(t, "p")
	e.clock.Advance(time.Minute)
	r, err := e.c.Resend(ctx, rs[0].ID)
	if err != nil || r.State != StatePending || r.Attempts != 0 || !r.NextAttemptAt.Equal(e.clock.Now()) || !r.FailedAt.IsZero() {
		t.Errorf("Resend = %+v, %v, want pending, 0 attempts, due now", r, err)
	}
	if !strings.Contains(r.LastError, "rejected") {
		t.Errorf("Resend().LastError = %q, want the previous error kept for reference", r.LastError)
	}
	if err := e.c.Drop(ctx, rs[1].ID); err != nil {
		t.Errorf("Drop(dead) = %v, want nil", err)
	}
	if _, err := e.c.Get(ctx, rs[1].ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(dropped) = %v, want ErrNotFound", err)
	}
	if err := e.c.Drop(ctx, pending.ID); !errors.Is(err, ErrNotDead) {
		t.Errorf("Drop(pending) = %v, want ErrNotDead", err)
	}
	for name, f := range map[string]func() error{
		"Drop":   func() error { return e.c.Drop(ctx, 42) },
		"Resend": func() error { _, err := e.c.Resend(ctx, 42); return err },
		"Get":    func() error { _, err := e.c.Get(ctx, 42); return err },
	} {
		if err := f(); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "000000000000002a") {
			t.Errorf("%s(unknown) = %v, want ErrNotFound naming the id", name, err)
		}
	}
}

func TestExportDLQSeedFormat(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	var buf bytes.Buffer
	n, err := e.c.ExportDLQ(context.Background(), &buf)
	if err != nil || n != 0 || strings.TrimSpace(buf.String()) != "[]" {
		t.Fatalf("ExportDLQ(empty) = %d, %v, %q, want 0, nil, []", n, err, buf.String())
	}
	rs := deadReceipts(t, e, "a", "b")
	buf.Reset()
	n, err = e.c.ExportDLQ(context.Background(), &buf)
	if err != nil || n != 2 {
		t.Fatalf("ExportDLQ = %d, %v, want 2, nil", n, err)
	}
	var entries []struct {
		Receipt struct {
			ID         string `json:"id"`
			BundleHash string `json:"bundle_hash"`
			Bundle     []byte `json:"bundle"`
			State      string `json:"state"`
			LastError  string `json:"last_error"`
		} `json:"receipt"`
		FailedAt time.Time `json:"failed_at"`
		Attempts int       `json:"attempts"`
	}
	if err := json.Unmarshal(buf.Bytes(), &entries); err != nil {
		t.Fatalf("json.Unmarshal(export) = %v\n%s", err, buf.String())
	}
	byID := map[string]Receipt{rs[0].ID.String(): rs[0], rs[1].ID.String(): rs[1]}
	for _, en := range entries {
		r, ok := byID[en.Receipt.ID]
		if !ok || en.Receipt.BundleHash != r.BundleHash || HashBundle(en.Receipt.Bundle) != r.BundleHash ||
			en.Attempts != 1 || !en.FailedAt.Equal(e.clock.Now()) || en.Receipt.State != "dead" || en.Receipt.LastError == "" {
			t.Errorf("export entry = %+v, want receipt %s with bundle, attempts 1, failed_at now", en, en.Receipt.ID)
		}
	}
}

func TestPruneRemovesOldAcknowledged(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Retention = time.Hour }, Deps{})
	ctx := context.Background()
	old := e.send(t, "old")
	deadReceipts(t, e, "dead")
	if _, err := e.c.Flush(ctx, &recorder{}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(30 * time.Minute)
	recent := e.send(t, "recent")
	if _, err := e.c.Flush(ctx, &recorder{}); err != nil {
		t.Fatal(err)
	}
	pending := e.send(t, "pending")
	e.clock.Advance(31 * time.Minute)
	n, err := e.c.Prune(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v, want 1", n, err)
	}
	if _, err := e.c.Get(ctx, old.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(old acknowledged) = %v, want ErrNotFound", err)
	}
	for _, id := range []ID{recent.ID, pending.ID} {
		e.get(t, id)
	}
	if s, _ := e.c.Stats(ctx); s.Dead != 1 {
		t.Errorf("Stats = %+v, want the dead receipt kept", s)
	}
}

func TestListFiltersAndPaginates(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	ctx := context.Background()
	// Insert ids on both sides of the signed boundary.
	want := []ID{1, 0x7fffffffffffffff, 0x8000000000000000, 0xffffffffffffffff}
	err := sqlitedb.InTx(ctx, e.db, func(tx *sql.Tx) error {
		for _, id := range []ID{want[3], want[1], want[0], want[2]} {
			in := sendInput{id: id, hash: HashBundle(nil), sender: "s", dest: DestinationHTTP, now: e.clock.Now(), bundle: []byte{}}
			if _, _, err := e.c.insertReceipt(ctx, tx, in); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []ID
	var after ID
	for {
		page, err := e.c.List(ctx, ListOptions{After: after, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page[0].ID)
		after = page[0].ID
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("paged List = %v, want %v", got, want)
	}
	if rs, err := e.c.List(ctx, ListOptions{State: StateDead}); err != nil || len(rs) != 0 {
		t.Errorf("List(dead) = %v, %v, want none", rs, err)
	}
	if _, err := e.c.List(ctx, ListOptions{State: "bogus"}); err == nil {
		t.Errorf("List(bogus state) = nil error, want error")
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, nil, Deps{Registerer: reg})
	ctx := context.Background()
	e.send(t, "ok")
	e.send(t, "retry")
	e.send(t, "dead")
	if got := testutil.ToFloat64(e.c.m.pending); got != 3 {
		t.Errorf("courier_pending after 3 sends = %v, want 3", got)
	}
	fwd := &recorder{fail: map[string]error{"retry": ServerError(errBoom), "dead": ClientError(errBoom)}}
	if _, err := e.c.Flush(ctx, fwd); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"courier_flush_attempt_total", e.c.m.flushAttempts, 3},
		{"courier_flush_failure_total", e.c.m.flushFailures, 2},
		{"courier_receipt_retries_total", e.c.m.retries, 1},
		{"courier_dead_letter_queue_size", e.c.m.dlqSize, 1},
		{"courier_pending", e.c.m.pending, 1},
		{`courier_receipts_total{acknowledged,true}`, e.c.m.receipts.WithLabelValues("acknowledged", "true"), 1},
		{`courier_receipts_total{server_error,false}`, e.c.m.receipts.WithLabelValues("server_error", "false"), 1},
		{`courier_receipts_total{client_error,false}`, e.c.m.receipts.WithLabelValues("client_error", "false"), 1},
	}
	for _, c := range checks {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n < 8 {
		t.Errorf("GatherAndCount = %d, %v, want the 6 metrics (8 series) registered", n, err)
	}
	// A second courier on the same registry is refused, not a panic.
	if _, err := Open(ctx, e.db, DefaultConfig(), Deps{Registerer: reg}); err == nil {
		t.Error("Open with duplicate registration = nil error, want error")
	}
}

func TestRunFlushesWhenWokenBySend(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.FlushInterval = time.Hour }, Deps{})
	ctx, cancel := context.WithCancel(context.Background())
	delivered := make(chan string, 10)
	fwd := ForwarderFunc(func(_ context.Context, d Delivery) error {
		delivered <- string(d.Bundle)
		return nil
	})
	done := make(chan error)
	go func() { done <- e.c.Run(ctx, fwd) }()
	e.send(t, "wake me")
	if got := <-delivered; got != "wake me" {
		t.Errorf("delivered %q, want %q", got, "wake me")
	}
	err := sqlitedb.InTx(ctx, e.db, func(tx *sql.Tx) error {
		_, err := e.c.SendTx(ctx, tx, []byte("in tx"), "alice", SendOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-delivered; got != "in tx" {
		t.Errorf("delivered %q, want %q", got, "in tx")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
}

func TestCloseRefusesSends(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	e.c.Close()
	if _, err := e.c.Send(context.Background(), []byte("x"), "alice", SendOptions{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Send after Close = %v, want ErrClosed", err)
	}
	e.c.Close() // idempotent
}

func TestMigrationsRoundTrip(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	ctx := context.Background()
	migs, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlitedb.MigrateDown(ctx, e.db, Component, migs, 0); err != nil {
		t.Fatalf("MigrateDown = %v, want nil", err)
	}
	if _, err := e.db.Exec(`SELECT 1 FROM courier_receipts`); err == nil {
		t.Error("courier_receipts exists after MigrateDown")
	}
	if err := sqlitedb.Migrate(ctx, e.db, Component, migs, 0); err != nil {
		t.Fatalf("Migrate = %v, want nil", err)
	}
}

func TestParseID(t *testing.T) {
	tests := []struct {
		in   string
		want ID
		ok   bool
	}{
		{"000000000000002a", 42, true},
		{"FFFFFFFFFFFFFFFF", math.MaxUint64, true},
		{"0000000000000000", 0, false},
		{"2a", 0, false},
		{"000000000000002g", 0, false},
		{"+00000000000002a", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseID(tt.in)
		if got != tt.want || (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidID)) {
			t.Errorf("ParseID(%q) = %v, %v, want %v, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
