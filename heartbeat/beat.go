package heartbeat

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
	"provideragent/lease"
)

// Beat is one heartbeat beat, ready to publish: Stored[0] is the
// Paygress-form stored heartbeat (kind 38384), Stored[1:] are its
// KindHeartbeatShard continuations when the held list did not fit one
// event, all with one created_at; Ephemeral is the kind 20384 copy of
// Stored[0] (live presence). A standby reads the list per relay from every
// shard; the beat counts for the provider's quorum on a relay only once all
// its shards came from it (lease.Heartbeat.Shards).
type Beat struct {
	Stored    []*nostr.Event
	Ephemeral *nostr.Event
	// Sizes[i] bounds the NIP-01 JSON size of Stored[i] and EphemeralSize
	// that of Ephemeral, as relays measure them (computed while building,
	// with room for the widest shard numbers: at most a few bytes over).
	Sizes         []int
	EphemeralSize int
}

// MaxSize is the largest event of the beat, in bytes of NIP-01 JSON.
func (b Beat) MaxSize() int {
	m := b.EphemeralSize
	for _, s := range b.Sizes {
		m = max(m, s)
	}
	return m
}

// Events returns every event of the beat, the ephemeral one last.
func (b Beat) Events() []*nostr.Event {
	return append(append([]*nostr.Event(nil), b.Stored...), b.Ephemeral)
}

// BuildBeat builds and signs one beat. The held list is dealt, in order,
// over as few events as keep each within p.MaxEventBytes
// (DefaultMaxEventBytes when zero) and p.MaxContentBytes: a list that fits
// one event gives the same events as BuildHeartbeats. Sizes are the events'
// NIP-01 JSON, as relays measure them.
func BuildBeat(k *identity.Keys, p HeartbeatParams) (Beat, error) {
	ts, exp, err := checkBeat(k, p)
	if err != nil {
		return Beat{}, err
	}
	maxEvent := p.MaxEventBytes
	if maxEvent <= 0 {
		maxEvent = DefaultMaxEventBytes
	}
	maxContent := p.MaxContentBytes
	if maxContent <= 0 {
		maxContent = maxEvent
	}
	// The empty events, with the widest shard numbers, bound every event's
	// fixed part; each listed workload adds its JSON (escaped once more
	// inside the event's content string) and a comma.
	base := func(i int) (event, content int, err error) {
		ev, err := beatEvent(k, p, ts, exp, nil, i, lease.MaxShards, false)
		if err != nil {
			return 0, 0, err
		}
		return signedSize(ev), len(ev.Content), nil
	}
	base0, content0, err := base(0)
	if err != nil {
		return Beat{}, err
	}
	baseN, contentN, err := base(lease.MaxShards - 1)
	if err != nil {
		return Beat{}, err
	}
	var parts [][]WorkloadEpoch
	var sizes []int
	start, event, content := 0, base0, content0
	for i, we := range p.Workloads {
		addEvent, addContent, err := entrySize(we)
		if err != nil {
			return Beat{}, fmt.Errorf("build heartbeat: %w", err)
		}
		if event+addEvent > maxEvent || content+addContent > maxContent {
			if i > start {
				parts = append(parts, p.Workloads[start:i])
				sizes = append(sizes, event)
				start, event, content = i, baseN, contentN
			}
			if event+addEvent > maxEvent || content+addContent > maxContent {
				return Beat{}, fmt.Errorf("build heartbeat: workload %.64q alone does not fit an event of %d bytes", we.ID, maxEvent)
			}
		}
		event += addEvent
		content += addContent
	}
	parts = append(parts, p.Workloads[start:])
	sizes = append(sizes, event)
	if len(parts) > lease.MaxShards {
		return Beat{}, fmt.Errorf("build heartbeat: %d workloads need %d events of at most %d bytes, max %d", len(p.Workloads), len(parts), maxEvent, lease.MaxShards)
	}
	var b Beat
	for i, part := range parts {
		ev, err := beatEvent(k, p, ts, exp, part, i, len(parts), false)
		if err != nil {
			return Beat{}, err
		}
		if err := k.Sign(ev); err != nil {
			return Beat{}, fmt.Errorf("build heartbeat: %w", err)
		}
		// Sizes were computed exactly above (TestEntrySizeMatchesEncoding,
		// FuzzBuildBeat measure the events): no second encoding here.
		if len(ev.Content) > maxContent {
			return Beat{}, fmt.Errorf("build heartbeat: shard %d content is %d bytes, over the limit %d", i, len(ev.Content), maxContent)
		}
		b.Stored = append(b.Stored, ev)
	}
	// The ephemeral copy leaves out the checkpoint marks: the stored
	// events carry them (a standby hears those live too), and a beat of
	// many durable workloads would double its bytes for nothing.
	eph, err := beatEvent(k, p, ts, exp, withoutMarks(parts[0]), 0, len(parts), true)
	if err != nil {
		return Beat{}, err
	}
	if err := k.Sign(eph); err != nil {
		return Beat{}, fmt.Errorf("build heartbeat: %w", err)
	}
	b.Ephemeral = eph
	b.Sizes = sizes
	b.EphemeralSize = len(eph.String())
	return b, nil
}

// signedSize is the JSON size ev will have once signed (id and sig filled).
func signedSize(ev *nostr.Event) int {
	c := *ev
	c.ID, c.Sig = strings.Repeat("0", 64), strings.Repeat("0", 128)
	if c.PubKey == "" {
		c.PubKey = strings.Repeat("0", 64)
	}
	return len(c.String())
}

// entrySize is what one listed workload adds to a beat event: to its
// content (its JSON and a comma) and to the event's JSON (the same, escaped
// once more inside the content string). Ids of printable ASCII without the
// characters JSON encoders escape are sized without encoding anything.
func entrySize(we WorkloadEpoch) (event, content int, err error) {
	if plainID(we.ID) && (we.Checkpoint.IsZero() || isHex64(we.Checkpoint.Manifest)) {
		// {"id":"<id>","epoch":<n>}: its 6 quotes are escaped once more
		// in the event; a checkpoint mark ,"ckpt":{"seq":<n>,"sha256":"<hex>"}
		// adds 8 more.
		raw := len(`{"id":"","epoch":}`) + len(we.ID) + decimalLen(we.Epoch)
		quotes := 6
		if c := we.Checkpoint; !c.IsZero() {
			raw += len(`,"ckpt":{"seq":,"sha256":""}`) + decimalLen(c.Seq) + len(c.Manifest)
			quotes += 8
		}
		return raw + quotes + 1, raw + 1, nil
	}
	raw, err := json.Marshal(we)
	if err != nil {
		return 0, 0, err
	}
	quoted, _ := json.Marshal(string(raw))
	return len(quoted) - 2 + 1, len(raw) + 1, nil
}

func decimalLen(v uint64) int {
	n := 1
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}

// withoutMarks returns list with every checkpoint mark dropped (list
// itself when it has none).
func withoutMarks(list []WorkloadEpoch) []WorkloadEpoch {
	var out []WorkloadEpoch
	for i, we := range list {
		if we.Checkpoint.IsZero() {
			if out != nil {
				out = append(out, we)
			}
			continue
		}
		if out == nil {
			out = append(make([]WorkloadEpoch, 0, len(list)), list[:i]...)
		}
		out = append(out, WorkloadEpoch{ID: we.ID, Epoch: we.Epoch})
	}
	if out == nil {
		return list
	}
	return out
}
