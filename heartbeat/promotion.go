package heartbeat

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
)

// ClaimStatus is the status of a promotion claim (ours).
type ClaimStatus string

const (
	// ClaimActive is a live claim; Paygress announcements are active.
	ClaimActive ClaimStatus = "active"
	// ClaimWithdrawn replaces a claim its author gave up (same d tag), so the
	// old claim no longer competes.
	ClaimWithdrawn ClaimStatus = "withdrawn"
)

// Promotion is a decoded promotion announcement or claim (kind 38386).
//
// Defaults for Paygress-made announcements: no epoch means Epoch is
// EpochUnknown and HasEpoch false; no status means ClaimActive. Paygress
// starts the workload before announcing, so such an announcement says its
// author is running the workload.
type Promotion struct {
	// Announcement is true for an event under PromotionDTag (Paygress's, or
	// ours for a won claim); false for a claim or withdrawn marker under
	// ClaimDTag.
	Announcement bool
	// EventID is the event id (hex).
	EventID string
	// Signer is the signer's hex public key; equal to NewPrimary.
	Signer string
	// CreatedAt is the event's created_at.
	CreatedAt time.Time
	// WorkloadID names the workload.
	WorkloadID string
	// NewPrimary is the claimer's hex public key.
	NewPrimary string
	// NewPrimaryNpub is the content's new_primary_npub as written: lowercase
	// hex from Paygress and from us, an npub from older agents.
	NewPrimaryNpub string
	// PromotedAt is the content's promoted_at.
	PromotedAt time.Time
	// Version is the payload schema version (1).
	Version uint8
	// Epoch is the claimed epoch; EpochUnknown for Paygress announcements.
	Epoch uint64
	// HasEpoch is true when the content carried an epoch (ours).
	HasEpoch bool
	// Status is active or withdrawn.
	Status ClaimStatus
}

// PromotionParams are the inputs of BuildPromotion. The claimer is the signer.
type PromotionParams struct {
	// WorkloadID names the workload.
	WorkloadID string
	// At is created_at and promoted_at.
	At time.Time
	// Epoch is the claimed epoch (the current epoch + 1).
	Epoch uint64
	// Status is ClaimActive (the default when empty) or ClaimWithdrawn.
	Status ClaimStatus
}

// promotionWire is the content JSON in Paygress field order, plus ours;
// new_primary_npub is the lowercase hex public key, as Paygress writes it.
type promotionWire struct {
	WorkloadID     string      `json:"workload_id"`
	NewPrimaryNpub string      `json:"new_primary_npub"`
	PromotedAt     uint64      `json:"promoted_at"`
	Version        uint8       `json:"version"`
	Epoch          uint64      `json:"epoch"`
	Status         ClaimStatus `json:"status"`
}

type promotionIn struct {
	WorkloadID     *string `json:"workload_id"`
	NewPrimaryNpub *string `json:"new_primary_npub"`
	PromotedAt     *uint64 `json:"promoted_at"`
	Version        *uint8  `json:"version"`
	Epoch          *uint64 `json:"epoch"`
	Status         *string `json:"status"`
}

// announcementWire is our announcement content: Paygress's fields in its
// order, plus the epoch.
type announcementWire struct {
	WorkloadID     string `json:"workload_id"`
	NewPrimaryNpub string `json:"new_primary_npub"`
	PromotedAt     uint64 `json:"promoted_at"`
	Version        uint8  `json:"version"`
	Epoch          uint64 `json:"epoch"`
}

// AnnouncementParams are the inputs of BuildAnnouncement.
type AnnouncementParams struct {
	WorkloadID string
	// At is created_at and promoted_at.
	At time.Time
	// Epoch is the epoch the announcer now holds.
	Epoch uint64
}

// BuildAnnouncement builds and signs the Paygress v1 promotion announcement
// of a won claim: kind 38386 under PromotionDTag with Paygress's tags and
// fields, plus our epoch.
func BuildAnnouncement(k *identity.Keys, p AnnouncementParams) (*nostr.Event, error) {
	return signPromotion(k, "announcement", p.WorkloadID, p.At, p.Epoch,
		nostr.Tags{{"t", tagPaygress}, {"t", tagPromoted}, {"d", PromotionDTag(p.WorkloadID)}, {"v", versionTag}, {"workload", p.WorkloadID}},
		func(ts uint64) any {
			return announcementWire{WorkloadID: p.WorkloadID, NewPrimaryNpub: k.PublicKey(), PromotedAt: ts, Version: SchemaVersion, Epoch: p.Epoch}
		})
}

// BuildPromotion builds and signs a promotion claim of the claim step (or,
// with ClaimWithdrawn, the marker that replaces it), under ClaimDTag.
func BuildPromotion(k *identity.Keys, p PromotionParams) (*nostr.Event, error) {
	status := p.Status
	if status == "" {
		status = ClaimActive
	}
	if status != ClaimActive && status != ClaimWithdrawn {
		return nil, fmt.Errorf("build promotion: status %q is not active or withdrawn", status)
	}
	return signPromotion(k, "promotion", p.WorkloadID, p.At, p.Epoch,
		nostr.Tags{{"t", tagClaim}, {"d", ClaimDTag(p.WorkloadID)}, {"v", versionTag}, {"workload", p.WorkloadID}},
		func(ts uint64) any {
			return promotionWire{WorkloadID: p.WorkloadID, NewPrimaryNpub: k.PublicKey(), PromotedAt: ts, Version: SchemaVersion, Epoch: p.Epoch, Status: status}
		})
}

// signPromotion checks the inputs of a kind 38386 event (what names it in
// errors), then builds it with tags and content(created_at) and signs it.
func signPromotion(k *identity.Keys, what, workloadID string, at time.Time, epoch uint64, tags nostr.Tags, content func(ts uint64) any) (*nostr.Event, error) {
	if k == nil {
		return nil, fmt.Errorf("build %s: nil keys", what)
	}
	if err := ValidateWorkloadID(workloadID); err != nil {
		return nil, fmt.Errorf("build %s: %w", what, err)
	}
	if epoch == 0 {
		return nil, fmt.Errorf("build %s: epoch 0, epochs start at 1", what)
	}
	ts := at.Unix()
	if ts < 0 || ts > maxUnix {
		return nil, fmt.Errorf("build %s: time %v out of range", what, at)
	}
	b, err := json.Marshal(content(uint64(ts)))
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", what, err)
	}
	ev := &nostr.Event{CreatedAt: nostr.Timestamp(ts), Kind: KindPromotion, Tags: tags, Content: string(b)}
	if err := k.Sign(ev); err != nil {
		return nil, fmt.Errorf("build %s: %w", what, err)
	}
	return ev, nil
}

// DecodePromotion decodes a promotion announcement (under PromotionDTag) or
// a claim or withdrawn marker (under ClaimDTag, with an epoch) and checks
// its tags and that the new primary it names is its signer. It does not
// verify the signature.
func DecodePromotion(ev *nostr.Event) (*Promotion, error) {
	if ev.Kind != KindPromotion {
		return nil, reject(ReasonBadKind, "kind %d is not a promotion", ev.Kind)
	}
	d, _ := firstTag(ev.Tags, "d")
	announcement := strings.HasPrefix(d, "paygress:promoted:")
	if announcement {
		if rej := requireTags(ev.Tags, tagPaygress, tagPromoted); rej != nil {
			return nil, rej
		}
	} else if rej := requireTags(ev.Tags, tagClaim); rej != nil {
		return nil, rej
	}
	if ev.CreatedAt < 0 || ev.CreatedAt > maxUnix {
		return nil, reject(ReasonDecode, "created_at %d out of range", ev.CreatedAt)
	}
	var in promotionIn
	if rej := unmarshalContent("promotion", ev.Content, &in); rej != nil {
		return nil, rej
	}
	switch {
	case in.WorkloadID == nil:
		return nil, reject(ReasonDecode, "promotion content: missing workload_id")
	case in.NewPrimaryNpub == nil:
		return nil, reject(ReasonDecode, "promotion content: missing new_primary_npub")
	case in.PromotedAt == nil:
		return nil, reject(ReasonDecode, "promotion content: missing promoted_at")
	case *in.PromotedAt > maxUnix:
		return nil, reject(ReasonDecode, "promotion content: promoted_at %d out of range", *in.PromotedAt)
	}
	if err := ValidateWorkloadID(*in.WorkloadID); err != nil {
		return nil, rejectErr(ReasonDecode, err, "promotion content")
	}
	version, rej := decodeVersion(in.Version)
	if rej != nil {
		return nil, rej
	}
	np, err := identity.PublicKeyHex(*in.NewPrimaryNpub)
	if err != nil {
		return nil, rejectErr(ReasonDecode, err, "promotion content: new_primary_npub")
	}
	if np != ev.PubKey {
		return nil, reject(ReasonWrongSigner, "new_primary_npub is not the signer")
	}
	if w, _ := firstTag(ev.Tags, "workload"); w != *in.WorkloadID {
		return nil, reject(ReasonBadTags, "workload tag does not match workload_id")
	}
	if announcement && d != PromotionDTag(*in.WorkloadID) || !announcement && d != ClaimDTag(*in.WorkloadID) {
		return nil, reject(ReasonBadTags, "d tag %.120q does not match workload_id", d)
	}
	if !announcement && in.Epoch == nil {
		return nil, reject(ReasonDecode, "promotion claim without an epoch")
	}
	pr := &Promotion{
		Announcement:   announcement,
		EventID:        ev.ID,
		Signer:         ev.PubKey,
		CreatedAt:      unixTime(uint64(ev.CreatedAt)),
		WorkloadID:     *in.WorkloadID,
		NewPrimary:     np,
		NewPrimaryNpub: *in.NewPrimaryNpub,
		PromotedAt:     unixTime(*in.PromotedAt),
		Version:        version,
		Status:         ClaimActive,
	}
	if in.Epoch != nil {
		if *in.Epoch == 0 {
			return nil, reject(ReasonDecode, "promotion content: epoch 0, epochs start at 1")
		}
		pr.Epoch, pr.HasEpoch = *in.Epoch, true
	}
	if in.Status != nil {
		switch s := ClaimStatus(*in.Status); s {
		case ClaimActive, ClaimWithdrawn:
			pr.Status = s
		default:
			return nil, reject(ReasonDecode, "promotion content: status %.32q is not active or withdrawn", *in.Status)
		}
	}
	return pr, nil
}
