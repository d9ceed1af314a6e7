package heartbeat

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
	"provideragent/lease"
)

// KindCheckpoint is a checkpoint record (ours): the holder of a workload at
// an epoch announces a checkpoint it placed on Blossom servers. Addressable
// per (signer, workload, epoch), so relays keep the newest record of each
// epoch. Paygress has no such kind and never reads it.
const KindCheckpoint = 38387

// Checkpoint record limits.
const (
	// MaxCheckpointContentBytes bounds a checkpoint record's content (a
	// typical one is about 600 bytes); the Ingestor refuses larger ones
	// before hashing them.
	MaxCheckpointContentBytes = 8 << 10
	// MaxStateURIBytes bounds a state_uri (a BUD-10 URI) in a checkpoint
	// record or a revocation.
	MaxStateURIBytes = 1024
	// MaxCheckpointSeq bounds a record's seq, as lease.MaxEpoch bounds
	// epochs: seq+1 never overflows and fits a signed 64-bit column.
	MaxCheckpointSeq = lease.MaxEpoch
)

const tagCheckpoint = "provider-agent-checkpoint"

// CheckpointDTag returns the d tag of the checkpoint records of workload at
// epoch: provider-agent:checkpoint:v1:<id>:<epoch>. It may exceed 255 bytes,
// so records are queried by their workload tag, never by d.
func CheckpointDTag(workload string, epoch uint64) string {
	return "provider-agent:checkpoint:v1:" + workload + ":" + strconv.FormatUint(epoch, 10)
}

// CheckpointRecord is a checkpoint record (kind 38387): which checkpoint of
// a workload the holder of an epoch placed where. A record of a fresh start
// (Fresh) names no checkpoint: no manifest, sizes, hash, time or state URI.
//
// EventID, CreatedAt and Signer are the event's, set by
// DecodeCheckpointRecord; BuildCheckpointRecord ignores them.
type CheckpointRecord struct {
	// EventID is the event id (hex).
	EventID string
	// CreatedAt is the event's created_at.
	CreatedAt time.Time
	// Signer is the signer's hex public key; equal to Holder.
	Signer string

	// WorkloadID names the workload.
	WorkloadID string
	// Holder is the hex public key of the provider holding the workload at
	// Epoch: the signer. BuildCheckpointRecord fills it in when empty.
	Holder string
	// Epoch is the lease epoch the holder held (1 to lease.MaxEpoch-1).
	Epoch uint64
	// Seq numbers the holder's checkpoints within the epoch; 0 is the base
	// record, published after the holder placed the state it started from.
	Seq uint64
	// Manifest is the sha256 (hex) of the manifest blob (an
	// uploader.Manifest as JSON); ManifestSize its length in bytes.
	Manifest     string
	ManifestSize int64
	// Size and SHA256 are those the manifest gives: the checkpoint file's,
	// or for a checkpoint sealed with its grant's key the sealed tiles'
	// stream's (nothing of the file).
	Size   int64
	SHA256 string
	// TakenAt is when the workload wrote the checkpoint (taken_at_ms on the
	// wire: milliseconds, rounded down); not after CreatedAt's second.
	TakenAt time.Time
	// Servers are the Blossom base URLs (http or https) confirmed to hold
	// the manifest and every tile: 1 to lease.MaxCheckpointServers, each at most
	// lease.MaxServerURLBytes; none for a fresh record.
	Servers []string
	// StateURI is the BUD-10 URI of the manifest blob (what a revocation
	// carries), "" if not given; it must name Manifest.
	StateURI string
	// GrantAt is the created_at of the lease grant the epoch belongs to
	// (grant_at, unix seconds): it binds the record to that grant.
	GrantAt time.Time
	// Parent is the id of the record this epoch's state was restored from,
	// "" if none.
	Parent string
	// Final marks the checkpoint written after the process exited in a
	// planned stop.
	Final bool
	// Fresh marks the base record of a holder that started without state.
	Fresh bool
	// Version is the content schema version; 0 builds SchemaVersion.
	Version uint8
}

// checkpointWire is the content JSON; keys and hashes are lowercase hex.
type checkpointWire struct {
	WorkloadID   string   `json:"workload_id"`
	Holder       string   `json:"holder"`
	Epoch        uint64   `json:"epoch"`
	Seq          uint64   `json:"seq"`
	Manifest     string   `json:"manifest,omitempty"`
	ManifestSize int64    `json:"manifest_size,omitempty"`
	Size         int64    `json:"size,omitempty"`
	SHA256       string   `json:"sha256,omitempty"`
	TakenAtMS    int64    `json:"taken_at_ms,omitempty"`
	Servers      []string `json:"servers"`
	StateURI     string   `json:"state_uri,omitempty"`
	GrantAt      int64    `json:"grant_at"`
	Parent       string   `json:"parent,omitempty"`
	Final        bool     `json:"final,omitempty"`
	Fresh        bool     `json:"fresh,omitempty"`
	Version      uint8    `json:"version"`
}

// checkpointIn decodes content with presence detection of required fields.
type checkpointIn struct {
	WorkloadID   *string  `json:"workload_id"`
	Holder       *string  `json:"holder"`
	Epoch        *uint64  `json:"epoch"`
	Seq          *uint64  `json:"seq"`
	Manifest     string   `json:"manifest"`
	ManifestSize int64    `json:"manifest_size"`
	Size         int64    `json:"size"`
	SHA256       string   `json:"sha256"`
	TakenAtMS    int64    `json:"taken_at_ms"`
	Servers      []string `json:"servers"`
	StateURI     string   `json:"state_uri"`
	GrantAt      *int64   `json:"grant_at"`
	Parent       string   `json:"parent"`
	Final        bool     `json:"final"`
	Fresh        bool     `json:"fresh"`
	Version      *uint8   `json:"version"`
}

// BuildCheckpointRecord builds record r with created_at createdAt, checks it
// with the decoder's rules (a record a peer would refuse is never built) and
// signs it with k, the holder. Tags: d, workload, t, v and x (the manifest);
// no p tags and no expiration. Keep created_at rising per d tag
// (NextCreatedAt): relays keep only the newest record of an epoch.
func BuildCheckpointRecord(k *identity.Keys, r CheckpointRecord, createdAt time.Time) (*nostr.Event, error) {
	if k == nil {
		return nil, fmt.Errorf("build checkpoint record: nil keys")
	}
	ts := createdAt.Unix() // its range is the decoder's check below
	if r.GrantAt.IsZero() {
		return nil, fmt.Errorf("build checkpoint record: grant_at is zero: every record names the grant its epoch belongs to")
	}
	if r.Holder == "" {
		r.Holder = k.PublicKey()
	}
	if r.Version == 0 {
		r.Version = SchemaVersion
	}
	w := checkpointWire{
		WorkloadID: r.WorkloadID, Holder: r.Holder, Epoch: r.Epoch, Seq: r.Seq,
		Manifest: r.Manifest, ManifestSize: r.ManifestSize, Size: r.Size, SHA256: r.SHA256,
		Servers: nonNil(r.Servers), StateURI: r.StateURI, GrantAt: r.GrantAt.Unix(),
		Parent: r.Parent, Final: r.Final, Fresh: r.Fresh, Version: r.Version,
	}
	if !r.TakenAt.IsZero() {
		w.TakenAtMS = r.TakenAt.UnixMilli()
	}
	content, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("build checkpoint record: %w", err)
	}
	tags := nostr.Tags{
		{"d", CheckpointDTag(r.WorkloadID, r.Epoch)},
		{"workload", r.WorkloadID},
		{"t", tagCheckpoint},
		{"v", versionTag},
	}
	if r.Manifest != "" {
		tags = append(tags, nostr.Tag{"x", r.Manifest})
	}
	ev := &nostr.Event{PubKey: k.PublicKey(), CreatedAt: nostr.Timestamp(ts), Kind: KindCheckpoint, Tags: tags, Content: string(content)}
	if _, err := DecodeCheckpointRecord(ev); err != nil {
		return nil, fmt.Errorf("build checkpoint record: %w", err)
	}
	if err := k.Sign(ev); err != nil {
		return nil, fmt.Errorf("build checkpoint record: %w", err)
	}
	return ev, nil
}

// DecodeCheckpointRecord decodes a checkpoint record and checks its tags,
// types and ranges, and that the holder it names is its signer; unknown
// content fields are ignored. Whether the signer is a member of the lease
// is the Ingestor's SignerPolicy check; whether it held that epoch is the
// restorer's. It does not verify the signature. Errors are *RejectError
// naming the field and the bad value.
func DecodeCheckpointRecord(ev *nostr.Event) (*CheckpointRecord, error) {
	if ev.Kind != KindCheckpoint {
		return nil, reject(ReasonBadKind, "kind %d is not a checkpoint record", ev.Kind)
	}
	if len(ev.Content) > MaxCheckpointContentBytes {
		return nil, reject(ReasonTooLarge, "checkpoint content is %d bytes, max %d", len(ev.Content), MaxCheckpointContentBytes)
	}
	if rej := requireTags(ev.Tags, tagCheckpoint); rej != nil {
		return nil, rej
	}
	if ev.CreatedAt < 0 || ev.CreatedAt > maxUnix {
		return nil, reject(ReasonDecode, "created_at %d out of range", ev.CreatedAt)
	}
	var in checkpointIn
	if rej := unmarshalContent("checkpoint", ev.Content, &in); rej != nil {
		return nil, rej
	}
	r, rej := checkpointFields(in, int64(ev.CreatedAt))
	if rej != nil {
		return nil, rej
	}
	if r.Holder != ev.PubKey {
		return nil, reject(ReasonWrongSigner, "checkpoint content: holder %.64s is not the signer %.64s", r.Holder, ev.PubKey)
	}
	if w, _ := firstTag(ev.Tags, "workload"); w != r.WorkloadID {
		return nil, reject(ReasonBadTags, "workload tag %.64q does not match workload_id %q", w, r.WorkloadID)
	}
	if d, _ := firstTag(ev.Tags, "d"); d != CheckpointDTag(r.WorkloadID, r.Epoch) {
		return nil, reject(ReasonBadTags, "d tag %.120q is not %q", d, CheckpointDTag(r.WorkloadID, r.Epoch))
	}
	if x, _ := firstTag(ev.Tags, "x"); x != r.Manifest {
		return nil, reject(ReasonBadTags, "x tag %.80q does not match manifest %q", x, r.Manifest)
	}
	r.EventID = ev.ID
	r.Signer = ev.PubKey
	r.CreatedAt = unixTime(uint64(ev.CreatedAt))
	return r, nil
}

// checkpointFields checks the content fields; created is the event's
// created_at (unix seconds).
func checkpointFields(in checkpointIn, created int64) (*CheckpointRecord, *RejectError) {
	bad := func(format string, args ...any) *RejectError {
		return reject(ReasonDecode, "checkpoint content: "+format, args...)
	}
	switch {
	case in.WorkloadID == nil:
		return nil, bad("missing workload_id")
	case in.Holder == nil:
		return nil, bad("missing holder")
	case in.Epoch == nil:
		return nil, bad("missing epoch")
	case in.Seq == nil:
		return nil, bad("missing seq")
	case in.GrantAt == nil:
		return nil, bad("missing grant_at")
	case in.Servers == nil:
		return nil, bad("missing servers")
	case in.Version == nil:
		return nil, bad("missing version")
	}
	if err := ValidateWorkloadID(*in.WorkloadID); err != nil {
		return nil, rejectErr(ReasonDecode, err, "checkpoint content: workload_id")
	}
	if *in.Version != SchemaVersion {
		return nil, bad("version %d, want %d", *in.Version, SchemaVersion)
	}
	if !isHex64(*in.Holder) {
		return nil, bad("holder %.80q, want 64 lowercase hex characters", *in.Holder)
	}
	if e := *in.Epoch; e < 1 || e >= lease.MaxEpoch {
		return nil, bad("epoch %d, want 1 to %d", e, uint64(lease.MaxEpoch-1))
	}
	if s := *in.Seq; s >= MaxCheckpointSeq {
		return nil, bad("seq %d, want 0 to %d", s, uint64(MaxCheckpointSeq-1))
	}
	if g := *in.GrantAt; g < 0 || g > maxUnix {
		return nil, bad("grant_at %d, want a unix time in seconds", g)
	}
	if in.Parent != "" && !isHex64(in.Parent) {
		return nil, bad("parent %.80q, want an event id (64 lowercase hex characters)", in.Parent)
	}
	if err := lease.ValidateCheckpointServers(in.Servers, !in.Fresh); err != nil {
		return nil, bad("%v", err)
	}
	r := &CheckpointRecord{
		WorkloadID: *in.WorkloadID, Holder: *in.Holder, Epoch: *in.Epoch, Seq: *in.Seq,
		Servers: in.Servers, GrantAt: time.Unix(*in.GrantAt, 0).UTC(), Parent: in.Parent,
		Final: in.Final, Fresh: in.Fresh, Version: *in.Version,
	}
	if in.Fresh {
		switch {
		case in.Final:
			return nil, bad("final and fresh both set: a fresh start names no checkpoint to hand over")
		case in.Manifest != "" || in.ManifestSize != 0 || in.Size != 0 || in.SHA256 != "" || in.TakenAtMS != 0 || in.StateURI != "":
			return nil, bad("fresh record with checkpoint fields (manifest, manifest_size, size, sha256, taken_at_ms, state_uri)")
		}
		return r, nil
	}
	switch {
	case !isHex64(in.Manifest):
		return nil, bad("manifest %.80q, want a sha256 (64 lowercase hex characters)", in.Manifest)
	case !isHex64(in.SHA256):
		return nil, bad("sha256 %.80q, want 64 lowercase hex characters", in.SHA256)
	case in.ManifestSize <= 0:
		return nil, bad("manifest_size %d, want > 0", in.ManifestSize)
	case in.Size <= 0:
		return nil, bad("size %d, want > 0", in.Size)
	case in.TakenAtMS <= 0 || in.TakenAtMS/1000 > created:
		return nil, bad("taken_at_ms %d, want 1 to created_at %d s in milliseconds", in.TakenAtMS, created)
	case len(in.StateURI) > MaxStateURIBytes:
		return nil, bad("state_uri of %d bytes, max %d", len(in.StateURI), MaxStateURIBytes)
	case in.StateURI != "" && !strings.HasPrefix(in.StateURI, "blossom:"+in.Manifest+"."):
		return nil, bad("state_uri %.80q does not name the manifest (want blossom:%s.<ext>...)", in.StateURI, in.Manifest)
	}
	r.Manifest, r.ManifestSize, r.Size, r.SHA256 = in.Manifest, in.ManifestSize, in.Size, in.SHA256
	r.TakenAt = time.UnixMilli(in.TakenAtMS).UTC()
	r.StateURI = in.StateURI
	return r, nil
}

// isHex64 reports whether s is 64 lowercase hex characters (a key, an
// event id or a sha256).
func isHex64(s string) bool { return len(s) == 64 && identity.IsLowerHex(s) }
