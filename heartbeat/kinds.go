package heartbeat

import (
	"fmt"
	"strconv"
	"time"
)

// Event kinds of the wire protocol. The first four are Paygress v1 kinds; the
// lease grant is ours.
const (
	// KindHeartbeat is the stored (NIP-33 addressable) heartbeat, one d tag per
	// provider and minute.
	KindHeartbeat = 38384
	// KindHeartbeatEphemeral is the NIP-16 ephemeral heartbeat: live presence,
	// not stored by relays, no d tag.
	KindHeartbeatEphemeral = 20384
	// KindRevocation is a lease revocation published by a primary that has
	// stopped (fenced) its workload.
	KindRevocation = 38385
	// KindPromotion is a promotion announcement (Paygress) or promotion claim
	// (ours, with an epoch and a status).
	KindPromotion = 38386
	// KindLeaseGrant is a lease grant from an allowed issuer (ours).
	KindLeaseGrant = 38388
)

// SchemaVersion is the Paygress payload schema version this package writes and
// the only one it reads. Payloads without a version field are version 1.
const SchemaVersion = 1

// HeartbeatBucket is the width of a stored heartbeat's d-tag bucket
// (Paygress HEARTBEAT_BUCKET_SECS).
const HeartbeatBucket = 60 * time.Second

// DefaultHeartbeatTTL is the NIP-40 expiration written on heartbeats when the
// builder is given none: Paygress's live window (LIVE_HEARTBEAT_WINDOW_SECS).
const DefaultHeartbeatTTL = 300 * time.Second

// EpochUnknown is the epoch of a Paygress-made revocation or promotion, which
// carries none. Real epochs start at 1.
const EpochUnknown uint64 = 0

// Tag values.
const (
	tagHeartbeat  = "paygress-heartbeat"
	tagPaygress   = "paygress"
	tagRevocation = "paygress-revocation"
	tagPromoted   = "paygress-promoted"
	versionTag    = "1"
)

// Limits on decoded values.
const (
	// MaxWorkloadIDBytes bounds a workload id (it is embedded in d tags).
	MaxWorkloadIDBytes = 256
	// maxUnix bounds decoded unix timestamps (year 9999) so conversion to
	// time.Time and arithmetic on them never overflow.
	maxUnix = 253402300799
)

// HeartbeatDTag returns the d tag of a stored heartbeat:
// paygress:heartbeat:v1:<npub>:<timestamp/60>.
func HeartbeatDTag(npub string, timestamp uint64) string {
	return "paygress:heartbeat:v1:" + npub + ":" + strconv.FormatUint(timestamp/uint64(HeartbeatBucket/time.Second), 10)
}

// RevocationDTag returns the d tag of a revocation:
// paygress:revocation:v1:<primary npub>:<workload_id>.
func RevocationDTag(primaryNpub, workloadID string) string {
	return "paygress:revocation:v1:" + primaryNpub + ":" + workloadID
}

// PromotionDTag returns the d tag of a promotion announcement or claim:
// paygress:promoted:v1:<workload_id>.
func PromotionDTag(workloadID string) string {
	return "paygress:promoted:v1:" + workloadID
}

// LeaseDTag returns the d tag of a lease grant: provider-agent:lease:v1:<workload_id>.
func LeaseDTag(workloadID string) string {
	return "provider-agent:lease:v1:" + workloadID
}

// ValidateWorkloadID reports whether id can name a workload: 1 to
// MaxWorkloadIDBytes bytes of printable ASCII without spaces (the rule of
// lease.Spec, since ids end up in d tags and SQLite keys).
func ValidateWorkloadID(id string) error {
	if id == "" {
		return fmt.Errorf("workload id is empty")
	}
	if len(id) > MaxWorkloadIDBytes {
		return fmt.Errorf("workload id is %d bytes, max %d", len(id), MaxWorkloadIDBytes)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("workload id has byte 0x%02x at %d, want printable ascii without spaces", c, i)
		}
	}
	return nil
}

func unixTime(s uint64) time.Time { return time.Unix(int64(s), 0).UTC() }

func kindName(kind int) string {
	switch kind {
	case KindHeartbeat:
		return "heartbeat"
	case KindHeartbeatEphemeral:
		return "heartbeat_ephemeral"
	case KindRevocation:
		return "revocation"
	case KindPromotion:
		return "promotion"
	case KindLeaseGrant:
		return "lease_grant"
	}
	return "other"
}

// NextCreatedAt is the created_at (unix seconds) for a replaceable event
// whose previous version under the same d tag had created_at last (0:
// none): now, but strictly after last. Relays keep only the newest event
// per (kind, pubkey, d tag) and break ties by the lower id (NIP-01), so a
// replacement made in the same second (a withdrawn marker after its claim)
// would otherwise lose about half the time.
func NextCreatedAt(last int64, now time.Time) int64 {
	return max(now.Unix(), last+1)
}
