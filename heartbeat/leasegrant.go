package heartbeat

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
	"provideragent/internal/imagespec"
	"provideragent/lease"
)

// MaxLeaseStandbys bounds the standby list of a lease grant.
const MaxLeaseStandbys = 16

// LeaseGrant is a decoded lease grant (kind 38388, ours). Spec is ready for
// lease.Machine.Track: keys are lower-case hex, relay URLs are normalised with
// lease.NormalizeRelayURL, and Spec.Validate has passed.
type LeaseGrant struct {
	// EventID is the event id (hex).
	EventID string
	// Issuer is the signer's hex public key (checked by SignerPolicy).
	Issuer string
	// Spec is the lease; Spec.CreatedAt is the event's created_at.
	Spec lease.Spec
	// Manifest is a backend manifest, the alternative to Spec.Command.
	Manifest string
}

// LeaseGrantParams are the inputs of BuildLeaseGrant. Keys may be hex or
// npub; relays are normalised.
type LeaseGrantParams struct {
	// WorkloadID names the workload.
	WorkloadID string
	// Primary and Standbys are the providers (standbys in rank order).
	Primary  string
	Standbys []string
	// Relays is the relay set all providers judge quorum over; Quorum is M.
	Relays []string
	Quorum int
	// Replication and RestartPolicy as in lease.Spec.
	Replication   lease.Replication
	RestartPolicy lease.RestartPolicy
	// Command (argv) or Manifest: exactly one; or Image, with Command as
	// the argv to run in it (none: the image's own). A Command that
	// already names an image (imagespec.Encode, as lease.Spec.Command
	// holds it) is the same as Image and its argv.
	Command  []string
	Manifest string
	Image    *imagespec.Image
	// StateURI optionally points at the latest checkpoint.
	StateURI string
	// Checkpoint is the optional checkpoint policy (nil: none); its
	// RestoreTimeout must be whole seconds.
	Checkpoint *lease.CheckpointPolicy
	// ExpiresAt zero means the lease does not expire.
	ExpiresAt time.Time
	// Epoch zero means 1.
	Epoch uint64
	// At is created_at.
	At time.Time
}

// leaseWire is the content JSON; keys are written as hex.
type leaseWire struct {
	WorkloadID    string                `json:"workload_id"`
	Primary       string                `json:"primary"`
	Standbys      []string              `json:"standbys"`
	Relays        []string              `json:"relays"`
	Quorum        int                   `json:"quorum"`
	Replication   lease.Replication     `json:"replication"`
	RestartPolicy lease.RestartPolicy   `json:"restart_policy"`
	Command       []string              `json:"command,omitempty"`
	Manifest      string                `json:"manifest,omitempty"`
	Image         *imagespec.Image      `json:"image,omitempty"`
	StateURI      string                `json:"state_uri,omitempty"`
	ExpiresAt     uint64                `json:"expires_at"`
	Epoch         uint64                `json:"epoch"`
	Checkpoint    *checkpointPolicyWire `json:"checkpoint,omitempty"`
}

type leaseIn struct {
	WorkloadID    *string               `json:"workload_id"`
	Primary       *string               `json:"primary"`
	Standbys      []string              `json:"standbys"`
	Relays        []string              `json:"relays"`
	Quorum        *int                  `json:"quorum"`
	Replication   *string               `json:"replication"`
	RestartPolicy *lease.RestartPolicy  `json:"restart_policy"`
	Command       []string              `json:"command"`
	Manifest      string                `json:"manifest"`
	Image         *imagespec.Image      `json:"image"`
	StateURI      string                `json:"state_uri"`
	ExpiresAt     uint64                `json:"expires_at"`
	Epoch         *uint64               `json:"epoch"`
	Checkpoint    *checkpointPolicyWire `json:"checkpoint"`
}

// BuildLeaseGrant validates p and builds a lease grant signed by k (the issuer).
func BuildLeaseGrant(k *identity.Keys, p LeaseGrantParams) (*nostr.Event, error) {
	if k == nil {
		return nil, fmt.Errorf("build lease grant: nil keys")
	}
	ts := p.At.Unix()
	if ts < 0 || ts > maxUnix {
		return nil, fmt.Errorf("build lease grant: time %v out of range", p.At)
	}
	epoch := p.Epoch
	if epoch == 0 {
		epoch = 1
	}
	var exp uint64
	if !p.ExpiresAt.IsZero() {
		e := p.ExpiresAt.Unix()
		if e <= 0 || e > maxUnix {
			return nil, fmt.Errorf("build lease grant: expires_at %v out of range", p.ExpiresAt)
		}
		exp = uint64(e)
	}
	repl := string(p.Replication)
	command, image := p.Command, p.Image
	if image == nil {
		im, argv, ok, err := imagespec.Decode(p.Command)
		if err != nil {
			return nil, fmt.Errorf("build lease grant: %w", err)
		}
		if ok {
			command, image = argv, &im
		}
	}
	in := leaseIn{
		WorkloadID: &p.WorkloadID, Primary: &p.Primary, Standbys: p.Standbys, Relays: p.Relays,
		Quorum: &p.Quorum, Replication: &repl, RestartPolicy: &p.RestartPolicy,
		Command: command, Manifest: p.Manifest, Image: image, StateURI: p.StateURI, ExpiresAt: exp, Epoch: &epoch,
	}
	if p.Checkpoint != nil {
		w, err := policyWire(p.Checkpoint)
		if err != nil {
			return nil, fmt.Errorf("build lease grant: %w", err)
		}
		in.Checkpoint = w
	}
	g, err := validateLease(in, ts)
	if err != nil {
		return nil, fmt.Errorf("build lease grant: %w", err)
	}
	s := g.Spec
	content, err := json.Marshal(leaseWire{
		WorkloadID: s.ID, Primary: s.Primary, Standbys: nonNil(s.Standbys), Relays: s.Relays,
		Quorum: s.Quorum, Replication: s.Replication, RestartPolicy: s.RestartPolicy,
		Command: command, Manifest: g.Manifest, Image: image, StateURI: s.StateURI, ExpiresAt: exp, Epoch: s.Epoch,
		Checkpoint: in.Checkpoint,
	})
	if err != nil {
		return nil, fmt.Errorf("build lease grant: %w", err)
	}
	tags := nostr.Tags{
		{"d", LeaseDTag(s.ID)},
		{"workload", s.ID},
		{"p", s.Primary},
	}
	for _, sb := range s.Standbys {
		tags = append(tags, nostr.Tag{"p", sb})
	}
	ev := &nostr.Event{CreatedAt: nostr.Timestamp(ts), Kind: KindLeaseGrant, Tags: tags, Content: string(content)}
	if err := k.Sign(ev); err != nil {
		return nil, fmt.Errorf("build lease grant: %w", err)
	}
	return ev, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// DecodeLeaseGrant decodes a lease grant and checks its tags and fields
// (lease.Spec.Validate included). Whether the signer may issue leases is the
// Ingestor's SignerPolicy check. It does not verify the signature.
func DecodeLeaseGrant(ev *nostr.Event) (*LeaseGrant, error) {
	if ev.Kind != KindLeaseGrant {
		return nil, reject(ReasonBadKind, "kind %d is not a lease grant", ev.Kind)
	}
	if ev.CreatedAt < 0 || ev.CreatedAt > maxUnix {
		return nil, reject(ReasonDecode, "created_at %d out of range", ev.CreatedAt)
	}
	var in leaseIn
	if rej := unmarshalContent("lease grant", ev.Content, &in); rej != nil {
		return nil, rej
	}
	g, err := validateLease(in, int64(ev.CreatedAt))
	if err != nil {
		return nil, rejectErr(ReasonDecode, err, "lease grant content")
	}
	s := &g.Spec
	if w, _ := firstTag(ev.Tags, "workload"); w != s.ID {
		return nil, reject(ReasonBadTags, "workload tag does not match workload_id")
	}
	if d, _ := firstTag(ev.Tags, "d"); d != LeaseDTag(s.ID) {
		return nil, reject(ReasonBadTags, "d tag does not match workload_id")
	}
	want := map[string]bool{s.Primary: false}
	for _, sb := range s.Standbys {
		want[sb] = false
	}
	for _, t := range ev.Tags {
		if len(t) >= 2 && t[0] == "p" {
			if _, ok := want[t[1]]; !ok {
				return nil, reject(ReasonBadTags, "p tag names a provider that is not in the lease")
			}
			want[t[1]] = true
		}
	}
	for _, seen := range want {
		if !seen {
			return nil, reject(ReasonBadTags, "a provider of the lease has no p tag")
		}
	}
	g.EventID = ev.ID
	g.Issuer = ev.PubKey
	return g, nil
}

// validateLease turns wire fields into a validated grant; created is the
// event's created_at.
func validateLease(in leaseIn, created int64) (*LeaseGrant, error) {
	switch {
	case in.WorkloadID == nil:
		return nil, fmt.Errorf("missing workload_id")
	case in.Primary == nil:
		return nil, fmt.Errorf("missing primary")
	case in.Relays == nil:
		return nil, fmt.Errorf("missing relays")
	case in.Quorum == nil:
		return nil, fmt.Errorf("missing quorum")
	case in.Replication == nil:
		return nil, fmt.Errorf("missing replication")
	case in.RestartPolicy == nil:
		return nil, fmt.Errorf("missing restart_policy")
	case in.Epoch == nil:
		return nil, fmt.Errorf("missing epoch")
	}
	if err := ValidateWorkloadID(*in.WorkloadID); err != nil {
		return nil, err
	}
	s := lease.Spec{
		ID: *in.WorkloadID, Replication: lease.Replication(*in.Replication), RestartPolicy: *in.RestartPolicy,
		Epoch: *in.Epoch, StateURI: in.StateURI, Quorum: *in.Quorum, CreatedAt: unixTime(uint64(created)),
	}
	primary, err := identity.ParsePublicKey(*in.Primary)
	if err != nil {
		return nil, fmt.Errorf("primary: %w", err)
	}
	s.Primary = primary
	if len(in.Standbys) > MaxLeaseStandbys {
		return nil, fmt.Errorf("%d standbys, max %d", len(in.Standbys), MaxLeaseStandbys)
	}
	for i, sb := range in.Standbys {
		h, err := identity.ParsePublicKey(sb)
		if err != nil {
			return nil, fmt.Errorf("standbys[%d]: %w", i, err)
		}
		s.Standbys = append(s.Standbys, h)
	}
	if len(in.Relays) == 0 || len(in.Relays) > lease.MaxRelays {
		return nil, fmt.Errorf("%d relays, want 1 to %d", len(in.Relays), lease.MaxRelays)
	}
	seen := map[string]bool{}
	for i, r := range in.Relays {
		n, err := lease.NormalizeRelayURL(r)
		if err != nil {
			return nil, fmt.Errorf("relays[%d]: %w", i, err)
		}
		if seen[n] {
			return nil, fmt.Errorf("relays[%d]: %s listed twice", i, n)
		}
		seen[n] = true
		s.Relays = append(s.Relays, n)
	}
	if s.Quorum < 1 || s.Quorum > len(s.Relays) {
		return nil, fmt.Errorf("quorum %d, want 1 to %d (the number of relays)", s.Quorum, len(s.Relays))
	}
	switch {
	case in.Image != nil:
		// The command is the argv to run in the image (none: its own).
		if in.Manifest != "" {
			return nil, fmt.Errorf("want an image or a manifest, not both")
		}
		if err := in.Image.Validate(); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
		s.Command = imagespec.Encode(*in.Image, in.Command)
	case (len(in.Command) > 0) == (in.Manifest != ""):
		return nil, fmt.Errorf("want exactly one of command, image and manifest")
	case len(in.Command) > 0:
		if in.Command[0] == "" {
			return nil, fmt.Errorf("command[0] is empty")
		}
		if imagespec.Is(in.Command) {
			return nil, fmt.Errorf("command[0] = %q: an image goes in the image field", in.Command[0])
		}
		s.Command = append([]string(nil), in.Command...)
	}
	if in.ExpiresAt != 0 {
		if in.ExpiresAt > maxUnix {
			return nil, fmt.Errorf("expires_at %d out of range", in.ExpiresAt)
		}
		s.ExpiresAt = unixTime(in.ExpiresAt)
	}
	if in.Checkpoint != nil {
		p, err := decodeCheckpointPolicy(in.Checkpoint)
		if err != nil {
			return nil, err
		}
		s.Checkpoint = p
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.Checkpoint != nil {
		if err := checkKeyMembers(s.Checkpoint, s); err != nil {
			return nil, err
		}
	}
	return &LeaseGrant{Spec: s, Manifest: in.Manifest}, nil
}
