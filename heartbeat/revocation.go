package heartbeat

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
)

// Revocation is a decoded lease revocation (kind 38385).
//
// Defaults for Paygress-made revocations: no epoch means Epoch is
// EpochUnknown and HasEpoch false (read it as "the epoch the primary held");
// no successor field means the first standby is the successor (HasSuccessor
// false). Our revocations always write the field; "" there means the primary
// saw no standby alive, so standbys must rely on takeover.
// Standby entries that are not valid keys are skipped, as Paygress does when
// it builds the p tags.
type Revocation struct {
	// EventID is the event id (hex).
	EventID string
	// Signer is the signer's hex public key; equal to Primary.
	Signer string
	// CreatedAt is the event's created_at.
	CreatedAt time.Time
	// WorkloadID names the workload.
	WorkloadID string
	// Primary is the revoking primary's hex public key.
	Primary string
	// PrimaryNpub is the content's primary_provider_npub as written:
	// lowercase hex from Paygress and from us, an npub from older
	// agents.
	PrimaryNpub string
	// Standbys are the standbys' hex public keys, in order, invalid entries
	// skipped.
	Standbys []string
	// Reason is the free-text reason.
	Reason string
	// RevokedAt is the content's revoked_at.
	RevokedAt time.Time
	// StateURI is the Blossom URI of the latest checkpoint (at most
	// MaxStateURIBytes), "" if none.
	StateURI string
	// Version is the payload schema version (1).
	Version uint8
	// Successor is the hex public key of the standby that should claim; ""
	// when there is none.
	Successor string
	// HasSuccessor is true when the content named the successor (ours).
	HasSuccessor bool
	// Epoch is the revoked epoch; EpochUnknown for Paygress revocations.
	Epoch uint64
	// HasEpoch is true when the content carried an epoch (ours).
	HasEpoch bool
	// QuorumAt is the content's quorum_at_ms (ours, unix milliseconds):
	// when the revoking holder's own heartbeats listing the workload last
	// came back from M relays. Zero when absent (Paygress, or a holder that
	// never had quorum at the epoch). Never after CreatedAt's second.
	QuorumAt time.Time
}

// RevocationParams are the inputs of BuildRevocation. The primary is the
// signer.
type RevocationParams struct {
	// WorkloadID names the workload.
	WorkloadID string
	// Standbys are the standbys (hex or npub), in rank order; one p tag each.
	Standbys []string
	// Reason is a short free-text reason.
	Reason string
	// At is created_at and revoked_at.
	At time.Time
	// StateURI is the BUD-10 URI of the last published checkpoint's
	// manifest (optional, at most MaxStateURIBytes); written only when set.
	StateURI string
	// Successor is the standby that should claim (hex or npub); "" means
	// none (written as "", so readers do not default to the first standby).
	Successor string
	// Epoch is the epoch being revoked (>= 1).
	Epoch uint64
	// QuorumAt is when the holder last had relay quorum at the epoch
	// (lease.PublishRevocation.QuorumAt); zero writes none. Whole
	// milliseconds, rounded down, and not after At.
	QuorumAt time.Time
}

// revocationWire is the content JSON in Paygress field order, plus ours. Every
// key is written as lowercase hex: primary_provider_npub as Paygress writes
// it (to_hex), and standby_providers and successor the same way (Paygress
// passes the consumer's strings through there and parses either form).
type revocationWire struct {
	WorkloadID          string   `json:"workload_id"`
	PrimaryProviderNpub string   `json:"primary_provider_npub"`
	StandbyProviders    []string `json:"standby_providers"`
	Reason              string   `json:"reason"`
	RevokedAt           uint64   `json:"revoked_at"`
	StateURI            string   `json:"state_uri,omitempty"`
	Version             uint8    `json:"version"`
	Successor           string   `json:"successor"`
	Epoch               uint64   `json:"epoch"`
	QuorumAtMS          uint64   `json:"quorum_at_ms,omitempty"`
}

type revocationIn struct {
	WorkloadID          *string   `json:"workload_id"`
	PrimaryProviderNpub *string   `json:"primary_provider_npub"`
	StandbyProviders    *[]string `json:"standby_providers"`
	Reason              *string   `json:"reason"`
	RevokedAt           *uint64   `json:"revoked_at"`
	StateURI            *string   `json:"state_uri"`
	Version             *uint8    `json:"version"`
	Successor           *string   `json:"successor"`
	Epoch               *uint64   `json:"epoch"`
	QuorumAtMS          *uint64   `json:"quorum_at_ms"`
}

// BuildRevocation builds and signs a revocation by k (the primary).
func BuildRevocation(k *identity.Keys, p RevocationParams) (*nostr.Event, error) {
	if k == nil {
		return nil, fmt.Errorf("build revocation: nil keys")
	}
	if err := ValidateWorkloadID(p.WorkloadID); err != nil {
		return nil, fmt.Errorf("build revocation: %w", err)
	}
	if p.Epoch == 0 {
		return nil, fmt.Errorf("build revocation: epoch 0, epochs start at 1")
	}
	ts := p.At.Unix()
	if ts < 0 || ts > maxUnix {
		return nil, fmt.Errorf("build revocation: time %v out of range", p.At)
	}
	if len(p.StateURI) > MaxStateURIBytes {
		return nil, fmt.Errorf("build revocation: state_uri of %d bytes, max %d", len(p.StateURI), MaxStateURIBytes)
	}
	hexes := make([]string, 0, len(p.Standbys))
	for i, s := range p.Standbys {
		h, err := identity.ParsePublicKey(s)
		if err != nil {
			return nil, fmt.Errorf("build revocation: standbys[%d]: %w", i, err)
		}
		hexes = append(hexes, h)
	}
	successor := ""
	if p.Successor != "" {
		h, err := identity.ParsePublicKey(p.Successor)
		if err != nil {
			return nil, fmt.Errorf("build revocation: successor: %w", err)
		}
		if !slices.Contains(hexes, h) {
			return nil, fmt.Errorf("build revocation: successor is not one of the standbys")
		}
		successor = h
	}
	var quorumAt uint64
	if !p.QuorumAt.IsZero() {
		q := p.QuorumAt.UnixMilli()
		if q <= 0 || q >= (ts+1)*1000 {
			return nil, fmt.Errorf("build revocation: quorum_at %v not between 1970 and the revocation's time %v", p.QuorumAt, p.At)
		}
		quorumAt = uint64(q)
	}
	content, err := json.Marshal(revocationWire{
		WorkloadID:          p.WorkloadID,
		PrimaryProviderNpub: k.PublicKey(),
		StandbyProviders:    hexes,
		Reason:              p.Reason,
		RevokedAt:           uint64(ts),
		StateURI:            p.StateURI,
		Version:             SchemaVersion,
		Successor:           successor,
		Epoch:               p.Epoch,
		QuorumAtMS:          quorumAt,
	})
	if err != nil {
		return nil, fmt.Errorf("build revocation: %w", err)
	}
	tags := nostr.Tags{
		{"t", tagPaygress},
		{"t", tagRevocation},
		{"d", RevocationDTag(k.PublicKey(), p.WorkloadID)},
		{"v", versionTag},
		{"workload", p.WorkloadID},
	}
	for _, h := range hexes {
		tags = append(tags, nostr.Tag{"p", h})
	}
	ev := &nostr.Event{CreatedAt: nostr.Timestamp(ts), Kind: KindRevocation, Tags: tags, Content: string(content)}
	if err := k.Sign(ev); err != nil {
		return nil, fmt.Errorf("build revocation: %w", err)
	}
	return ev, nil
}

// DecodeRevocation decodes a revocation and checks its tags and that the
// primary it names is its signer. Whether the signer is the workload's
// current primary is the Ingestor's SignerPolicy check. It does not verify the
// signature.
func DecodeRevocation(ev *nostr.Event) (*Revocation, error) {
	if ev.Kind != KindRevocation {
		return nil, reject(ReasonBadKind, "kind %d is not a revocation", ev.Kind)
	}
	if rej := requireTags(ev.Tags, tagPaygress, tagRevocation); rej != nil {
		return nil, rej
	}
	if ev.CreatedAt < 0 || ev.CreatedAt > maxUnix {
		return nil, reject(ReasonDecode, "created_at %d out of range", ev.CreatedAt)
	}
	var in revocationIn
	if rej := unmarshalContent("revocation", ev.Content, &in); rej != nil {
		return nil, rej
	}
	switch {
	case in.WorkloadID == nil:
		return nil, reject(ReasonDecode, "revocation content: missing workload_id")
	case in.PrimaryProviderNpub == nil:
		return nil, reject(ReasonDecode, "revocation content: missing primary_provider_npub")
	case in.StandbyProviders == nil:
		return nil, reject(ReasonDecode, "revocation content: missing standby_providers")
	case in.Reason == nil:
		return nil, reject(ReasonDecode, "revocation content: missing reason")
	case in.RevokedAt == nil:
		return nil, reject(ReasonDecode, "revocation content: missing revoked_at")
	case *in.RevokedAt > maxUnix:
		return nil, reject(ReasonDecode, "revocation content: revoked_at %d out of range", *in.RevokedAt)
	}
	if err := ValidateWorkloadID(*in.WorkloadID); err != nil {
		return nil, rejectErr(ReasonDecode, err, "revocation content")
	}
	version, rej := decodeVersion(in.Version)
	if rej != nil {
		return nil, rej
	}
	primary, err := identity.PublicKeyHex(*in.PrimaryProviderNpub)
	if err != nil {
		return nil, rejectErr(ReasonDecode, err, "revocation content: primary_provider_npub")
	}
	if primary != ev.PubKey {
		return nil, reject(ReasonWrongSigner, "primary_provider_npub is not the signer")
	}
	if w, _ := firstTag(ev.Tags, "workload"); w != *in.WorkloadID {
		return nil, reject(ReasonBadTags, "workload tag does not match workload_id")
	}
	build := func(key string) string { return RevocationDTag(key, *in.WorkloadID) }
	if d, _ := firstTag(ev.Tags, "d"); !dTagNamesKey(d, *in.PrimaryProviderNpub, primary, build) {
		return nil, reject(ReasonBadTags, "d tag does not match primary_provider_npub and workload_id")
	}
	r := &Revocation{
		EventID:     ev.ID,
		Signer:      ev.PubKey,
		CreatedAt:   unixTime(uint64(ev.CreatedAt)),
		WorkloadID:  *in.WorkloadID,
		Primary:     primary,
		PrimaryNpub: *in.PrimaryProviderNpub,
		Standbys:    make([]string, 0, len(*in.StandbyProviders)),
		Reason:      *in.Reason,
		RevokedAt:   unixTime(*in.RevokedAt),
		Version:     version,
	}
	if in.StateURI != nil {
		if len(*in.StateURI) > MaxStateURIBytes {
			return nil, reject(ReasonDecode, "revocation content: state_uri of %d bytes, max %d", len(*in.StateURI), MaxStateURIBytes)
		}
		r.StateURI = *in.StateURI
	}
	seen := map[string]bool{primary: true}
	for _, s := range *in.StandbyProviders {
		h, err := identity.ParsePublicKey(s)
		if err != nil || seen[h] {
			continue // Paygress skips unparseable standbys too
		}
		seen[h] = true
		r.Standbys = append(r.Standbys, h)
	}
	switch {
	case in.Successor != nil && *in.Successor == "":
		r.HasSuccessor = true // explicitly none
	case in.Successor != nil:
		h, err := identity.ParsePublicKey(*in.Successor)
		if err != nil {
			return nil, rejectErr(ReasonDecode, err, "revocation content: successor")
		}
		if !seen[h] || h == primary {
			return nil, reject(ReasonDecode, "revocation content: successor is not one of the standbys")
		}
		r.Successor, r.HasSuccessor = h, true
	case len(r.Standbys) > 0:
		r.Successor = r.Standbys[0] // Paygress: no successor field
	}
	if in.Epoch != nil {
		if *in.Epoch == 0 {
			return nil, reject(ReasonDecode, "revocation content: epoch 0, epochs start at 1")
		}
		r.Epoch, r.HasEpoch = *in.Epoch, true
	}
	if in.QuorumAtMS != nil {
		if q := *in.QuorumAtMS; q == 0 || q/1000 > uint64(ev.CreatedAt) {
			return nil, reject(ReasonDecode, "revocation content: quorum_at_ms %d not between 1 and created_at %d s", q, ev.CreatedAt)
		}
		r.QuorumAt = time.UnixMilli(int64(*in.QuorumAtMS)).UTC()
	}
	return r, nil
}
