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
		if err != nil {
			a.logger.Warn("checkpoint upload: list pending tiles", "err", err)
			t.Reset(next)
			continue
		}
		// A durable workload's tiles go to its lease's servers with its
		// checkpoint (checkpoint.go), not here.
		var ids []string
		count := map[string]int{}
		for _, tile := range pending {
			if count[tile.Workload] == 0 && !a.ckpt.durableWorkload(tile.Workload) {
				ids = append(ids, tile.Workload)
			}
			count[tile.Workload]++
		}
		for _, id := range ids {
			rep, err := a.up.uploader.UploadPending(ctx, uploader.Request{Workload: id})
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					a.logger.Warn("checkpoint upload failed", "workload", id, "pending", count[id], "err", err)
				}
				continue
			}
			a.logger.Info("checkpoint tiles uploaded", "workload", id, "outcome", rep.Outcome, "accepted", rep.Accepted,
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
