package courier

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// ListOptions filters List.
type ListOptions struct {
	State       State       // empty: every state
	Destination Destination // empty: every destination
	After       ID          // keyset pagination: only ids above After (0: from the start)
	Limit       int         // at most this many (<= 0: 1000)
}

// List returns receipts ordered by id, without their bundles.
func (c *Courier) List(ctx context.Context, opts ListOptions) ([]Receipt, error) {
	if opts.State != "" && !opts.State.Valid() {
		return nil, fmt.Errorf("courier list: state %q: want pending, acknowledged or dead: %w", opts.State, ErrInvalidSend)
	}
	if opts.Destination != "" {
		if _, err := ParseDestination(string(opts.Destination)); err != nil {
			return nil, fmt.Errorf("courier list: %w", err)
		}
	}
	if opts.Limit <= 0 {
		opts.Limit = 1000
	}
	// Ids are stored as signed integers; order by the unsigned value so
	// that After works on the hex form.
	// (id < 0, id) sorts like the unsigned value. The state is spelled as
	// a literal (it was validated) so that SQLite uses its partial index.
	where := "1"
	if opts.State != "" {
		where = "state = '" + string(opts.State) + "'"
	}
	if opts.Destination != "" {
		where += " AND destination = '" + string(opts.Destination) + "'"
	}
	after := dbID(opts.After)
	rows, err := c.db.QueryContext(ctx, `SELECT `+receiptColumns+` FROM courier_receipts
		WHERE `+where+` AND ((id < 0) > (? < 0) OR ((id < 0) = (? < 0) AND id > ?))
		ORDER BY id < 0, id LIMIT ?`,
		after, after, after, opts.Limit)
	if err != nil {
		return nil, fmt.Errorf("courier list: %w", err)
	}
	defer rows.Close()
	var out []Receipt
	for rows.Next() {
		r, err := scanReceipt(rows)
		if err != nil {
			return nil, fmt.Errorf("courier list: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("courier list: %w", err)
	}
	return out, nil
}

// Get returns one receipt with its bundle.
func (c *Courier) Get(ctx context.Context, id ID) (Receipt, error) {
	row := c.db.QueryRowContext(ctx, `SELECT `+receiptColumns+`, bundle
		FROM courier_receipts r JOIN courier_bundles b ON b.seq = r.seq WHERE r.id = ?`, dbID(id))
	var bundle []byte
	r, err := scanReceipt(row, &bundle)
	if errors.Is(err, sql.ErrNoRows) {
		return Receipt{}, fmt.Errorf("courier get %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Receipt{}, fmt.Errorf("courier get %s: %w", id, err)
	}
	if bundle == nil {
		bundle = []byte{}
	}
	r.Bundle = bundle
	return r, nil
}

// Resend puts a receipt (in any state) back to pending, due now, with its
// attempts reset to zero.
func (c *Courier) Resend(ctx context.Context, id ID) (Receipt, error) {
	now := millis(c.clock.Now())
	res, err := c.db.ExecContext(ctx, `UPDATE courier_receipts
		SET state = 'pending', attempts = 0, next_attempt_at = ?, failed_at = NULL, acknowledged_at = NULL
		WHERE id = ?`, now, dbID(id))
	if err != nil {
		return Receipt{}, fmt.Errorf("courier resend %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return Receipt{}, fmt.Errorf("courier resend %s: %w", id, ErrNotFound)
	}
	if err := c.refreshGauges(ctx); err != nil {
		c.log.Warn("courier refresh gauges", "err", err)
	}
	c.notify()
	r, err := c.Get(ctx, id)
	r.Bundle = nil
	return r, err
}

// Drop deletes a dead-lettered receipt. Receipts in other states are
// refused with ErrNotDead.
func (c *Courier) Drop(ctx context.Context, id ID) error {
	res, err := c.db.ExecContext(ctx, `DELETE FROM courier_receipts WHERE id = ? AND state = 'dead'`, dbID(id))
	if err != nil {
		return fmt.Errorf("courier drop %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		r, err := c.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("courier drop %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("courier drop: %w", err)
		}
		return fmt.Errorf("courier drop %s: state is %s: %w", id, r.State, ErrNotDead)
	}
	if err := c.refreshGauges(ctx); err != nil {
		c.log.Warn("courier refresh gauges", "err", err)
	}
	return nil
}

// ReplayResult counts what Replay did.
type ReplayResult struct {
	Acknowledged int    // delivered and removed from the DLQ
	Failed       int    // still dead, with the new error recorded
	LastError    string // the last delivery error seen, if any
}

// Replay forwards every dead-lettered receipt of fwd's destination once
// (receipts of other destinations are left alone), one at a time, at most
// rate per second (rate <= 0: Config.ReplayRate). Successes leave the DLQ
// (acknowledged); failures stay dead with attempts, failed_at and
// last_error updated. It stops early, with ctx's error, when ctx ends.
func (c *Courier) Replay(ctx context.Context, fwd Forwarder, rate float64) (ReplayResult, error) {
	dest := fwd.Destination()
	if _, err := ParseDestination(string(dest)); err != nil {
		return ReplayResult{}, fmt.Errorf("courier replay: forwarder %w", err)
	}
	if !(rate > 0) {
		rate = c.cfg.ReplayRate
	}
	interval := time.Duration(float64(time.Second) / rate)
	var res ReplayResult
	var last time.Time
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	var after ID
	for {
		page, err := c.List(ctx, ListOptions{State: StateDead, Destination: dest, After: after, Limit: 100})
		if err != nil {
			return res, fmt.Errorf("courier replay: %w", err)
		}
		if len(page) == 0 {
			break
		}
		after = page[len(page)-1].ID
		for _, r := range page {
			if !last.IsZero() {
				if wait := interval - time.Since(last); wait > 0 {
					timer.Reset(wait)
					select {
					case <-ctx.Done():
						return res, fmt.Errorf("courier replay: %w", ctx.Err())
					case <-timer.C:
					}
				}
			}
			last = time.Now()
			if err := c.replayOne(ctx, fwd, r.ID, &res); err != nil {
				return res, fmt.Errorf("courier replay: %w", err)
			}
		}
	}
	if err := c.refreshGauges(ctx); err != nil {
		c.log.Warn("courier refresh gauges", "err", err)
	}
	return res, nil
}

func (c *Courier) replayOne(ctx context.Context, fwd Forwarder, id ID, res *ReplayResult) error {
	r, err := c.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil // dropped meanwhile
	}
	if err != nil {
		return err
	}
	if r.State != StateDead || r.Destination != fwd.Destination() {
		return nil
	}
	o := c.forwardOne(ctx, fwd, Delivery{ReceiptID: r.ID, BundleHash: r.BundleHash,
		IdempotencyKey: r.IdempotencyKey, Sender: r.Sender, Destination: r.Destination, Bundle: r.Bundle,
		Attempt: r.Attempts + 1})
	if o.abandoned {
		return ctx.Err()
	}
	at := millis(o.at)
	ctx = context.WithoutCancel(ctx) // record what happened even if interrupted now
	if o.err == nil {
		_, err = c.db.ExecContext(ctx, `UPDATE courier_receipts
			SET state = 'acknowledged', attempts = attempts + 1, acknowledged_at = ?, last_error = ''
			WHERE id = ? AND state = 'dead'`, at, dbID(id))
		if err == nil {
			res.Acknowledged++
			c.m.receipts.WithLabelValues(string(StateAcknowledged), "true").Inc()
		}
	} else {
		class, _ := Classify(o.err)
		res.LastError = sanitizeError(o.err)
		_, err = c.db.ExecContext(ctx, `UPDATE courier_receipts
			SET attempts = attempts + 1, failed_at = ?, last_error = ?
			WHERE id = ? AND state = 'dead'`, at, res.LastError, dbID(id))
		if err == nil {
			res.Failed++
			c.m.flushFailures.Inc()
			c.m.receipts.WithLabelValues(string(class), "false").Inc()
		}
	}
	if err != nil {
		return fmt.Errorf("record replay of %s: %w", id, err)
	}
	return nil
}

// DLQEntry is one element of ExportDLQ's JSON array (what `courier dlq
// export` writes): the receipt (with its bundle, base64), failed_at and attempts.
type DLQEntry struct {
	Receipt  Receipt   `json:"receipt"`
	FailedAt time.Time `json:"failed_at"`
	Attempts int       `json:"attempts"`
}

// ExportDLQ writes every dead-lettered receipt to w as a JSON array of
// DLQEntry and returns how many it wrote.
func (c *Courier) ExportDLQ(ctx context.Context, w io.Writer) (int, error) {
	if _, err := io.WriteString(w, "["); err != nil {
		return 0, fmt.Errorf("courier export dlq: %w", err)
	}
	n := 0
	var after ID
	for {
		page, err := c.List(ctx, ListOptions{State: StateDead, After: after, Limit: 100})
		if err != nil {
			return n, fmt.Errorf("courier export dlq: %w", err)
		}
		if len(page) == 0 {
			break
		}
		after = page[len(page)-1].ID
		for _, r := range page {
			full, err := c.Get(ctx, r.ID)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return n, fmt.Errorf("courier export dlq: %w", err)
			}
			b, err := json.Marshal(DLQEntry{Receipt: full, FailedAt: full.FailedAt, Attempts: full.Attempts})
			if err != nil {
				return n, fmt.Errorf("courier export dlq: %w", err)
			}
			sep := "\n  "
			if n > 0 {
				sep = ",\n  "
			}
			if _, err := io.WriteString(w, sep+string(b)); err != nil {
				return n, fmt.Errorf("courier export dlq: %w", err)
			}
			n++
		}
	}
	end := "]\n"
	if n > 0 {
		end = "\n]\n"
	}
	if _, err := io.WriteString(w, end); err != nil {
		return n, fmt.Errorf("courier export dlq: %w", err)
	}
	return n, nil
}
