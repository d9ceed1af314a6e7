package heartbeat

import (
	"fmt"
	"time"

	"github.com/nbd-wtf/go-nostr"

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
	}
}

// ClaimInput is the lease input for promotion p delivered by relay, given the
// machine's view w of the workload. ok is false when the event should not be
// fed at all.
//
// A Paygress announcement has no epoch; its author started the workload
// before announcing, so it is read as an active claim of w.Epoch+1 (it fences
// a copy held here and blocks our own claim for that epoch). Addressable
// events live forever, though, so an announcement is ignored when it was
// made before w's holder began at w.Epoch (HoldFrom or WatchFrom, compared on
// the announcer's clock) or when its author is already w's holder.
func ClaimInput(p *Promotion, relay string, w lease.WorkloadSnapshot) (c lease.PromotionClaim, ok bool) {
	c = lease.PromotionClaim{
		Workload: p.WorkloadID,
		Claimer:  p.Signer,
		Epoch:    p.Epoch,
		Active:   p.Status != ClaimWithdrawn,
		Relay:    relay,
	}
	if p.HasEpoch {
		return c, true
	}
	if p.Signer == w.Holder {
		return c, false
	}
	since := w.WatchFrom
	if w.HoldFrom.After(since) {
		since = w.HoldFrom
	}
	if !since.IsZero() && !p.CreatedAt.After(since) {
		return c, false
	}
	c.Epoch = w.Epoch + 1
	return c, true
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
func BuildRevocationFor(k *Keys, e lease.PublishRevocation, at time.Time, stateURI string) (*nostr.Event, error) {
	ev, err := BuildRevocation(k, RevocationParams{
		WorkloadID: e.ID,
		Standbys:   e.Standbys,
		Reason:     e.Reason,
		At:         at,
		StateURI:   stateURI,
		Successor:  e.Successor,
		Epoch:      e.Epoch,
	})
	if err != nil {
		return nil, fmt.Errorf("revocation for %s: %w", e.ID, err)
	}
	return ev, nil
}

// BuildClaimFor builds the active promotion claim a lease.PublishClaim effect
// asks for.
func BuildClaimFor(k *Keys, e lease.PublishClaim, at time.Time) (*nostr.Event, error) {
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
func BuildWithdrawFor(k *Keys, e lease.WithdrawClaim, at time.Time) (*nostr.Event, error) {
	ev, err := BuildPromotion(k, PromotionParams{WorkloadID: e.ID, At: at, Epoch: e.Epoch, Status: ClaimWithdrawn})
	if err != nil {
		return nil, fmt.Errorf("withdraw claim for %s: %w", e.ID, err)
	}
	return ev, nil
}
