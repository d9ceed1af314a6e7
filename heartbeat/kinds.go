package heartbeat

import (
	"fmt"
	"strconv"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
	"provideragent/lease"
)

// Event kinds of the wire protocol. The first four are Paygress v1 kinds; the
// lease grant, the heartbeat shard and the checkpoint record (KindCheckpoint,
// checkpoint.go) are ours.
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
	// KindPromotion is a promotion announcement (Paygress's, and ours once a
	// claim won, under PromotionDTag) or a promotion claim or withdrawn
	// marker of the claim step (ours, under ClaimDTag, which Paygress never
	// reads).
	KindPromotion = 38386
	// KindLeaseGrant is a lease grant from an allowed issuer (ours).
	KindLeaseGrant = 38388
	// KindHeartbeatShard continues a stored heartbeat whose list of held
	// workloads did not fit one relay event (ours): same created_at, the
	// next part of the list. Paygress never reads it, so its uptime history
	// counts one heartbeat per beat.
	KindHeartbeatShard = 38389
)

// SchemaVersion is the Paygress payload schema version this package writes and
// the only one it reads. Payloads without a version field are version 1.
const SchemaVersion = 1

// HeartbeatBucket is the width of a stored heartbeat's d-tag bucket
// (Paygress HEARTBEAT_BUCKET_SECS).
const HeartbeatBucket = 60 * time.Second

// PaygressLiveWindow is Paygress's LIVE_HEARTBEAT_WINDOW_SECS (kinds.rs):
// its "is this provider alive now" lookups (query.rs get_latest_heartbeat and
// get_latest_heartbeats_multi, which its standby watchdog and discovery use)
// read the stored heartbeats of the last 300 s.
const PaygressLiveWindow = 300 * time.Second

// DefaultHeartbeatTTL is the one heartbeat TTL: the NIP-40 expiration written
// on our heartbeats is created_at + DefaultHeartbeatTTL unless an operator
// raises it (heartbeat.ttl). It is Paygress's live window, for two reasons:
//   - Paygress's live lookups read back 300 s, and its standby watchdog
//     measures a primary's silence from the newest heartbeat it finds there
//     (or, finding none, from the slot's reservation time). On a relay that
//     deletes expired events a shorter TTL would hide a stopped primary's
//     last heartbeat before the window ends, and one shorter than its 180 s
//     silence threshold would make a Paygress standby promote early.
//   - It is above MinHeartbeatTTL for the default lease (stale 180 s +
//     max_skew 30 s), so a heartbeat never expires while it can still count.
//
// Why not longer: Paygress writes no expiration, and its uptime history
// (query.rs calculate_uptime: stored heartbeats over N days, one expected
// per 60 s bucket) sees at most TTL worth of ours on relays that delete
// expired events (5 of 1440 a day at 300 s). Nothing in Paygress v1 (at
// 6ffebd5) calls it: its running code reads the live window, and its
// dashboard snapshot a 600 s last-seen window (a provider gone for 5 to 10
// minutes then shows no last-seen time). A short TTL keeps relays from
// storing 1440 heartbeats per provider and day for ever; operators who want
// the history kept raise heartbeat.ttl.
const DefaultHeartbeatTTL = PaygressLiveWindow

// MinHeartbeatTTL is the smallest heartbeat TTL a provider may use with a
// lease of the given stale and max skew, and the TTL the agent uses when
// none is configured: at least Paygress's live window, and at least stale
// plus max skew. A heartbeat counts for stale after its created_at on the
// observer's clock, and an agent re-reads one stale window of stored
// heartbeats when it (re)subscribes, so the event must neither be expired
// for the observer nor deleted by a relay whose clock may lead by up to max
// skew until then.
func MinHeartbeatTTL(stale, maxSkew time.Duration) time.Duration {
	return max(PaygressLiveWindow, stale+maxSkew)
}

// EpochUnknown is the epoch of a Paygress-made revocation or promotion, which
// carries none. Real epochs start at 1.
const EpochUnknown uint64 = 0

// Tag values.
const (
	tagHeartbeat  = "paygress-heartbeat"
	tagPaygress   = "paygress"
	tagRevocation = "paygress-revocation"
	tagPromoted   = "paygress-promoted"
	tagClaim      = "provider-agent-claim"
	tagShard      = "provider-agent-heartbeat"
	versionTag    = "1"
)

// Limits on decoded values.
const (
	// MaxWorkloadIDBytes bounds a workload id: lease.MaxIDBytes, so that
	// every d tag and filter item built from one fits 255 bytes.
	MaxWorkloadIDBytes = lease.MaxIDBytes
	// maxUnix bounds decoded unix timestamps (year 9999) so conversion to
	// time.Time and arithmetic on them never overflow.
	maxUnix = 253402300799
)

// HeartbeatDTag returns the d tag of a stored heartbeat:
// paygress:heartbeat:v1:<provider>:<timestamp/60>, provider as written in the
// content's provider_npub (Paygress and we write lowercase hex there,
// publish.rs builds the tag from the same value).
func HeartbeatDTag(provider string, timestamp uint64) string {
	return "paygress:heartbeat:v1:" + provider + ":" + strconv.FormatUint(timestamp/uint64(HeartbeatBucket/time.Second), 10)
}

// ShardDTag returns the d tag of shard i (1 and up) of a beat:
// provider-agent:heartbeat:v1:<provider hex>:<timestamp/60>:<i>.
func ShardDTag(provider string, timestamp uint64, i int) string {
	return "provider-agent:heartbeat:v1:" + provider + ":" + strconv.FormatUint(timestamp/uint64(HeartbeatBucket/time.Second), 10) +
		":" + strconv.Itoa(i)
}

// RevocationDTag returns the d tag of a revocation:
// paygress:revocation:v1:<primary>:<workload_id>, primary as written in the
// content's primary_provider_npub (lowercase hex, as Paygress writes it).
func RevocationDTag(primary, workloadID string) string {
	return "paygress:revocation:v1:" + primary + ":" + workloadID
}

// dTagNamesKey reports whether d is the d tag build makes from the key hexKey
// in any form a writer may have used: as written in the content (written),
// lowercase hex (what Paygress and we write) or NIP-19 npub (what older
// agents wrote). Paygress itself never checks these d tags.
func dTagNamesKey(d, written, hexKey string, build func(key string) string) bool {
	if d == build(hexKey) || d == build(written) {
		return true
	}
	npub, err := identity.NpubOfHex(hexKey)
	return err == nil && d == build(npub)
}

// PromotionDTag returns the d tag of a promotion announcement:
// paygress:promoted:v1:<workload_id>. A Paygress node reads every event
// under it as "a peer already promoted", whatever else it says.
func PromotionDTag(workloadID string) string {
	return "paygress:promoted:v1:" + workloadID
}

// ClaimDTag returns the d tag of a provider's promotion claims and withdrawn
// markers for a workload (ours): provider-agent:claim:v1:<workload_id>. It
// keeps the claim step out of Paygress's announcement query, so a claim in
// flight, a losing one or a withdrawn one is never read as a promotion.
func ClaimDTag(workloadID string) string {
	return "provider-agent:claim:v1:" + workloadID
}

// ClaimsFilter is the filter for the promotion claims, withdrawn markers
// and Paygress announcements (kind 38386) of ids, by both d tags: two tag
// values per workload, so at most 128 ids keep it within 256 values.
func ClaimsFilter(ids []string) nostr.Filter {
	ds := make([]string, 0, 2*len(ids))
	for _, id := range ids {
		ds = append(ds, ClaimDTag(id), PromotionDTag(id))
	}
	return nostr.Filter{Kinds: []int{KindPromotion}, Tags: nostr.TagMap{"d": ds}}
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
		return fmt.Errorf("workload id %.40q... is %d bytes, max %d (every tag and relay filter item built from it must fit 255 bytes)",
			id, len(id), MaxWorkloadIDBytes)
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
	case KindHeartbeatShard:
		return "heartbeat_shard"
	case KindCheckpoint:
		return "checkpoint"
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
