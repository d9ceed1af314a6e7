package heartbeat

import (
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/nbd-wtf/go-nostr"
)

// Replication is a lease's replication mode.
type Replication string

const (
	// ReplicationNone: one provider, no standby.
	ReplicationNone Replication = "none"
	// ReplicationCheckpointed: state checkpoints are uploaded; a replacement
	// restores from the latest one.
	ReplicationCheckpointed Replication = "checkpointed"
	// ReplicationWarmStandby: standbys wait to take over (needs >= 1 standby).
	ReplicationWarmStandby Replication = "warm-standby"
)

// RestartPolicy says when a workload process that exits is started again.
type RestartPolicy string

const (
	// RestartNever: an exit ends the workload.
	RestartNever RestartPolicy = "never"
	// RestartOnFailure: restart after a non-zero exit.
	RestartOnFailure RestartPolicy = "on-failure"
	// RestartAlways: restart after any exit.
	RestartAlways RestartPolicy = "always"
)

// Lease grant limits.
const (
	// MaxLeaseRelays bounds the relay list of a lease grant.
	MaxLeaseRelays = 32
	// MaxLeaseStandbys bounds the standby list of a lease grant.
	MaxLeaseStandbys = 16
)

// LeaseGrant is a decoded lease grant (kind 38388, ours). Public keys are hex.
type LeaseGrant struct {
	// EventID is the event id (hex).
	EventID string
	// Issuer is the signer's hex public key (checked by SignerPolicy).
	Issuer string
	// CreatedAt is the event's created_at.
	CreatedAt time.Time
	// WorkloadID names the workload.
	WorkloadID string
	// Primary is the primary provider's hex public key.
	Primary string
	// Standbys are the standbys' hex public keys in rank order.
	Standbys []string
	// Relays are the normalised relay URLs all providers judge quorum over.
	Relays []string
	// Quorum is M, 1 <= M <= len(Relays).
	Quorum int
	// Replication is the replication mode.
	Replication Replication
	// RestartPolicy applies when the workload process exits.
	RestartPolicy RestartPolicy
	// Command is the argv to run (exclusive with Manifest).
	Command []string
	// Manifest is a backend manifest (exclusive with Command).
	Manifest string
	// ExpiresAt is when the lease ends; zero for never.
	ExpiresAt time.Time
	// Epoch is the epoch the grant starts at (>= 1).
	Epoch uint64
}

// LeaseGrantParams are the inputs of BuildLeaseGrant; keys may be hex or npub.
type LeaseGrantParams struct {
	WorkloadID    string
	Primary       string
	Standbys      []string
	Relays        []string
	Quorum        int
	Replication   Replication
	RestartPolicy RestartPolicy
	Command       []string
	Manifest      string
	// ExpiresAt zero means the lease does not expire.
	ExpiresAt time.Time
	// Epoch zero means 1.
	Epoch uint64
	// At is created_at.
	At time.Time
}

// leaseWire is the content JSON; keys are written as hex.
type leaseWire struct {
	WorkloadID    string        `json:"workload_id"`
	Primary       string        `json:"primary"`
	Standbys      []string      `json:"standbys"`
	Relays        []string      `json:"relays"`
	Quorum        int           `json:"quorum"`
	Replication   Replication   `json:"replication"`
	RestartPolicy RestartPolicy `json:"restart_policy"`
	Command       []string      `json:"command,omitempty"`
	Manifest      string        `json:"manifest,omitempty"`
	ExpiresAt     uint64        `json:"expires_at"`
	Epoch         uint64        `json:"epoch"`
}

type leaseIn struct {
	WorkloadID    *string   `json:"workload_id"`
	Primary       *string   `json:"primary"`
	Standbys      *[]string `json:"standbys"`
	Relays        *[]string `json:"relays"`
	Quorum        *int      `json:"quorum"`
	Replication   *string   `json:"replication"`
	RestartPolicy *string   `json:"restart_policy"`
	Command       []string  `json:"command"`
	Manifest      *string   `json:"manifest"`
	ExpiresAt     *uint64   `json:"expires_at"`
	Epoch         *uint64   `json:"epoch"`
}

// BuildLeaseGrant validates p and builds a lease grant signed by k (the issuer).
func BuildLeaseGrant(k *Keys, p LeaseGrantParams) (*nostr.Event, error) {
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
	in := leaseIn{
		WorkloadID: &p.WorkloadID, Primary: &p.Primary, Standbys: &p.Standbys, Relays: &p.Relays,
		Quorum: &p.Quorum, Replication: (*string)(&p.Replication), RestartPolicy: (*string)(&p.RestartPolicy),
		Command: p.Command, ExpiresAt: &exp, Epoch: &epoch,
	}
	if p.Manifest != "" {
		in.Manifest = &p.Manifest
	}
	g, err := validateLease(in)
	if err != nil {
		return nil, fmt.Errorf("build lease grant: %w", err)
	}
	content, err := json.Marshal(leaseWire{
		WorkloadID: g.WorkloadID, Primary: g.Primary, Standbys: g.Standbys, Relays: g.Relays,
		Quorum: g.Quorum, Replication: g.Replication, RestartPolicy: g.RestartPolicy,
		Command: g.Command, Manifest: g.Manifest, ExpiresAt: exp, Epoch: g.Epoch,
	})
	if err != nil {
		return nil, fmt.Errorf("build lease grant: %w", err)
	}
	tags := nostr.Tags{
		{"d", LeaseDTag(g.WorkloadID)},
		{"workload", g.WorkloadID},
		{"p", g.Primary},
	}
	for _, s := range g.Standbys {
		tags = append(tags, nostr.Tag{"p", s})
	}
	ev := &nostr.Event{CreatedAt: nostr.Timestamp(ts), Kind: KindLeaseGrant, Tags: tags, Content: string(content)}
	if err := k.Sign(ev); err != nil {
		return nil, fmt.Errorf("build lease grant: %w", err)
	}
	return ev, nil
}

// DecodeLeaseGrant decodes a lease grant and checks its tags and fields.
// Whether the signer may issue leases is the Ingestor's SignerPolicy check. It
// does not verify the signature.
func DecodeLeaseGrant(ev *nostr.Event) (*LeaseGrant, error) {
	if ev.Kind != KindLeaseGrant {
		return nil, reject(ReasonBadKind, "kind %d is not a lease grant", ev.Kind)
	}
	if ev.CreatedAt < 0 || ev.CreatedAt > maxUnix {
		return nil, reject(ReasonDecode, "created_at %d out of range", ev.CreatedAt)
	}
	var in leaseIn
	if err := json.Unmarshal([]byte(ev.Content), &in); err != nil {
		return nil, rejectErr(ReasonDecode, err, "lease grant content")
	}
	g, err := validateLease(in)
	if err != nil {
		return nil, rejectErr(ReasonDecode, err, "lease grant content")
	}
	if w, _ := firstTag(ev.Tags, "workload"); w != g.WorkloadID {
		return nil, reject(ReasonBadTags, "workload tag does not match workload_id")
	}
	if d, _ := firstTag(ev.Tags, "d"); d != LeaseDTag(g.WorkloadID) {
		return nil, reject(ReasonBadTags, "d tag does not match workload_id")
	}
	want := map[string]bool{g.Primary: false}
	for _, s := range g.Standbys {
		want[s] = false
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
	g.CreatedAt = unixTime(uint64(ev.CreatedAt))
	return g, nil
}

func validateLease(in leaseIn) (*LeaseGrant, error) {
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
	g := &LeaseGrant{WorkloadID: *in.WorkloadID, Quorum: *in.Quorum, Epoch: *in.Epoch}
	if g.Epoch == 0 {
		return nil, fmt.Errorf("epoch 0, epochs start at 1")
	}
	primary, err := ParsePublicKey(*in.Primary)
	if err != nil {
		return nil, fmt.Errorf("primary: %w", err)
	}
	g.Primary = primary
	seen := map[string]bool{primary: true}
	if in.Standbys != nil {
		if len(*in.Standbys) > MaxLeaseStandbys {
			return nil, fmt.Errorf("%d standbys, max %d", len(*in.Standbys), MaxLeaseStandbys)
		}
		for i, s := range *in.Standbys {
			h, err := ParsePublicKey(s)
			if err != nil {
				return nil, fmt.Errorf("standbys[%d]: %w", i, err)
			}
			if seen[h] {
				return nil, fmt.Errorf("standbys[%d]: provider listed twice", i)
			}
			seen[h] = true
			g.Standbys = append(g.Standbys, h)
		}
	}
	if len(*in.Relays) == 0 || len(*in.Relays) > MaxLeaseRelays {
		return nil, fmt.Errorf("%d relays, want 1 to %d", len(*in.Relays), MaxLeaseRelays)
	}
	seenRelay := map[string]bool{}
	for i, r := range *in.Relays {
		n, err := NormalizeRelayURL(r)
		if err != nil {
			return nil, fmt.Errorf("relays[%d]: %w", i, err)
		}
		if seenRelay[n] {
			return nil, fmt.Errorf("relays[%d]: %s listed twice", i, n)
		}
		seenRelay[n] = true
		g.Relays = append(g.Relays, n)
	}
	if g.Quorum < 1 || g.Quorum > len(g.Relays) {
		return nil, fmt.Errorf("quorum %d, want 1 to %d (the number of relays)", g.Quorum, len(g.Relays))
	}
	switch r := Replication(*in.Replication); r {
	case ReplicationNone, ReplicationCheckpointed, ReplicationWarmStandby:
		g.Replication = r
	default:
		return nil, fmt.Errorf("replication %.32q is not none, checkpointed or warm-standby", *in.Replication)
	}
	if g.Replication == ReplicationWarmStandby && len(g.Standbys) == 0 {
		return nil, fmt.Errorf("replication warm-standby needs at least one standby")
	}
	switch rp := RestartPolicy(*in.RestartPolicy); rp {
	case RestartNever, RestartOnFailure, RestartAlways:
		g.RestartPolicy = rp
	default:
		return nil, fmt.Errorf("restart_policy %.32q is not never, on-failure or always", *in.RestartPolicy)
	}
	hasManifest := in.Manifest != nil && *in.Manifest != ""
	if (len(in.Command) > 0) == hasManifest {
		return nil, fmt.Errorf("want exactly one of command and manifest")
	}
	if hasManifest {
		g.Manifest = *in.Manifest
	} else {
		if in.Command[0] == "" {
			return nil, fmt.Errorf("command[0] is empty")
		}
		g.Command = append([]string(nil), in.Command...)
	}
	if in.ExpiresAt != nil && *in.ExpiresAt != 0 {
		if *in.ExpiresAt > maxUnix {
			return nil, fmt.Errorf("expires_at %d out of range", *in.ExpiresAt)
		}
		g.ExpiresAt = unixTime(*in.ExpiresAt)
	}
	return g, nil
}

// NormalizeRelayURL validates a ws:// or wss:// relay URL and returns it in
// go-nostr's normal form (lower-case host, no trailing slash), so relay sets
// compare equal however they were written.
func NormalizeRelayURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("relay url %.80q: %w", s, err)
	}
	if u.Scheme != "ws" && u.Scheme != "wss" {
		return "", fmt.Errorf("relay url %.80q: scheme must be ws or wss", s)
	}
	if u.Host == "" {
		return "", fmt.Errorf("relay url %.80q: no host", s)
	}
	n := nostr.NormalizeURL(s)
	if n == "" {
		return "", fmt.Errorf("relay url %.80q: cannot normalise", s)
	}
	return n, nil
}
