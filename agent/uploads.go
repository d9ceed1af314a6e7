package agent

import (
	"context"
	"errors"
	"time"

	"provideragent/uploader"
)

// uploadLoop uploads pending checkpoint tiles every interval (and sooner
// when the retry decorator gives a next_retry_at hint) until ctx ends.
func (a *Agent) uploadLoop(ctx context.Context) error {
	interval := a.up.interval
	if interval <= 0 {
		interval = 10 * time.Second
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		next := interval
		pending, err := a.up.uploader.EnumeratePending(ctx, "")
		switch {
		case err != nil:
			a.logger.Warn("checkpoint upload: list pending tiles", "err", err)
		case len(pending) > 0:
			rep, err := a.up.uploader.UploadPending(ctx, uploader.Request{})
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					a.logger.Warn("checkpoint upload failed", "pending", len(pending), "err", err)
				}
				break
			}
			a.logger.Info("checkpoint tiles uploaded", "outcome", rep.Outcome, "accepted", rep.Accepted,
				"rejected", rep.Rejected, "gave_up", len(rep.GaveUp), "bytes", rep.BytesUploaded)
			if !rep.NextRetryAt.IsZero() {
				if d := rep.NextRetryAt.Sub(a.now()); d > 0 && d < next {
					next = d
				}
			}
		}
		t.Reset(next)
	}
}
