package heartbeat

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
	"provideragent/lease"
)

// Capacity is a heartbeat's available_capacity (Paygress CapacityInfo).
type Capacity struct {
	// CPUAvailable is in millicores.
	CPUAvailable uint64 `json:"cpu_available"`
	// MemoryMBAvailable is in MiB.
	MemoryMBAvailable uint64 `json:"memory_mb_available"`
	// StorageGBAvailable is in GiB.
	StorageGBAvailable uint64 `json:"storage_gb_available"`
}

// WorkloadEpoch is one workload a provider holds Live, at an epoch (ours): the
// lease machine's own type, so decoded heartbeats feed it without copying.
type WorkloadEpoch = lease.WorkloadEpoch

// Heartbeat is a decoded heartbeat of either kind.
//
// Defaults for Paygress-made heartbeats: they carry no workloads list, so
// ListsWorkloads is false and Workloads is empty. By the design's takeover
// rule any heartbeat of such a provider counts as a Live claim of every
// workload it holds; use ClaimsLive rather than reading Workloads directly.
type Heartbeat struct {
	// EventID is the event id (hex).
	EventID string
	// Ephemeral is true for kind 20384, false for the stored kind 38384.
	Ephemeral bool
	// Provider is the signer's hex public key (checked equal to the p tag and
	// to ProviderNpub).
	Provider string
	// ProviderNpub is the content's provider_npub as written: lowercase hex
	// from Paygress and from us, an npub from older agents.
	ProviderNpub string
	// CreatedAt is the event's created_at.
	CreatedAt time.Time
	// Timestamp is the content's timestamp.
	Timestamp time.Time
	// Expiration is the NIP-40 expiration, zero when the event has none
	// (Paygress writes none).
	Expiration time.Time
	// ActiveWorkloads is Paygress's count of active workloads.
	ActiveWorkloads uint32
	// Capacity is the available capacity.
	Capacity Capacity
	// Version is the payload schema version (always 1).
	Version uint8
	// ListsWorkloads is true when the content has a workloads list (ours);
	// false for Paygress heartbeats.
	ListsWorkloads bool
	// Workloads are the (workload, epoch) pairs held Live, sorted as sent
	// (this shard's part, for a sharded beat).
	Workloads []WorkloadEpoch
	// Shard and Shards place the event in its beat: the stored heartbeat is
	// shard 0 of Shards (1 unless the list was split: our "shards" field);
	// a KindHeartbeatShard event is shard 1 and up. The ephemeral heartbeat
	// copies shard 0.
	Shard, Shards int
}

// IsHeartbeatKind reports whether kind is one of the heartbeat kinds
// (stored, ephemeral, shard).
func IsHeartbeatKind(kind int) bool {
	return kind == KindHeartbeat || kind == KindHeartbeatEphemeral || kind == KindHeartbeatShard
}

// ClaimsLive reports whether this heartbeat is a Live claim of workloadID and
// at which epoch. A heartbeat that lists workloads claims exactly those; a
// Paygress heartbeat (no list) claims every workload, at EpochUnknown.
func (h *Heartbeat) ClaimsLive(workloadID string) (epoch uint64, ok bool) {
	if !h.ListsWorkloads {
		return EpochUnknown, true
	}
	for _, w := range h.Workloads {
		if w.ID == workloadID {
			return w.Epoch, true
		}
	}
	return 0, false
}

// HeartbeatParams are the inputs of BuildHeartbeat.
type HeartbeatParams struct {
	// At is the heartbeat time: created_at and content timestamp (seconds).
	At time.Time
	// ActiveWorkloads is Paygress's active_workloads; when zero it defaults
	// to len(Workloads).
	ActiveWorkloads uint32
	// Capacity is the available capacity.
	Capacity Capacity
	// Workloads are the (workload, epoch) pairs the provider holds Live. The
	// list is always written, empty included.
	Workloads []WorkloadEpoch
	// TTL sets the NIP-40 expiration to At+TTL; zero means
	// DefaultHeartbeatTTL. The agent passes its configured TTL, at least
	// MinHeartbeatTTL of its lease.
	TTL time.Duration
	// MaxEventBytes bounds every event of a beat (its NIP-01 JSON), so the
	// beat fits the relays' limits (BuildBeat splits the list over shards to
	// stay within it); zero means DefaultMaxEventBytes. MaxContentBytes,
	// when set, bounds the content alone (NIP-11 max_content_length).
	MaxEventBytes, MaxContentBytes int
}

// DefaultMaxEventBytes bounds each event of a beat when HeartbeatParams
// says nothing: 60 KiB, under strfry's default 65,536-byte event limit.
const DefaultMaxEventBytes = 60 * 1024

// heartbeatWire is the content JSON in Paygress field order, plus ours.
// ProviderNpub holds the lowercase hex public key, as Paygress writes it
// (get_service_public_key is to_hex), despite the field's name.
type heartbeatWire struct {
	ProviderNpub      string       `json:"provider_npub"`
	Timestamp         uint64       `json:"timestamp"`
	ActiveWorkloads   uint32       `json:"active_workloads"`
	AvailableCapacity Capacity     `json:"available_capacity"`
	Version           uint8        `json:"version"`
	Workloads         workloadList `json:"workloads"`
	Shards            int          `json:"shards,omitempty"`
}

// shardWire is the content of a KindHeartbeatShard event.
type shardWire struct {
	ProviderNpub string       `json:"provider_npub"`
	Timestamp    uint64       `json:"timestamp"`
	Version      uint8        `json:"version"`
	Shard        int          `json:"shard"`
	Shards       int          `json:"shards"`
	Workloads    workloadList `json:"workloads"`
}

// workloadList encodes a held list as encoding/json would, without
// reflection per entry (a beat of 100,000 workloads encodes 100,000).
type workloadList []WorkloadEpoch

// MarshalJSON implements json.Marshaler.
func (l workloadList) MarshalJSON() ([]byte, error) {
	size := 2
	for _, we := range l {
		size += len(we.ID) + 32
	}
	b := make([]byte, 0, size)
	b = append(b, '[')
	for i, we := range l {
		if i > 0 {
			b = append(b, ',')
		}
		if !plainID(we.ID) {
			raw, err := json.Marshal(we)
			if err != nil {
				return nil, err
			}
			b = append(b, raw...)
			continue
		}
		b = append(b, `{"id":"`...)
		b = append(b, we.ID...)
		b = append(b, `","epoch":`...)
		b = strconv.AppendUint(b, we.Epoch, 10)
		if c := we.Checkpoint; !c.IsZero() {
			b = append(b, `,"ckpt":{"seq":`...)
			b = strconv.AppendUint(b, c.Seq, 10)
			b = append(b, `,"sha256":"`...)
			b = append(b, c.Manifest...)
			b = append(b, `"}`...)
		}
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

// plainID reports whether id is printable ASCII without the characters
// JSON encoders escape (quote, backslash, <, >, &): it is its own JSON
// string body.
func plainID(id string) bool {
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// heartbeatIn decodes content with presence detection of required fields.
type heartbeatIn struct {
	ProviderNpub      *string      `json:"provider_npub"`
	Timestamp         *uint64      `json:"timestamp"`
	ActiveWorkloads   *uint32      `json:"active_workloads"`
	AvailableCapacity *capacityIn  `json:"available_capacity"`
	Version           *uint8       `json:"version"`
	Workloads         *[]workload1 `json:"workloads"`
	Shard             *uint64      `json:"shard"`
	Shards            *uint64      `json:"shards"`
}

type capacityIn struct {
	CPUAvailable       *uint64 `json:"cpu_available"`
	MemoryMBAvailable  *uint64 `json:"memory_mb_available"`
	StorageGBAvailable *uint64 `json:"storage_gb_available"`
}

type workload1 struct {
	ID    *string `json:"id"`
	Epoch *uint64 `json:"epoch"`
	Ckpt  *ckptIn `json:"ckpt"`
}

// ckptIn is a held entry's checkpoint mark (ours, optional).
type ckptIn struct {
	Seq    *uint64 `json:"seq"`
	SHA256 *string `json:"sha256"`
}

// BuildHeartbeat builds and signs a heartbeat: the stored kind 38384, or the
// ephemeral kind 20384 when ephemeral is true. It lists every workload in
// one event, whatever its size: BuildBeat splits long lists.
func BuildHeartbeat(k *identity.Keys, p HeartbeatParams, ephemeral bool) (*nostr.Event, error) {
	ts, exp, err := checkBeat(k, p)
	if err != nil {
		return nil, err
	}
	ev, err := beatEvent(k, p, ts, exp, p.Workloads, 0, 1, ephemeral)
	if err != nil {
		return nil, err
	}
	if err := k.Sign(ev); err != nil {
		return nil, fmt.Errorf("build heartbeat: %w", err)
	}
	return ev, nil
}

// checkBeat validates p and returns the beat's created_at and expiration.
func checkBeat(k *identity.Keys, p HeartbeatParams) (ts int64, exp string, err error) {
	if k == nil {
		return 0, "", fmt.Errorf("build heartbeat: nil keys")
	}
	ts = p.At.Unix()
	if ts < 0 || ts > maxUnix {
		return 0, "", fmt.Errorf("build heartbeat: time %v out of range", p.At)
	}
	if err := validateWorkloads(p.Workloads); err != nil {
		return 0, "", fmt.Errorf("build heartbeat: %w", err)
	}
	ttl := p.TTL
	if ttl == 0 {
		ttl = DefaultHeartbeatTTL
	}
	if ttl < time.Second {
		return 0, "", fmt.Errorf("build heartbeat: ttl %v below 1s", ttl)
	}
	if ttl/time.Second > maxUnix-time.Duration(ts) {
		// Peers (our decoders too) reject an expiration beyond year 9999.
		return 0, "", fmt.Errorf("build heartbeat: ttl %v puts the expiration out of range", ttl)
	}
	return ts, strconv.FormatInt(ts+int64(ttl/time.Second), 10), nil
}

// beatEvent is shard i of shards of a beat, unsigned: shard 0 is the
// Paygress-form heartbeat (stored, or ephemeral), the others
// KindHeartbeatShard events.
func beatEvent(k *identity.Keys, p HeartbeatParams, ts int64, exp string, list []WorkloadEpoch, i, shards int, ephemeral bool) (*nostr.Event, error) {
	if list == nil {
		list = []WorkloadEpoch{}
	}
	ev := &nostr.Event{CreatedAt: nostr.Timestamp(ts)}
	var content []byte
	var err error
	if i > 0 {
		content, err = json.Marshal(shardWire{
			ProviderNpub: k.PublicKey(), Timestamp: uint64(ts), Version: SchemaVersion, Shard: i, Shards: shards, Workloads: list,
		})
		ev.Kind = KindHeartbeatShard
		ev.Tags = nostr.Tags{
			{"t", tagShard},
			{"p", k.PublicKey()},
			{"d", ShardDTag(k.PublicKey(), uint64(ts), i)},
			{"v", versionTag},
			{"expiration", exp},
		}
	} else {
		active := p.ActiveWorkloads
		if active == 0 {
			active = uint32(len(p.Workloads))
		}
		w := heartbeatWire{
			ProviderNpub: k.PublicKey(), Timestamp: uint64(ts), ActiveWorkloads: active, AvailableCapacity: p.Capacity,
			Version: SchemaVersion, Workloads: list,
		}
		if shards > 1 {
			w.Shards = shards
		}
		content, err = json.Marshal(w)
		if ephemeral {
			ev.Kind = KindHeartbeatEphemeral
			ev.Tags = nostr.Tags{
				{"t", tagHeartbeat},
				{"p", k.PublicKey()},
				{"v", versionTag},
				{"expiration", exp},
			}
		} else {
			ev.Kind = KindHeartbeat
			ev.Tags = nostr.Tags{
				{"t", tagHeartbeat},
				{"p", k.PublicKey()},
				{"d", HeartbeatDTag(k.PublicKey(), uint64(ts))},
				{"v", versionTag},
				{"expiration", exp},
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("build heartbeat: %w", err)
	}
	ev.Content = string(content)
	return ev, nil
}

// BuildHeartbeats builds the stored and the ephemeral heartbeat for one beat
// (Paygress publishes both on every beat).
func BuildHeartbeats(k *identity.Keys, p HeartbeatParams) (stored, ephemeral *nostr.Event, err error) {
	stored, err = BuildHeartbeat(k, p, false)
	if err != nil {
		return nil, nil, err
	}
	ephemeral, err = BuildHeartbeat(k, p, true)
	if err != nil {
		return nil, nil, err
	}
	return stored, ephemeral, nil
}

// DecodeHeartbeat decodes a heartbeat of either kind and checks its tags and
// that it names its signer. It does not check the id or the signature (the
// Ingestor does): call it on verified events only.
func DecodeHeartbeat(ev *nostr.Event) (*Heartbeat, error) {
	if !IsHeartbeatKind(ev.Kind) {
		return nil, reject(ReasonBadKind, "kind %d is not a heartbeat", ev.Kind)
	}
	tag := tagHeartbeat
	if ev.Kind == KindHeartbeatShard {
		tag = tagShard
	}
	if rej := requireTags(ev.Tags, tag); rej != nil {
		return nil, rej
	}
	p, ok := firstTag(ev.Tags, "p")
	if !ok {
		return nil, reject(ReasonBadTags, "missing tag p")
	}
	if p != ev.PubKey {
		return nil, reject(ReasonWrongSigner, "p tag names another provider than the signer")
	}
	exp, hasExp, rej := expiration(ev.Tags)
	if rej != nil {
		return nil, rej
	}
	if ev.CreatedAt < 0 || ev.CreatedAt > maxUnix {
		return nil, reject(ReasonDecode, "created_at %d out of range", ev.CreatedAt)
	}

	if err := checkContent(ev.Content); err != nil {
		return nil, rejectErr(ReasonDecode, err, "heartbeat content")
	}
	in, err := decodeHeartbeatContent([]byte(ev.Content))
	if err != nil {
		return nil, rejectErr(ReasonDecode, err, "heartbeat content")
	}
	shard := ev.Kind == KindHeartbeatShard
	switch {
	case in.ProviderNpub == nil:
		return nil, reject(ReasonDecode, "heartbeat content: missing provider_npub")
	case in.Timestamp == nil:
		return nil, reject(ReasonDecode, "heartbeat content: missing timestamp")
	case *in.Timestamp > maxUnix:
		return nil, reject(ReasonDecode, "heartbeat content: timestamp %d out of range", *in.Timestamp)
	case shard && (in.Shard == nil || in.Shards == nil || in.Workloads == nil):
		return nil, reject(ReasonDecode, "heartbeat shard content: missing shard, shards or workloads")
	case shard:
	case in.ActiveWorkloads == nil:
		return nil, reject(ReasonDecode, "heartbeat content: missing active_workloads")
	case in.AvailableCapacity == nil:
		return nil, reject(ReasonDecode, "heartbeat content: missing available_capacity")
	case in.AvailableCapacity.CPUAvailable == nil || in.AvailableCapacity.MemoryMBAvailable == nil ||
		in.AvailableCapacity.StorageGBAvailable == nil:
		return nil, reject(ReasonDecode, "heartbeat content: incomplete available_capacity")
	}
	shardIdx, shards := 0, 1
	if in.Shards != nil {
		if *in.Shards < 1 || *in.Shards > lease.MaxShards {
			return nil, reject(ReasonDecode, "heartbeat content: shards = %d, want 1 to %d", *in.Shards, lease.MaxShards)
		}
		shards = int(*in.Shards)
	}
	if shard {
		if *in.Shard < 1 || *in.Shard >= uint64(shards) {
			return nil, reject(ReasonDecode, "heartbeat shard content: shard = %d of %d, want 1 to %d", *in.Shard, shards, shards-1)
		}
		shardIdx = int(*in.Shard)
	} else if in.Shard != nil && *in.Shard != 0 {
		return nil, reject(ReasonDecode, "heartbeat content: shard = %d, the first event of a beat is shard 0", *in.Shard)
	}
	version, rej := decodeVersion(in.Version)
	if rej != nil {
		return nil, rej
	}
	provider, err := identity.PublicKeyHex(*in.ProviderNpub)
	if err != nil {
		return nil, rejectErr(ReasonDecode, err, "heartbeat content: provider_npub")
	}
	if provider != ev.PubKey {
		return nil, reject(ReasonWrongSigner, "provider_npub names another provider than the signer")
	}
	if shard {
		d, _ := firstTag(ev.Tags, "d")
		if d != ShardDTag(provider, *in.Timestamp, shardIdx) {
			return nil, reject(ReasonBadTags, "d tag %.120q does not match provider, timestamp and shard", d)
		}
	}
	if ev.Kind == KindHeartbeat {
		d, ok := firstTag(ev.Tags, "d")
		if !ok {
			return nil, reject(ReasonBadTags, "stored heartbeat without d tag")
		}
		build := func(key string) string { return HeartbeatDTag(key, *in.Timestamp) }
		if !dTagNamesKey(d, *in.ProviderNpub, provider, build) {
			return nil, reject(ReasonBadTags, "d tag %.120q does not match provider_npub and timestamp", d)
		}
	}

	h := &Heartbeat{
		EventID:      ev.ID,
		Ephemeral:    ev.Kind == KindHeartbeatEphemeral,
		Provider:     ev.PubKey,
		ProviderNpub: *in.ProviderNpub,
		CreatedAt:    unixTime(uint64(ev.CreatedAt)),
		Timestamp:    unixTime(*in.Timestamp),
		Version:      version,
		Shard:        shardIdx,
		Shards:       shards,
	}
	if !shard {
		h.ActiveWorkloads = *in.ActiveWorkloads
		h.Capacity = Capacity{
			CPUAvailable:       *in.AvailableCapacity.CPUAvailable,
			MemoryMBAvailable:  *in.AvailableCapacity.MemoryMBAvailable,
			StorageGBAvailable: *in.AvailableCapacity.StorageGBAvailable,
		}
	}
	if hasExp {
		h.Expiration = unixTime(uint64(exp))
	}
	if in.Workloads != nil {
		h.ListsWorkloads = true
		h.Workloads = make([]WorkloadEpoch, 0, len(*in.Workloads))
		for i, w := range *in.Workloads {
			if w.ID == nil || w.Epoch == nil {
				return nil, reject(ReasonDecode, "heartbeat content: workloads[%d] lacks id or epoch", i)
			}
			we := WorkloadEpoch{ID: *w.ID, Epoch: *w.Epoch}
			if c := w.Ckpt; c != nil {
				if c.Seq == nil || c.SHA256 == nil {
					return nil, reject(ReasonDecode, "heartbeat content: workloads[%d].ckpt lacks seq or sha256", i)
				}
				we.Checkpoint = lease.CheckpointMark{Seq: *c.Seq, Manifest: *c.SHA256}
			}
			h.Workloads = append(h.Workloads, we)
		}
		if err := validateWorkloads(h.Workloads); err != nil {
			return nil, rejectErr(ReasonDecode, err, "heartbeat content")
		}
	}
	return h, nil
}

func validateWorkloads(ws []WorkloadEpoch) error {
	seen := make(map[string]struct{}, len(ws))
	for i, w := range ws {
		if err := ValidateWorkloadID(w.ID); err != nil {
			return fmt.Errorf("workloads[%d]: %w", i, err)
		}
		if w.Epoch == 0 {
			return fmt.Errorf("workloads[%d]: epoch 0, epochs start at 1", i)
		}
		if c := w.Checkpoint; c != (lease.CheckpointMark{}) && (c.Seq == 0 || !isHex64(c.Manifest)) {
			return fmt.Errorf("workloads[%d]: ckpt must have a seq from 1 and a sha256 of 64 lower-case hex digits", i)
		}
		if _, dup := seen[w.ID]; dup {
			return fmt.Errorf("workloads[%d]: duplicate workload id", i)
		}
		seen[w.ID] = struct{}{}
	}
	return nil
}

// decodeVersion applies Paygress's default (absent version = 1) and rejects
// other versions.
func decodeVersion(v *uint8) (uint8, *RejectError) {
	if v == nil {
		return SchemaVersion, nil
	}
	if *v != SchemaVersion {
		return 0, reject(ReasonDecode, "unsupported payload version %d", *v)
	}
	return *v, nil
}
