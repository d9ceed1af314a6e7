package courier

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"provideragent/internal/sqlitedb"
)

// recordBatch is the most outcomes recorded in one transaction.
const recordBatch = 512

// recordLinger: a batch smaller than min waits up to wait for more outcomes.
var recordLinger = struct {
	min  int
	wait time.Duration
}{min: 64, wait: 2 * time.Millisecond}

// FlushResult counts what one Flush did.
type FlushResult struct {
	Acknowledged int    // newly acknowledged
	DeadLettered int    // moved to the DLQ
	Retried      int    // failed and rescheduled
	Deferred     int    // not ready yet: rescheduled, no attempt counted
	LastError    string // the last delivery error seen, if any
}

// outcome is one finished (or abandoned) delivery.
type outcome struct {
	id        ID
	attempts  int // attempts before this one
	err       error
	at        time.Time
	abandoned bool // ctx ended: release the claim without counting an attempt
}

// Flush delivers every receipt of fwd's destination due at the moment it is
// called (receipts of other destinations are left alone): it claims them in
// batches, forwards them with Config.Concurrency workers, and records
// the outcomes in batched transactions. A failing receipt is rescheduled (or
// dead-lettered), never waited for, so one Flush forwards each receipt at
// most once. If ctx ends, deliveries not yet finished are released and
// Flush returns ctx's error with what it had recorded.
func (c *Courier) Flush(ctx context.Context, fwd Forwarder) (FlushResult, error) {
	dest := fwd.Destination()
	if _, err := ParseDestination(string(dest)); err != nil {
		return FlushResult{}, fmt.Errorf("courier flush: forwarder %w", err)
	}
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	start := c.clock.Now()
	dbctx := context.WithoutCancel(ctx) // outcomes are recorded even on shutdown

	// Buffers let the producer claim the next batch, and workers keep
	// forwarding, while the recorder's commit holds the single connection.
	jobs := make(chan Delivery, c.cfg.ClaimBatch)
	outcomes := make(chan outcome, 2*c.cfg.ClaimBatch+c.cfg.Concurrency)
	var workers sync.WaitGroup
	for range c.cfg.Concurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for d := range jobs {
				outcomes <- c.forwardOne(ctx, fwd, d)
			}
		}()
	}
	recorded := make(chan recordResult, 1)
	go func() { recorded <- c.recordLoop(dbctx, outcomes) }()

	var claimErr error
claiming:
	for {
		if err := ctx.Err(); err != nil {
			claimErr = err
			break
		}
		batch, err := c.claim(ctx, start, dest, c.cfg.ClaimBatch)
		if err != nil {
			claimErr = err
			break
		}
		for i, d := range batch {
			select {
			case jobs <- d:
			case <-ctx.Done():
				for _, d := range batch[i:] {
					outcomes <- outcome{id: d.ReceiptID, abandoned: true, at: start}
				}
				claimErr = ctx.Err()
				break claiming
			}
		}
		if len(batch) < c.cfg.ClaimBatch {
			break
		}
	}
	close(jobs)
	workers.Wait()
	close(outcomes)
	rr := <-recorded
	if err := c.refreshGauges(dbctx); err != nil {
		c.log.Warn("courier refresh gauges", "err", err)
	}
	if claimErr == nil && rr.abandoned > 0 {
		claimErr = ctx.Err()
	}
	if claimErr == nil {
		claimErr = rr.err
	}
	if claimErr != nil {
		return rr.res, fmt.Errorf("courier flush: %w", claimErr)
	}
	return rr.res, nil
}

// forwardOne runs one delivery with the forward timeout, turning a panic in
// the forwarder into a server error.
func (c *Courier) forwardOne(ctx context.Context, fwd Forwarder, d Delivery) (o outcome) {
	o = outcome{id: d.ReceiptID, attempts: d.Attempt - 1}
	fctx, cancel := context.WithTimeout(ctx, c.cfg.ForwardTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			o.err = ServerError(fmt.Errorf("forwarder panicked: %v", p))
			o.at = c.clock.Now()
		}
	}()
	c.m.flushAttempts.Inc()
	o.err = fwd.Forward(fctx, d)
	o.at = c.clock.Now()
	if o.err != nil && ctx.Err() != nil {
		o.abandoned = true // shutting down, not the receipt's fault
	}
	return o
}

// claim hides up to n receipts of dest due at start from other flushes for
// ClaimTimeout and returns them as deliveries.
func (c *Courier) claim(ctx context.Context, start time.Time, dest Destination, n int) ([]Delivery, error) {
	var out []Delivery
	err := c.bookkeeping(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		rows, err := tx.QueryContext(ctx, `UPDATE courier_receipts SET next_attempt_at = ?
			WHERE seq IN (SELECT seq FROM courier_receipts
				WHERE state = 'pending' AND destination = ? AND next_attempt_at <= ?
				ORDER BY next_attempt_at, seq LIMIT ?)
			RETURNING seq, id, bundle_hash, COALESCE(idempotency_key, ''), sender, attempts`,
			millis(start.Add(c.cfg.ClaimTimeout)), string(dest), millis(start), n)
		if err != nil {
			return err
		}
		defer rows.Close()
		seqs := make([]int64, 0, n)
		for rows.Next() {
			var d Delivery
			var seq, id int64
			if err := rows.Scan(&seq, &id, &d.BundleHash, &d.IdempotencyKey, &d.Sender, &d.Attempt); err != nil {
				return err
			}
			d.ReceiptID = ID(uint64(id))
			d.Destination = dest
			d.Attempt++
			out = append(out, d)
			seqs = append(seqs, seq)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		if len(seqs) == 0 {
			return nil
		}
		seqsJSON, _ := json.Marshal(seqs)
		brows, err := tx.QueryContext(ctx, `SELECT seq, bundle FROM courier_bundles
			WHERE seq IN (SELECT value FROM json_each(?))`, string(seqsJSON))
		if err != nil {
			return err
		}
		defer brows.Close()
		bundles := make(map[int64][]byte, len(seqs))
		for brows.Next() {
			var seq int64
			var b []byte
			if err := brows.Scan(&seq, &b); err != nil {
				return err
			}
			if b == nil {
				b = []byte{}
			}
			bundles[seq] = b
		}
		if err := brows.Err(); err != nil {
			return err
		}
		for i := range out {
			out[i].Bundle = bundles[seqs[i]]
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim due receipts: %w", err)
	}
	return out, nil
}

// bookkeeping runs fn in a transaction on the database's connection with
// synchronous=NORMAL, then restores FULL. Claims and delivery outcomes need
// atomicity but not an fsync each: after a power loss the last few may be
// forgotten, which only makes a receipt due again (delivery is at least
// once). Sends always commit with FULL. If FULL cannot be restored the
// connection is discarded, so a relaxed connection never serves a Send.
func (c *Courier) bookkeeping(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	conn, err := c.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA synchronous = NORMAL`); err != nil {
		return err
	}
	defer func() {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA synchronous = FULL`); rerr != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			if err == nil {
				err = fmt.Errorf("restore synchronous=FULL: %w", rerr)
			}
		}
	}()
	return sqlitedb.RunTx(ctx, conn, fn)
}

type recordResult struct {
	res       FlushResult
	abandoned int // deliveries released because ctx ended
	err       error
}

// recordLoop stores outcomes in batches: it takes one, then all that are
// already waiting (up to recordBatch), and commits them together.
func (c *Courier) recordLoop(ctx context.Context, outcomes <-chan outcome) recordResult {
	var rr recordResult
	batch := make([]outcome, 0, recordBatch)
	linger := time.NewTimer(0)
	defer linger.Stop()
	<-linger.C
	for o := range outcomes {
		batch = append(batch[:0], o)
		// Take what is waiting; if that is a small batch, linger briefly
		// for more so that a busy flush commits in fewer transactions.
		lingering := false
	drain:
		for len(batch) < recordBatch {
			select {
			case o, ok := <-outcomes:
				if !ok {
					break drain
				}
				batch = append(batch, o)
				continue
			default:
			}
			if lingering || len(batch) >= recordLinger.min {
				break
			}
			lingering = true
			linger.Reset(recordLinger.wait)
			select {
			case o, ok := <-outcomes:
				if !ok {
					break drain
				}
				batch = append(batch, o)
			case <-linger.C:
				break drain
			}
		}
		for _, o := range batch {
			if o.abandoned {
				rr.abandoned++
			}
		}
		if err := c.record(ctx, batch, &rr.res); err != nil {
			// The receipts stay claimed and come back after ClaimTimeout.
			c.log.Error("courier record outcomes", "outcomes", len(batch), "err", err)
			rr.err = err
		}
	}
	return rr
}

type decided struct {
	o        outcome
	class    ErrorClass
	dead     bool
	deferred bool
}

// record applies one batch of outcomes in a transaction, then updates the
// metrics and res. Rows no longer pending (an operator dropped or changed
// them meanwhile) are left alone.
func (c *Courier) record(ctx context.Context, batch []outcome, res *FlushResult) error {
	ds := make([]decided, len(batch))
	acked := make([]int64, 0, len(batch))
	var ackAt time.Time
	for i, o := range batch {
		ds[i] = decided{o: o}
		if !o.abandoned && o.err == nil {
			acked = append(acked, dbID(o.id))
			if o.at.After(ackAt) {
				ackAt = o.at
			}
		}
	}
	err := c.bookkeeping(ctx, func(tx *sql.Tx) error {
		if len(acked) > 0 {
			ids, _ := json.Marshal(acked)
			if _, err := tx.ExecContext(ctx, `UPDATE courier_receipts
				SET state = 'acknowledged', attempts = attempts + 1, acknowledged_at = ?, last_error = ''
				WHERE id IN (SELECT value FROM json_each(?)) AND state = 'pending'`, millis(ackAt), string(ids)); err != nil {
				return fmt.Errorf("acknowledge %d receipts: %w", len(acked), err)
			}
		}
		var st stmts
		defer st.close()
		for i := range ds {
			if err := c.apply(ctx, tx, &st, &ds[i]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record outcomes: %w", err)
	}
	for _, d := range ds {
		switch {
		case d.o.abandoned:
		case d.deferred:
			res.Deferred++
		case d.o.err == nil:
			res.Acknowledged++
			c.m.receipts.WithLabelValues(string(StateAcknowledged), "true").Inc()
		default:
			res.LastError = sanitizeError(d.o.err)
			c.m.flushFailures.Inc()
			c.m.receipts.WithLabelValues(string(d.class), "false").Inc()
			if d.dead {
				res.DeadLettered++
			} else {
				res.Retried++
				c.m.retries.Inc()
			}
		}
	}
	return nil
}

// stmts are the failure-path statements, prepared once per transaction.
type stmts struct {
	release, dead, retry, deferred *sql.Stmt
}

func (s *stmts) get(ctx context.Context, tx *sql.Tx, p **sql.Stmt, query string) (*sql.Stmt, error) {
	if *p == nil {
		st, err := tx.PrepareContext(ctx, query)
		if err != nil {
			return nil, err
		}
		*p = st
	}
	return *p, nil
}

func (s *stmts) close() {
	for _, st := range []*sql.Stmt{s.release, s.dead, s.retry, s.deferred} {
		if st != nil {
			st.Close()
		}
	}
}

// apply writes one released or failed outcome (successes are done in bulk).
func (c *Courier) apply(ctx context.Context, tx *sql.Tx, st *stmts, d *decided) error {
	o := d.o
	if !o.abandoned && o.err == nil {
		return nil
	}
	id, at := dbID(o.id), millis(o.at)
	var (
		q   *sql.Stmt
		err error
	)
	switch {
	case o.abandoned:
		if q, err = st.get(ctx, tx, &st.release, `UPDATE courier_receipts SET next_attempt_at = ?
			WHERE id = ? AND state = 'pending'`); err == nil {
			_, err = q.ExecContext(ctx, at, id)
		}
	default:
		class, retryAfter := Classify(o.err)
		d.class = class
		attempts := o.attempts + 1
		msg := sanitizeError(o.err)
		if class == ClassDeferred {
			d.deferred = true
			if retryAfter <= 0 {
				retryAfter = c.cfg.InitialBackoff
			}
			next := o.at.Add(max(min(retryAfter, c.cfg.MaxRetryAfter), time.Millisecond))
			if q, err = st.get(ctx, tx, &st.deferred, `UPDATE courier_receipts
				SET next_attempt_at = ?, last_error = ?
				WHERE id = ? AND state = 'pending'`); err == nil {
				_, err = q.ExecContext(ctx, millis(next), msg, id)
			}
			break
		}
		if class == ClassClient || attempts >= c.cfg.MaxAttempts {
			d.dead = true
			if q, err = st.get(ctx, tx, &st.dead, `UPDATE courier_receipts
				SET state = 'dead', attempts = attempts + 1, failed_at = ?, last_error = ?
				WHERE id = ? AND state = 'pending'`); err == nil {
				_, err = q.ExecContext(ctx, at, msg, id)
			}
		} else {
			next := c.retryAt(o.at, attempts, class, retryAfter)
			if q, err = st.get(ctx, tx, &st.retry, `UPDATE courier_receipts
				SET attempts = attempts + 1, next_attempt_at = ?, last_error = ?
				WHERE id = ? AND state = 'pending'`); err == nil {
				_, err = q.ExecContext(ctx, millis(next), msg, id)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("receipt %s: %w", o.id, err)
	}
	return nil
}

// retryAt is when a failed receipt is due again: after a rate limit its
// Retry-After (capped by MaxRetryAfter) if given, otherwise the backoff.
func (c *Courier) retryAt(now time.Time, attempts int, class ErrorClass, retryAfter time.Duration) time.Time {
	if class == ClassRateLimited && retryAfter > 0 {
		retryAfter = min(retryAfter, c.cfg.MaxRetryAfter)
		return now.Add(max(retryAfter, time.Millisecond))
	}
	return NextAttemptAt(c.backoff, now, attempts, c.rnd())
}

// NextDue returns when the earliest pending receipt of dest is due (ok =
// false when none is pending).
func (c *Courier) NextDue(ctx context.Context, dest Destination) (time.Time, bool, error) {
	var next sql.NullInt64
	err := c.db.QueryRowContext(ctx,
		`SELECT MIN(next_attempt_at) FROM courier_receipts WHERE state = 'pending' AND destination = ?`,
		string(dest)).Scan(&next)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("courier next due: %w", err)
	}
	if !next.Valid {
		return time.Time{}, false, nil
	}
	return fromMillis(next.Int64), true, nil
}

// Prune deletes acknowledged receipts older than Config.Retention and
// returns how many it deleted.
func (c *Courier) Prune(ctx context.Context) (int, error) {
	cutoff := c.clock.Now().Add(-c.cfg.Retention)
	res, err := c.db.ExecContext(ctx, `DELETE FROM courier_receipts
		WHERE state = 'acknowledged' AND acknowledged_at < ?`, millis(cutoff))
	if err != nil {
		return 0, fmt.Errorf("courier prune: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("courier prune: %w", err)
	}
	return int(n), nil
}

// Run flushes fwd's receipts to fwd until ctx ends: right away, whenever
// Send or SendTx wakes it, when the earliest rescheduled receipt falls due,
// and at least every FlushInterval. It prunes acknowledged receipts about
// once a minute. Errors are logged, not returned; Run returns nil when ctx
// ends. Failed deliveries are logged as a summary (see retryLog): one line
// for the first flush that retried or dead-lettered receipts, then at most
// one line per RetryLogInterval counting what happened since.
func (c *Courier) Run(ctx context.Context, fwd Forwarder) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	var lastPrune time.Time
	rl := retryLog{dest: fwd.Destination()}
	for {
		started := c.clock.Now()
		res, err := c.Flush(ctx, fwd)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			c.log.Error("courier flush", "err", err)
		} else if res.Acknowledged+res.DeadLettered+res.Retried > 0 {
			c.log.Debug("courier flush", "acknowledged", res.Acknowledged,
				"dead_lettered", res.DeadLettered, "retried", res.Retried)
		}
		rl.add(res)
		if rl.due(started) {
			c.logRetries(ctx, &rl, started)
		}
		if now := c.clock.Now(); now.Sub(lastPrune) >= time.Minute || now.Before(lastPrune) {
			lastPrune = now
			if n, err := c.Prune(ctx); err != nil {
				c.log.Error("courier prune", "err", err)
			} else if n > 0 {
				c.log.Info("courier pruned acknowledged receipts", "count", n)
			}
		}
		wait := c.cfg.FlushInterval
		if err == nil {
			next, ok, nerr := c.NextDue(ctx, fwd.Destination())
			if nerr != nil && !errors.Is(nerr, context.Canceled) {
				c.log.Error("courier next due", "err", nerr)
			}
			if ok {
				wait = min(wait, max(next.Sub(c.clock.Now()), 0))
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		case <-timer.C:
		}
	}
}

// RetryLogInterval is the least time between two of Run's summary lines of
// failed deliveries: a relay outage that fails 10,000 receipts at every
// flush logs one line a minute, not one per receipt or per flush.
const RetryLogInterval = time.Minute

// retryLog summarises Run's failed deliveries since its last line.
type retryLog struct {
	dest    Destination
	last    time.Time // when the last line was written; zero: never
	since   time.Time // when the first failure counted now was seen
	flushes int       // flushes with a failure since the last line
	retried int
	dead    int
	acked   int // acknowledged since the first failure counted now
	lastErr string
}

// add counts one flush's result.
func (l *retryLog) add(res FlushResult) {
	if res.Retried+res.DeadLettered > 0 {
		l.flushes++
		l.retried += res.Retried
		l.dead += res.DeadLettered
		l.lastErr = res.LastError
	}
	if l.flushes > 0 {
		l.acked += res.Acknowledged
	}
}

// due reports whether a line is to be written at now: something failed
// since the last line, and the last line is at least RetryLogInterval old
// (or there was none, or the clock went backwards).
func (l *retryLog) due(now time.Time) bool {
	if l.flushes == 0 {
		return false
	}
	if l.since.IsZero() {
		l.since = now
	}
	return l.last.IsZero() || now.Sub(l.last) >= RetryLogInterval || now.Before(l.last)
}

// logRetries writes the summary line and starts a new one: INFO while the
// failed receipts are only rescheduled, WARN once any was dead-lettered.
func (c *Courier) logRetries(ctx context.Context, l *retryLog, now time.Time) {
	level, msg := slog.LevelInfo, "courier deliveries failed, retrying with backoff"
	if l.dead > 0 {
		level, msg = slog.LevelWarn, "courier deliveries failed, some dead-lettered (provider-agent courier dlq list)"
	}
	attrs := []any{"destination", string(l.dest), "retried", l.retried, "dead_lettered", l.dead,
		"acknowledged", l.acked, "flushes", l.flushes, "since", l.since.UTC().Format(time.RFC3339),
		"last_error", l.lastErr}
	if pending, err := c.count(ctx, StatePending); err == nil {
		attrs = append(attrs, "pending", pending)
	}
	if dead, err := c.count(ctx, StateDead); err == nil {
		attrs = append(attrs, "dlq", dead)
	}
	c.log.Log(ctx, level, msg, attrs...)
	*l = retryLog{dest: l.dest, last: now}
}
