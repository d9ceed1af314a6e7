package courier

import (
	"errors"
	"time"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrNotFound: no receipt has that id.
	ErrNotFound = errors.New("courier: receipt not found")
	// ErrBundleTooLarge: the bundle exceeds Config.MaxBundleBytes.
	ErrBundleTooLarge = errors.New("courier: bundle too large")
	// ErrInvalidSend: the sender or idempotency key is malformed.
	ErrInvalidSend = errors.New("courier: invalid send")
	// ErrIdempotencyConflict: the idempotency key was already used for a
	// bundle with a different hash. The first receipt is returned with it.
	ErrIdempotencyConflict = errors.New("courier: idempotency key already used for a different bundle")
	// ErrNotDead: a DLQ operation named a receipt that is not dead-lettered.
	ErrNotDead = errors.New("courier: receipt is not in the dead-letter queue")
	// ErrInvalidID: a receipt id is not 16 hex digits.
	ErrInvalidID = errors.New("courier: invalid receipt id")
	// ErrInvalidConfig: Config.Validate failed.
	ErrInvalidConfig = errors.New("courier: invalid config")
	// ErrClosed: the Courier was closed.
	ErrClosed = errors.New("courier: closed")
)

// ErrorClass says how a failed delivery is handled.
type ErrorClass string

const (
	// ClassClient: the far side rejected the bundle; retrying cannot help,
	// the receipt is dead-lettered at once.
	ClassClient ErrorClass = "client_error"
	// ClassRateLimited: the far side asked us to slow down; retried after
	// its Retry-After (capped) or the backoff.
	ClassRateLimited ErrorClass = "rate_limited"
	// ClassServer: the far side failed; retried with backoff.
	ClassServer ErrorClass = "server_error"
	// ClassTransport: the far side was not reached (also any unclassified
	// error); retried with backoff.
	ClassTransport ErrorClass = "transport_error"
	// ClassDeferred: the receipt is not ready to go yet (a precondition of
	// the forwarder does not hold, e.g. the agent's workload is not stopped
	// yet); it is due again after RetryAfter (capped by MaxRetryAfter; 0 =
	// InitialBackoff) without counting an attempt or a failure, so waiting
	// never holds a delivery worker and never dead-letters the receipt.
	ClassDeferred ErrorClass = "deferred"
)

// DeliveryError is a classified Forward error.
type DeliveryError struct {
	Class      ErrorClass
	RetryAfter time.Duration // for ClassRateLimited and ClassDeferred; 0 = default
	Err        error
}

func (e *DeliveryError) Error() string {
	if e.Err == nil {
		return string(e.Class)
	}
	return string(e.Class) + ": " + e.Err.Error()
}

func (e *DeliveryError) Unwrap() error { return e.Err }

// ClientError marks err as permanent: the receipt goes to the DLQ at once.
func ClientError(err error) error { return &DeliveryError{Class: ClassClient, Err: err} }

// RateLimited marks err as a rate limit; retryAfter (0 = unknown) is
// honoured up to Config.MaxRetryAfter.
func RateLimited(err error, retryAfter time.Duration) error {
	if retryAfter < 0 {
		retryAfter = 0
	}
	return &DeliveryError{Class: ClassRateLimited, RetryAfter: retryAfter, Err: err}
}

// Deferred marks err as "not ready yet": the receipt is due again after
// after, and the attempt is not counted (see ClassDeferred).
func Deferred(err error, after time.Duration) error {
	return &DeliveryError{Class: ClassDeferred, RetryAfter: max(after, 0), Err: err}
}

// ServerError marks err as a far-side failure worth retrying.
func ServerError(err error) error { return &DeliveryError{Class: ClassServer, Err: err} }

// TransportError marks err as a network failure worth retrying.
func TransportError(err error) error { return &DeliveryError{Class: ClassTransport, Err: err} }

// Classify returns the class of a Forward error and its Retry-After.
// Unclassified errors are transport errors.
func Classify(err error) (ErrorClass, time.Duration) {
	var de *DeliveryError
	if errors.As(err, &de) {
		switch de.Class {
		case ClassClient, ClassRateLimited, ClassServer, ClassTransport, ClassDeferred:
			return de.Class, de.RetryAfter
		}
	}
	return ClassTransport, 0
}
