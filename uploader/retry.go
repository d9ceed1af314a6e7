package uploader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
)

// RetryUploader decorates an Uploader with a bounded in-call retry loop on
// partial outcomes and a per-tile attempt budget. Success and failure pass
// through; errors propagate at once without sleeping; after a partial
// outcome every rejected tile's upload_attempts is incremented, tiles that
// reach MaxPerTileAttempts are given up (one audit row, one ERROR log, one
// metric), and while pending tiles remain and the in-call budget allows it
// sleeps min(base^n, cap) and calls the inner uploader again. Because
// accepted tiles are marked uploaded, a retry re-sends only unacknowledged
// tiles.
type RetryUploader struct {
	inner   Uploader
	store   *Store
	clock   Clock
	logger  *slog.Logger
	metrics *Metrics
	cfg     Config
}

var _ Uploader = (*RetryUploader)(nil)

// NewRetryUploader wraps inner. deps.Store is required; nil Clock, Logger and
// Metrics get the system clock, a discarding logger and unregistered
// counters.
func NewRetryUploader(inner Uploader, cfg Config, deps Deps) (*RetryUploader, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new retry uploader: %w", err)
	}
	if inner == nil || deps.Store == nil {
		return nil, errors.New("new retry uploader: nil inner uploader or store")
	}
	clock := deps.Clock
	if clock == nil {
		clock = SystemClock{}
	}
	r := &RetryUploader{
		inner:   inner,
		store:   deps.Store,
		clock:   clock,
		logger:  loggerOrDiscard(deps.Logger),
		metrics: deps.Metrics.orNop(),
		cfg:     cfg,
	}
	r.logger.Info("uploader retry decorator on",
		"max_in_call_retries", cfg.MaxInCallRetries, "max_per_tile_attempts", cfg.MaxPerTileAttempts,
		"backoff_base_s", cfg.BackoffBase, "backoff_cap", cfg.BackoffCap)
	return r, nil
}

// Inner returns the decorated uploader.
func (r *RetryUploader) Inner() Uploader { return r.inner }

// EnumeratePending delegates to the inner uploader unchanged.
func (r *RetryUploader) EnumeratePending(ctx context.Context, workload string) ([]Tile, error) {
	return r.inner.EnumeratePending(ctx, workload)
}

// ConfirmState delegates to the inner uploader unchanged.
func (r *RetryUploader) ConfirmState(ctx context.Context) error {
	return r.inner.ConfirmState(ctx)
}

// UploadPending calls the inner uploader and retries partial outcomes in a
// bounded loop (never recursion). See the type comment for the rules.
func (r *RetryUploader) UploadPending(ctx context.Context, req Request) (Report, error) {
	rep, err := r.inner.UploadPending(ctx, req)
	if err != nil || rep.Outcome != OutcomePartial {
		// AC-1/AC-12: success, failure and errors of the first call pass
		// through unchanged, with no sleep and no store access.
		return rep, err
	}
	agg := newAggregate()
	retries := 0
	for {
		if retries > 0 {
			rep, err = r.inner.UploadPending(ctx, req)
		}
		agg.add(rep)
		if err != nil {
			return agg.report(rep.Outcome, retries), err
		}
		if rep.Outcome != OutcomePartial {
			return agg.report(rep.Outcome, retries), nil
		}
		if err := r.countRejections(ctx, rep, agg); err != nil {
			return agg.report(OutcomePartial, retries), err
		}
		pending, cerr := r.store.CountPending(ctx, req.Workload)
		if cerr != nil {
			return agg.report(OutcomePartial, retries), fmt.Errorf("retry upload: %w", cerr)
		}
		if pending == 0 || retries >= r.cfg.MaxInCallRetries {
			final := agg.report(OutcomePartial, retries)
			if pending > 0 {
				final.NextRetryAt = r.cfg.NextRetryAt(r.clock.Now())
			}
			r.logger.Info("upload retry loop ended with tiles rejected", "retry_count", retries,
				"remaining_pending_count", pending, "gave_up", len(final.GaveUp), "next_retry_at", final.NextRetryAt)
			return final, nil
		}
		retries++
		d := r.cfg.Backoff().Delay(retries-1, 0)
		r.metrics.Retries.Inc()
		r.logger.Info("retrying partial upload", "attempt_number", retries, "sleep", d,
			"remaining_pending_count", pending)
		if serr := r.clock.Sleep(ctx, d); serr != nil {
			return agg.report(OutcomePartial, retries), fmt.Errorf("retry upload: %w", serr)
		}
	}
}

// countRejections increments the counter of every rejected tile of rep and
// gives up the tiles that reached the budget.
func (r *RetryUploader) countRejections(ctx context.Context, rep Report, agg *aggregate) error {
	for _, t := range rep.Tiles {
		if t.Verdict != VerdictRejected {
			continue
		}
		n, err := r.store.IncrementUploadAttempts(ctx, t.TileID)
		if err != nil {
			return fmt.Errorf("retry upload: %w", err)
		}
		if n < r.cfg.MaxPerTileAttempts {
			continue
		}
		gave, err := r.store.GiveUp(ctx, t.TileID, n, t.Reason)
		if err != nil {
			return fmt.Errorf("retry upload: %w", err)
		}
		if !gave {
			continue
		}
		agg.gaveUp = append(agg.gaveUp, t.TileID)
		r.metrics.Giveups.Inc()
		r.logger.Error("tile upload given up; needs operator review (provider-agent tiles reset)",
			"tile_id", t.TileID, "sha256", t.SHA256, "attempts", n, "last_rejection_reason", t.Reason)
	}
	return nil
}

// aggregate merges the reports of the inner calls of one UploadPending: the
// last verdict of each tile wins.
type aggregate struct {
	tiles  map[int64]TileResult
	bytes  int64
	gaveUp []int64
}

func newAggregate() *aggregate { return &aggregate{tiles: map[int64]TileResult{}} }

func (a *aggregate) add(rep Report) {
	for _, t := range rep.Tiles {
		a.tiles[t.TileID] = t
	}
	a.bytes += rep.BytesUploaded
}

func (a *aggregate) report(outcome Outcome, retries int) Report {
	rep := Report{Outcome: outcome, Tiles: make([]TileResult, 0, len(a.tiles)), BytesUploaded: a.bytes,
		RetryCount: retries, GaveUp: append([]int64(nil), a.gaveUp...)}
	for _, t := range a.tiles {
		rep.Tiles = append(rep.Tiles, t)
		if t.Verdict == VerdictAccepted {
			rep.Accepted++
		} else {
			rep.Rejected++
		}
	}
	if rep.Outcome == OutcomeSuccess && rep.Rejected > 0 {
		// The last pass succeeded but earlier rejected tiles were given up.
		rep.Outcome = OutcomePartial
	}
	sort.Slice(rep.Tiles, func(i, j int) bool { return rep.Tiles[i].TileID < rep.Tiles[j].TileID })
	return rep
}
