package uploader

import (
	"context"
	"errors"
	"time"
)

// Uploader uploads a store's pending tiles. The Blossom uploader and the
// RetryUploader decorator both implement it, so either can be used where
// the other is expected.
type Uploader interface {
	// UploadPending uploads the pending tiles the request selects, marks the
	// accepted ones uploaded and reports a per-tile verdict. A server that
	// cannot be reached is an error, not a partial outcome.
	UploadPending(ctx context.Context, req Request) (Report, error)
	// EnumeratePending lists the pending tiles of workload ("" = all).
	EnumeratePending(ctx context.Context, workload string) ([]Tile, error)
	// ConfirmState checks that uploading is possible now: the store
	// answers and enough servers respond.
	ConfirmState(ctx context.Context) error
}

// Request selects what UploadPending uploads.
type Request struct {
	// Workload restricts the upload to one workload's tiles; "" = all.
	Workload string
	// Limit caps the tiles per inner call; <= 0 = every pending tile.
	Limit int
}

// Outcome summarises one UploadPending call.
type Outcome string

const (
	// OutcomeSuccess: every selected tile was accepted (or none was pending).
	OutcomeSuccess Outcome = "success"
	// OutcomePartial: at least one tile was rejected by the servers; the
	// rejected tiles stay pending and may be retried.
	OutcomePartial Outcome = "partial"
	// OutcomeFailure: the servers refused the whole batch for reasons that
	// are not about any one tile (every answer was 401, 402 or 403:
	// authorisation or payment), so a retry would not help.
	OutcomeFailure Outcome = "failure"
)

// Verdict is a server's answer about one tile.
type Verdict string

const (
	// VerdictAccepted: enough servers stored the tile and confirmed its hash.
	VerdictAccepted Verdict = "accepted"
	// VerdictRejected: the tile was not accepted; Reason says why.
	VerdictRejected Verdict = "rejected"
)

// TileResult is the per-tile status of an upload.
type TileResult struct {
	TileID  int64
	SHA256  string
	Size    int64
	Verdict Verdict
	// Reason is the server's X-Reason (or what went wrong) for a rejection.
	Reason string
	// Code is the HTTP status of the deciding response (0 if none).
	Code int
}

// Report is the result of UploadPending: a verdict per tile and the
// batch's outcome.
type Report struct {
	Outcome  Outcome
	Tiles    []TileResult // final verdict per tile, in tile id order
	Accepted int
	Rejected int
	// BytesUploaded counts the bytes of accepted PUTs, summed over servers.
	BytesUploaded int64
	// RetryCount is how many in-call retries the decorator made.
	RetryCount int
	// GaveUp lists tiles moved to upload_giveup during this call.
	GaveUp []int64
	// NextRetryAt is a hint for when to call again after the retry budget
	// ran out with tiles still pending; zero otherwise.
	NextRetryAt time.Time
}

// Uploader errors.
var (
	// ErrServerUnreachable means too few servers could be reached to place
	// every tile on the required number of servers.
	ErrServerUnreachable = errors.New("blossom server unreachable")
	// ErrBadConfig means a Config failed validation.
	ErrBadConfig = errors.New("bad uploader config")
)

// Clock is the uploader's source of time; tests inject a fake.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done, returning ctx.Err() then.
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Sleep waits for d or ctx.
func (SystemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
