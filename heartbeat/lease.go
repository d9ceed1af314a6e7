package heartbeat

import (
	"fmt"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
	"provideragent/lease"
)

// This file converts between decoded events and the lease machine: inputs
// (heartbeats, revocations, claims, grants) one way, effects (revocations and
// claims to publish) the other.

// HeartbeatInput is the lease input for heartbeat h as delivered by relay and
// received at receivedAt (local clock). The Workloads slice is shared with h;
// the machine only reads it.
func HeartbeatInput(h *Heartbeat, relay string, receivedAt time.Time) lease.Heartbeat {
	return lease.Heartbeat{
		Provider:   h.Provider,
		Relay:      relay,
		EventID:    h.EventID,
		CreatedAt:  h.CreatedAt,
		ReceivedAt: receivedAt,
		Listed:     h.ListsWorkloads,
		Workloads:  h.Workloads,
		Shard:      h.Shard,
		Shards:     h.Shards,
	}
}

// RevocationInput is the lease input for revocation r. w is the machine's
// current view of the workload (Machine.Workload): a Paygress revocation
// carries no epoch and revokes whatever its signer holds, so it is given the
// epoch w knows (the machine still accepts it only from w's holder).
func RevocationInput(r *Revocation, w lease.WorkloadSnapshot) lease.Revocation {
	epoch := r.Epoch
	if !r.HasEpoch {
		epoch = w.Epoch
	}
	return lease.Revocation{
		Workload:  r.WorkloadID,
		Signer:    r.Signer,
		Epoch:     epoch,
		Successor: r.Successor,
		Standbys:  append([]string(nil), r.Standbys...),
		Reason:    r.Reason,
		CreatedAt: r.CreatedAt,
		QuorumAt:  r.QuorumAt,
	}
}

// ClaimInput is the lease input for promotion p delivered by relay: the
// wire fields, unchanged. A Paygress announcement (no epoch) stays
// lease.EpochUnknown with its created_at; lease.Machine.ObserveClaim alone
// decides whether it counts as an active claim of the next epoch or is an
// old event to ignore, so the agent and the simulator in props/ feed the
// machine the same inputs.
func ClaimInput(p *Promotion, relay string) lease.PromotionClaim {
	epoch := p.Epoch
	if !p.HasEpoch {
		epoch = lease.EpochUnknown
	}
	return lease.PromotionClaim{
		Workload:  p.WorkloadID,
		Claimer:   p.Signer,
		Epoch:     epoch,
		Active:    p.Status != ClaimWithdrawn,
		Relay:     relay,
		CreatedAt: p.CreatedAt,
	}
}

// SpecOf returns the lease spec of grant g, ready for Machine.Track (a copy:
// the caller may keep it).
func SpecOf(g *LeaseGrant) lease.Spec {
	s := g.Spec
	s.Standbys = append([]string(nil), s.Standbys...)
	s.Relays = append([]string(nil), s.Relays...)
	s.Command = append([]string(nil), s.Command...)
	return s
}

// BuildRevocationFor builds the revocation a lease.PublishRevocation effect
// asks for, signed by k (the fenced primary). stateURI is the latest
// checkpoint, "" if none.
func BuildRevocationFor(k *identity.Keys, e lease.PublishRevocation, at time.Time, stateURI string) (*nostr.Event, error) {
	ev, err := BuildRevocation(k, RevocationParams{
		WorkloadID: e.ID,
		Standbys:   e.Standbys,
		Reason:     e.Reason,
		At:         at,
		StateURI:   stateURI,
		Successor:  e.Successor,
		Epoch:      e.Epoch,
		QuorumAt:   e.QuorumAt.Truncate(time.Millisecond),
	})
	if err != nil {
		return nil, fmt.Errorf("revocation for %s: %w", e.ID, err)
	}
	return ev, nil
}

// BuildClaimFor builds the active promotion claim a lease.PublishClaim effect
// asks for.
func BuildClaimFor(k *identity.Keys, e lease.PublishClaim, at time.Time) (*nostr.Event, error) {
	ev, err := BuildPromotion(k, PromotionParams{WorkloadID: e.ID, At: at, Epoch: e.Epoch, Status: ClaimActive})
	if err != nil {
		return nil, fmt.Errorf("claim for %s: %w", e.ID, err)
	}
	return ev, nil
}

// BuildWithdrawFor builds the withdrawn marker a lease.WithdrawClaim effect
// asks for; it replaces the claim on relays (same kind, author and d tag).
// at must be later than the claim's created_at (a second later at least) or
// relays keep the claim.
func BuildWithdrawFor(k *identity.Keys, e lease.WithdrawClaim, at time.Time) (*nostr.Event, error) {
	ev, err := BuildPromotion(k, PromotionParams{WorkloadID: e.ID, At: at, Epoch: e.Epoch, Status: ClaimWithdrawn})
	if err != nil {
		return nil, fmt.Errorf("withdraw claim for %s: %w", e.ID, err)
	}
	return ev, nil
}

// BuildAnnouncementFor builds the Paygress-form announcement a
// lease.AnnouncePromotion effect asks for (the won claim), signed by k.
func BuildAnnouncementFor(k *identity.Keys, e lease.AnnouncePromotion, at time.Time) (*nostr.Event, error) {
	ev, err := BuildAnnouncement(k, AnnouncementParams{WorkloadID: e.ID, At: at, Epoch: e.Epoch})
	if err != nil {
		return nil, fmt.Errorf("announcement for %s: %w", e.ID, err)
	}
	return ev, nil
}
