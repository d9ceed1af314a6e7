package uploader_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"provideragent/internal/logcapture"
	"provideragent/uploader"
)

// TestRetryLogsAtInfo: the retry decorator's operational lines, as the
// seed had them. Every in-call retry writes one INFO "retrying partial
// upload" line with its attempt number, the sleep and the tiles still
// pending; a loop that ends with tiles still rejected writes one INFO
// line with the retry count, what is left, the give-ups and the next
// retry hint; the start of the decorator is one INFO line with its budget.
func TestRetryLogsAtInfo(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	store := newStore(t, clock)
	tiles := addTiles(t, store, "w1", 5, 64)
	stubborn := idsOf(tiles[1:3]) // rejected on every call
	inner := &scriptedInner{store: store, reject: func(_ int, tile uploader.Tile) bool {
		return slices.Contains(stubborn, tile.ID)
	}}
	h := logcapture.New(slog.LevelDebug)
	cfg := uploader.DefaultConfig() // 3 in-call retries, base 2 s, 5 attempts per tile
	r, err := uploader.NewRetryUploader(inner, cfg, uploader.Deps{Store: store, Clock: clock, Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	if on := h.Find("uploader retry decorator on"); len(on) != 1 || on[0].Level != slog.LevelInfo {
		t.Errorf("decorator start lines = %v, want one INFO line", on)
	} else if n, _ := on[0].Int("max_in_call_retries"); n != 3 {
		t.Errorf("decorator start line max_in_call_retries = %d, want 3", n)
	}

	rep, err := r.UploadPending(ctx, uploader.Request{Workload: "w1"})
	if err != nil || rep.Outcome != uploader.OutcomePartial || rep.RetryCount != 3 {
		t.Fatalf("UploadPending = %s retries %d, %v, want partial after 3 retries", rep.Outcome, rep.RetryCount, err)
	}
	retries := h.Find("retrying partial upload")
	if len(retries) != 3 {
		t.Fatalf("%d \"retrying partial upload\" lines, want 3 (one per retry): %v", len(retries), h.Records())
	}
	for i, line := range retries {
		if line.Level != slog.LevelInfo {
			t.Errorf("retry line %d level = %v, want INFO", i+1, line.Level)
		}
		if n, _ := line.Int("attempt_number"); n != int64(i+1) {
			t.Errorf("retry line %d attempt_number = %d, want %d", i+1, n, i+1)
		}
		if got, want := line.Attrs["sleep"].Duration(), cfg.Backoff().Delay(i, 0); got != want {
			t.Errorf("retry line %d sleep = %v, want %v", i+1, got, want)
		}
		if n, _ := line.Int("remaining_pending_count"); n != 2 {
			t.Errorf("retry line %d remaining_pending_count = %d, want 2", i+1, n)
		}
	}
	ended := h.Find("upload retry loop ended with tiles rejected")
	if len(ended) != 1 {
		t.Fatalf("%d \"upload retry loop ended\" lines, want 1: %v", len(ended), h.Records())
	}
	end := ended[0]
	if end.Level != slog.LevelInfo {
		t.Errorf("end line level = %v, want INFO", end.Level)
	}
	for key, want := range map[string]int64{"retry_count": 3, "remaining_pending_count": 2, "gave_up": 0} {
		if n, _ := end.Int(key); n != want {
			t.Errorf("end line %s = %d, want %d", key, n, want)
		}
	}
	if got := end.Attrs["next_retry_at"].Time(); !got.Equal(rep.NextRetryAt) || got.IsZero() {
		t.Errorf("end line next_retry_at = %v, want the report's hint %v", got, rep.NextRetryAt)
	}
	// A pass that succeeds at once logs no retry line.
	before := len(h.Records())
	stubborn = nil
	if _, err := r.UploadPending(ctx, uploader.Request{Workload: "w1"}); err != nil {
		t.Fatal(err)
	}
	if extra := h.Records()[before:]; len(extra) != 0 {
		t.Errorf("lines of a clean pass = %v, want none", extra)
	}
}
