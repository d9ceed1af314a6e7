package heartbeat

import (
	"errors"
	"fmt"
)

// RejectReason says why an event was not accepted. The values are the labels
// of the heartbeat_events_rejected_total metric.
type RejectReason string

// Rejection reasons, in the order the ingest pipeline checks them.
const (
	// ReasonMalformed: raw bytes are not a Nostr event, or id, pubkey or sig
	// are not lowercase hex of the right length.
	ReasonMalformed RejectReason = "malformed"
	// ReasonTooLarge: raw event, content, tag count or a tag value over its limit.
	ReasonTooLarge RejectReason = "too_large"
	// ReasonBadKind: not one of the protocol's kinds.
	ReasonBadKind RejectReason = "bad_kind"
	// ReasonFuture: created_at is more than MaxSkew ahead of local time.
	ReasonFuture RejectReason = "future"
	// ReasonStale: a heartbeat whose created_at is older than HeartbeatMaxAge.
	ReasonStale RejectReason = "stale"
	// ReasonExpired: NIP-40 expiration (or a lease's expires_at) has passed.
	ReasonExpired RejectReason = "expired"
	// ReasonBadTags: required tags missing, or tags disagree with the content.
	ReasonBadTags RejectReason = "bad_tags"
	// ReasonBadID: the id is not the hash of the event.
	ReasonBadID RejectReason = "bad_id"
	// ReasonBadSig: the schnorr signature does not verify.
	ReasonBadSig RejectReason = "bad_sig"
	// ReasonDecode: the content is not a valid payload of the kind.
	ReasonDecode RejectReason = "decode"
	// ReasonWrongSigner: signed by someone the signer rule does not allow.
	ReasonWrongSigner RejectReason = "wrong_signer"
	// ReasonUnknownWorkload: a revocation for a workload whose primary the
	// policy does not know.
	ReasonUnknownWorkload RejectReason = "unknown_workload"
	// ReasonNotNamed: a lease grant that names this provider neither as
	// primary nor as standby (a relay that ignores the #p filter on live
	// events sends every grant to every provider).
	ReasonNotNamed RejectReason = "not_named"
	// ReasonCanceled: the context ended while waiting for a concurrent
	// verification of the same event.
	ReasonCanceled RejectReason = "canceled"
)

// AllReasons lists every RejectReason (for metrics and docs).
var AllReasons = []RejectReason{
	ReasonMalformed, ReasonTooLarge, ReasonBadKind, ReasonFuture, ReasonStale,
	ReasonExpired, ReasonBadTags, ReasonBadID, ReasonBadSig, ReasonDecode,
	ReasonWrongSigner, ReasonUnknownWorkload, ReasonNotNamed, ReasonCanceled,
}

// ErrRejected is wrapped by every RejectError, so errors.Is(err, ErrRejected)
// tells a rejected event from other failures.
var ErrRejected = errors.New("event rejected")

// RejectError is the error returned for an event that was not accepted.
type RejectError struct {
	// Reason classifies the rejection.
	Reason RejectReason
	// Detail says what exactly was wrong (never contains secrets).
	Detail string
	// Err is an underlying cause, if any.
	Err error
}

func (e *RejectError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("event rejected: %s: %s: %v", e.Reason, e.Detail, e.Err)
	}
	return fmt.Sprintf("event rejected: %s: %s", e.Reason, e.Detail)
}

// Unwrap returns ErrRejected and the cause.
func (e *RejectError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrRejected, e.Err}
	}
	return []error{ErrRejected}
}

// ReasonOf returns the RejectReason carried by err, or "" when err is not a
// rejection.
func ReasonOf(err error) RejectReason {
	var re *RejectError
	if errors.As(err, &re) {
		return re.Reason
	}
	return ""
}

func reject(reason RejectReason, format string, args ...any) *RejectError {
	return &RejectError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

func rejectErr(reason RejectReason, err error, format string, args ...any) *RejectError {
	return &RejectError{Reason: reason, Detail: fmt.Sprintf(format, args...), Err: err}
}
