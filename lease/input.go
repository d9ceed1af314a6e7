package lease

import "time"

// WorkloadEpoch is one (workload, epoch) pair a provider lists in its
// heartbeats: it holds that workload at that epoch.
type WorkloadEpoch struct {
	ID    string `json:"id"`
	Epoch uint64 `json:"epoch"`
	// Checkpoint is, for a durable workload, the newest checkpoint its
	// holder published at Epoch (on K servers, its record on M relays);
	// zero: none yet, or not durable. A heartbeat that lists it is the
	// evidence a required restore never goes behind (RestoreCheckpoint
	// .Evidence).
	Checkpoint CheckpointMark `json:"ckpt,omitzero"`
}

// CheckpointMark names one published checkpoint of an epoch: its record's
// seq and its manifest blob's sha256 (lower-case hex).
type CheckpointMark struct {
	Seq      uint64 `json:"seq"`
	Manifest string `json:"sha256"`
}

// IsZero reports whether the mark names no checkpoint.
func (c CheckpointMark) IsZero() bool { return c.Seq == 0 }

// Heartbeat is one heartbeat event as delivered by one relay, after the
// driver verified its signature (heartbeat/ does that).
type Heartbeat struct {
	// Provider is the signer's hex pubkey.
	Provider string
	// Relay is the URL of the relay that delivered it; it is looked up as
	// given first, then after NormalizeRelayURL. Unknown relays are ignored.
	Relay string
	// EventID is the event's id (for logs; replays are caught by CreatedAt).
	EventID string
	// CreatedAt is the event's created_at (the signer's clock).
	CreatedAt time.Time
	// ReceivedAt is when this provider's agent received it (local clock);
	// zero means the input's now.
	ReceivedAt time.Time
	// Listed is true when the heartbeat carries our workloads field (even
	// empty). A Paygress peer lists none; then any heartbeat of it counts as
	// a Live claim of every workload it holds.
	Listed bool
	// Workloads are the (workload, epoch) pairs the provider holds (those of
	// this shard when the beat is sharded).
	Workloads []WorkloadEpoch
	// Shard and Shards place this event in a beat whose list of held
	// workloads is split over Shards events with the same created_at (a
	// list too long for one relay event). Shards 0 or 1 means one event.
	// Every shard refreshes the claims of the workloads it lists; the beat
	// counts for the provider's relay table (quorum, and this provider's
	// own health on the relay) only once all its shards came from the
	// relay, so a relay that dropped part of a holder's list never passes
	// for one on which the holder claims everything.
	Shard, Shards int
	// Unordered marks this provider's own heartbeat fed ahead of events
	// that reached the driver from the same relay before it (it verifies
	// those concurrently, and feeds its own beats at once for quorum): it
	// shows no silence on the relay (lease/watch.go) until the driver
	// reports, with RelayShown, that everything before it has been fed.
	Unordered bool
}

// MaxShards bounds Heartbeat.Shards.
const MaxShards = 4096

// Revocation is a lease revocation (kind 38385) after signature checks. The
// machine accepts it only from the workload's current holder at its epoch.
type Revocation struct {
	Workload  string
	Signer    string
	Epoch     uint64
	Successor string
	Standbys  []string
	Reason    string
	// CreatedAt is the event's created_at (the signer's clock). A
	// revocation made before the lease was granted (Spec.CreatedAt, allowing
	// MaxSkew) belongs to an earlier grant of the same workload and is
	// ignored: revocations are addressable and stay on relays for ever, and
	// epochs start again at a re-grant. Zero means unknown (not checked);
	// drivers pass it.
	CreatedAt time.Time
	// QuorumAt is when the revoking holder last had relay quorum while it
	// held the workload at Epoch (its own clock, see
	// PublishRevocation.QuorumAt); zero when unknown (a Paygress
	// revocation, or a holder that never had quorum at the epoch). It
	// bounds how late the revocation may still start the claim step (see
	// RevocationDeadline).
	QuorumAt time.Time
	// StateURI names the last checkpoint the holder published (Paygress's
	// state_uri); the successor tries it first when it restores.
	StateURI string
}

// PromotionClaim is a promotion claim or announcement (kind 38386) after
// signature checks. Active is false for a withdrawn marker. A Paygress
// announcement is active and carries no epoch: Epoch 0 (EpochUnknown); the
// driver feeds it as it is, and ObserveClaim decides what it counts as.
type PromotionClaim struct {
	Workload string
	Claimer  string
	Epoch    uint64
	Active   bool
	Relay    string
	// CreatedAt is the event's created_at (the claimer's clock). It matters
	// only for claims with EpochUnknown: such an announcement counts as an
	// active claim of the next epoch only when it may have been made after
	// the current holder began (ObserveClaim). Zero means unknown: the
	// announcement is then ignored.
	CreatedAt time.Time
}

// EpochUnknown is the epoch of a claim that carries none (Paygress).
const EpochUnknown uint64 = 0

// ProcessExit reports that the workload process started for Epoch exited.
type ProcessExit struct {
	Workload string
	Epoch    uint64
	Reason   string
}

// RespawnResult reports the outcome of an AttemptRespawn.
type RespawnResult struct {
	Workload string
	Attempt  int
	OK       bool
	Reason   string
}

// ClaimAck reports how many relays accepted (OK true) a PublishClaim. The
// driver reports once: when M relays accepted, or when every relay answered
// or timed out.
type ClaimAck struct {
	Workload string
	Epoch    uint64
	Accepted int
}

// ClaimRead reports a ReadClaims: how many relays were read to EOSE, and how
// many distinct other providers hold an active claim for Epoch (or higher) on
// them.
type ClaimRead struct {
	Workload  string
	Epoch     uint64
	Relays    int
	Competing int
}
