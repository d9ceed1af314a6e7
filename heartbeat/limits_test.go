package heartbeat

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
	"provideragent/lease"
)

// The wire's limits are inclusive: times from 1970 to the end of year 9999
// (maxUnix), MaxRelays relays, MaxLeaseStandbys standbys, MaxShards events a
// beat, and events of exactly the byte limits. These tests put every limit
// at its edge and one past it.

// TestBuildTimeRange: every builder signs events from 1970 to the end of
// year 9999 and refuses times outside; a heartbeat's expiration (At+TTL)
// must stay within year 9999 too.
func TestBuildTimeRange(t *testing.T) {
	p, s1 := testKeys(t, "p"), testKeys(t, "s1")
	builders := map[string]func(at time.Time) error{
		"heartbeat": func(at time.Time) error {
			_, err := BuildHeartbeat(p, HeartbeatParams{At: at, TTL: time.Second}, false)
			return err
		},
		"beat": func(at time.Time) error {
			_, err := BuildBeat(p, HeartbeatParams{At: at, TTL: time.Second, Workloads: []WorkloadEpoch{{ID: "a", Epoch: 1}}})
			return err
		},
		"revocation": func(at time.Time) error {
			_, err := BuildRevocation(p, RevocationParams{WorkloadID: "a", Standbys: []string{s1.PublicKey()}, At: at, Epoch: 1})
			return err
		},
		"promotion": func(at time.Time) error {
			_, err := BuildPromotion(s1, PromotionParams{WorkloadID: "a", At: at, Epoch: 2})
			return err
		},
		"lease grant": func(at time.Time) error {
			_, err := BuildLeaseGrant(p, testGrant(p, at))
			return err
		},
	}
	tests := []struct {
		at     time.Time
		wantOK map[string]bool // by builder; missing: refused
	}{
		{time.Unix(-1, 0), nil},
		{time.Unix(0, 0), map[string]bool{"heartbeat": true, "beat": true, "revocation": true, "promotion": true, "lease grant": true}},
		// A heartbeat at the last second has no room for its expiration.
		{time.Unix(maxUnix-1, 0), map[string]bool{"heartbeat": true, "beat": true, "revocation": true, "promotion": true, "lease grant": true}},
		{time.Unix(maxUnix, 0), map[string]bool{"revocation": true, "promotion": true, "lease grant": true}},
		{time.Unix(maxUnix+1, 0), nil},
	}
	for _, tt := range tests {
		for name, build := range builders {
			err := build(tt.at)
			if ok := err == nil; ok != tt.wantOK[name] {
				t.Errorf("build %s at unix %d = %v, want ok = %v", name, tt.at.Unix(), err, tt.wantOK[name])
			}
		}
	}
}

// TestBuildHeartbeatTTL: the TTL is at least a second, and At+TTL may reach
// the end of year 9999 but not pass it.
func TestBuildHeartbeatTTL(t *testing.T) {
	p := testKeys(t, "p")
	tests := []struct {
		at     int64
		ttl    time.Duration
		wantOK bool
	}{
		{t0.Unix(), time.Second, true},
		{t0.Unix(), time.Second - time.Millisecond, false},
		{maxUnix - 60, time.Minute, true},
		{maxUnix - 59, time.Minute, false},
	}
	for _, tt := range tests {
		ev, err := BuildHeartbeat(p, HeartbeatParams{At: time.Unix(tt.at, 0), TTL: tt.ttl}, false)
		if ok := err == nil; ok != tt.wantOK {
			t.Errorf("BuildHeartbeat(at %d, ttl %v) = %v, want ok = %v", tt.at, tt.ttl, err, tt.wantOK)
			continue
		}
		if err != nil {
			continue
		}
		want := strconv.FormatInt(tt.at+int64(tt.ttl/time.Second), 10)
		if exp, _ := firstTag(ev.Tags, "expiration"); exp != want {
			t.Errorf("BuildHeartbeat(at %d, ttl %v) expiration = %s, want %s", tt.at, tt.ttl, exp, want)
		}
	}
}

// testGrant is a valid lease grant with one standby, issued by k at at.
func testGrant(k *identity.Keys, at time.Time) LeaseGrantParams {
	return LeaseGrantParams{WorkloadID: "a", Primary: k.PublicKey(), Relays: []string{"wss://r1"}, Quorum: 1,
		Replication: lease.ReplicationNone, RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever}, Manifest: "m", At: at}
}

// TestDecodeTimeRange: every decoder reads created_at and a NIP-40
// expiration from 1970 to the end of year 9999 and refuses values outside,
// and an expiration tag without a value.
func TestDecodeTimeRange(t *testing.T) {
	p, s1, other := testKeys(t, "p"), testKeys(t, "s1"), testKeys(t, "other")
	hb, err := BuildHeartbeat(p, HeartbeatParams{At: t0}, false)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := BuildRevocation(p, RevocationParams{WorkloadID: "a", Standbys: []string{s1.PublicKey()}, At: t0, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	prom, err := BuildPromotion(s1, PromotionParams{WorkloadID: "a", At: t0, Epoch: 2})
	if err != nil {
		t.Fatal(err)
	}
	lg, err := BuildLeaseGrant(other, testGrant(p, t0))
	if err != nil {
		t.Fatal(err)
	}
	events := []struct {
		name   string
		ev     *nostr.Event
		signer *identity.Keys
		decode func(*nostr.Event) error
	}{
		{"heartbeat", hb, p, func(ev *nostr.Event) error { _, err := DecodeHeartbeat(ev); return err }},
		{"revocation", rev, p, func(ev *nostr.Event) error { _, err := DecodeRevocation(ev); return err }},
		{"promotion", prom, s1, func(ev *nostr.Event) error { _, err := DecodePromotion(ev); return err }},
		{"lease grant", lg, other, func(ev *nostr.Event) error { _, err := DecodeLeaseGrant(ev); return err }},
	}
	created := []struct {
		at   int64
		want RejectReason // "" accepted
	}{
		{-1, ReasonDecode},
		{0, ""},
		{maxUnix, ""},
		{maxUnix + 1, ReasonDecode},
	}
	for _, e := range events {
		for _, c := range created {
			ev := mutate(t, e.ev, e.signer, func(ev *nostr.Event) { ev.CreatedAt = nostr.Timestamp(c.at) })
			if got := ReasonOf(e.decode(ev)); got != c.want {
				t.Errorf("decode %s with created_at %d = reason %q, want %q", e.name, c.at, got, c.want)
			}
		}
	}

	expirations := []struct {
		tag  nostr.Tag
		want RejectReason
	}{
		{nostr.Tag{"expiration", "-1"}, ReasonBadTags},
		{nostr.Tag{"expiration", "0"}, ""},
		{nostr.Tag{"expiration", strconv.Itoa(maxUnix)}, ""},
		{nostr.Tag{"expiration", strconv.Itoa(maxUnix + 1)}, ReasonBadTags},
		{nostr.Tag{"expiration"}, ReasonBadTags},
	}
	for _, x := range expirations {
		ev := mutate(t, hb, p, func(ev *nostr.Event) {
			for i, tag := range ev.Tags {
				if tag[0] == "expiration" {
					ev.Tags[i] = x.tag
				}
			}
		})
		h, err := DecodeHeartbeat(ev)
		if got := ReasonOf(err); got != x.want {
			t.Errorf("DecodeHeartbeat(%q) = %v (reason %q), want reason %q", x.tag, err, got, x.want)
			continue
		}
		if err == nil {
			want, _ := strconv.ParseInt(x.tag[1], 10, 64)
			if h.Expiration.Unix() != want {
				t.Errorf("DecodeHeartbeat(%q).Expiration = %d, want %d", x.tag, h.Expiration.Unix(), want)
			}
		}
	}
}

// TestLeaseGrantLimits: a grant lists 1 to lease.MaxRelays relays and up to
// MaxLeaseStandbys standbys, and expires (when it does) after 1970 and by
// the end of year 9999, whether built or decoded.
func TestLeaseGrantLimits(t *testing.T) {
	p, issuer := testKeys(t, "p"), testKeys(t, "issuer")
	relays := func(n int) []string {
		rs := make([]string, n)
		for i := range rs {
			rs[i] = fmt.Sprintf("wss://r%d", i)
		}
		return rs
	}
	standbys := func(n int) []string {
		ss := make([]string, n)
		for i := range ss {
			ss[i] = testKeys(t, fmt.Sprintf("standby %d", i)).PublicKey()
		}
		return ss
	}
	tests := []struct {
		name   string
		change func(*LeaseGrantParams)
		wantOK bool
	}{
		{"MaxRelays relays", func(g *LeaseGrantParams) { g.Relays = relays(lease.MaxRelays) }, true},
		{"MaxRelays+1 relays", func(g *LeaseGrantParams) { g.Relays = relays(lease.MaxRelays + 1) }, false},
		{"MaxLeaseStandbys standbys", func(g *LeaseGrantParams) {
			g.Standbys, g.Replication = standbys(MaxLeaseStandbys), lease.ReplicationWarmStandby
		}, true},
		{"MaxLeaseStandbys+1 standbys", func(g *LeaseGrantParams) {
			g.Standbys, g.Replication = standbys(MaxLeaseStandbys+1), lease.ReplicationWarmStandby
		}, false},
		{"expires at 1970", func(g *LeaseGrantParams) { g.ExpiresAt = time.Unix(0, 0) }, false},
		{"expires before 1970", func(g *LeaseGrantParams) { g.ExpiresAt = time.Unix(-1, 0) }, false},
		{"expires at the end of 9999", func(g *LeaseGrantParams) { g.ExpiresAt = time.Unix(maxUnix, 0) }, true},
		{"expires after 9999", func(g *LeaseGrantParams) { g.ExpiresAt = time.Unix(maxUnix+1, 0) }, false},
	}
	for _, tt := range tests {
		g := testGrant(p, t0)
		tt.change(&g)
		ev, err := BuildLeaseGrant(issuer, g)
		if ok := err == nil; ok != tt.wantOK {
			t.Errorf("BuildLeaseGrant(%s) = %v, want ok = %v", tt.name, err, tt.wantOK)
			continue
		}
		if err != nil {
			continue
		}
		got, err := DecodeLeaseGrant(ev)
		if err != nil {
			t.Errorf("DecodeLeaseGrant(%s) = %v", tt.name, err)
			continue
		}
		if !g.ExpiresAt.IsZero() && !got.Spec.ExpiresAt.Equal(g.ExpiresAt) {
			t.Errorf("DecodeLeaseGrant(%s).ExpiresAt = %v, want %v", tt.name, got.Spec.ExpiresAt, g.ExpiresAt)
		}
	}

	// Decoding applies the same limits to what others publish.
	ev, err := BuildLeaseGrant(issuer, testGrant(p, t0))
	if err != nil {
		t.Fatal(err)
	}
	decoded := []struct {
		name   string
		change func(*nostr.Event)
		want   RejectReason
	}{
		{"expires_at end of 9999", setField("expires_at", maxUnix), ""},
		{"expires_at after 9999", setField("expires_at", maxUnix+1), ReasonDecode},
		{"MaxRelays relays", setField("relays", relays(lease.MaxRelays)), ""},
		{"no relays", setField("relays", []string{}), ReasonDecode},
		{"MaxRelays+1 relays", setField("relays", relays(lease.MaxRelays+1)), ReasonDecode},
	}
	for _, tt := range decoded {
		_, err := DecodeLeaseGrant(mutate(t, ev, issuer, tt.change))
		if got := ReasonOf(err); got != tt.want {
			t.Errorf("DecodeLeaseGrant(%s) = %v (reason %q), want reason %q", tt.name, err, got, tt.want)
		}
	}
}

// TestDecodeShardNumbers: a beat has 1 to lease.MaxShards events; shard 0
// is the Paygress-form heartbeat (its shard field absent or 0) and the
// continuations are shards 1 to shards-1, each under its own d tag.
func TestDecodeShardNumbers(t *testing.T) {
	p := testKeys(t, "p")
	held := make([]WorkloadEpoch, 40)
	for i := range held {
		held[i] = WorkloadEpoch{ID: fmt.Sprintf("workload-%03d", i), Epoch: 1}
	}
	b, err := BuildBeat(p, HeartbeatParams{At: t0, Workloads: held, MaxEventBytes: 1500})
	if err != nil {
		t.Fatal(err)
	}
	n := len(b.Stored)
	if n < 3 {
		t.Fatalf("BuildBeat(40 workloads, 1500 bytes) = %d events, want at least 3", n)
	}
	first, cont := b.Stored[0], b.Stored[1]
	ts := uint64(first.CreatedAt)
	renumber := func(i int) func(ev *nostr.Event) {
		return func(ev *nostr.Event) {
			setField("shard", i)(ev)
			setTag("d", ShardDTag(p.PublicKey(), ts, i))(ev)
		}
	}
	tests := []struct {
		name   string
		ev     *nostr.Event
		change func(*nostr.Event)
		want   RejectReason
	}{
		{"shard 0 shards 0", first, setField("shards", 0), ReasonDecode},
		{"shard 0 shards 1", first, setField("shards", 1), ""},
		{"shard 0 shards MaxShards", first, setField("shards", lease.MaxShards), ""},
		{"shard 0 shards MaxShards+1", first, setField("shards", lease.MaxShards+1), ReasonDecode},
		{"shard 0 with shard 0", first, setField("shard", 0), ""},
		{"shard 0 with shard 1", first, setField("shard", 1), ReasonDecode},
		{"continuation shard 0", cont, renumber(0), ReasonDecode},
		{"continuation shard 1", cont, renumber(1), ""},
		{"continuation last shard", cont, renumber(n - 1), ""},
		{"continuation shard = shards", cont, renumber(n), ReasonDecode},
	}
	for _, tt := range tests {
		h, err := DecodeHeartbeat(mutate(t, tt.ev, p, tt.change))
		if got := ReasonOf(err); got != tt.want {
			t.Errorf("DecodeHeartbeat(%s) = %v (reason %q), want reason %q", tt.name, err, got, tt.want)
			continue
		}
		if err == nil && tt.ev == cont && h.Shards != n {
			t.Errorf("DecodeHeartbeat(%s).Shards = %d, want %d", tt.name, h.Shards, n)
		}
	}
	// The refusal of a shard number out of range names the range.
	_, err = DecodeHeartbeat(mutate(t, cont, p, renumber(n)))
	var rej *RejectError
	if want := fmt.Sprintf("want 1 to %d", n-1); !errors.As(err, &rej) || !strings.Contains(rej.Detail, want) {
		t.Errorf("DecodeHeartbeat(shard %d of %d) = %v, want the detail to say %q", n, n, err, want)
	}
}

// TestShardDTagIsTheMinuteBucket: a continuation's d tag names the
// provider, the minute of the beat (the stored heartbeat's bucket) and the
// shard, so a relay keeps one event per shard per provider per minute.
func TestShardDTagIsTheMinuteBucket(t *testing.T) {
	const pk = "aa"
	tests := []struct {
		ts   uint64
		i    int
		want string
	}{
		{0, 1, "provider-agent:heartbeat:v1:aa:0:1"},
		{59, 2, "provider-agent:heartbeat:v1:aa:0:2"},
		{60, 1, "provider-agent:heartbeat:v1:aa:1:1"},
		{1_763_800_000, 7, "provider-agent:heartbeat:v1:aa:29396666:7"},
	}
	for _, tt := range tests {
		if got := ShardDTag(pk, tt.ts, tt.i); got != tt.want {
			t.Errorf("ShardDTag(%q, %d, %d) = %q, want %q", pk, tt.ts, tt.i, got, tt.want)
		}
		hb := HeartbeatDTag(pk, tt.ts)
		if bucket := hb[strings.LastIndex(hb, ":")+1:]; !strings.Contains(tt.want, ":"+bucket+":") {
			t.Errorf("ShardDTag(%d) = %q, not in the heartbeat's bucket %s", tt.ts, tt.want, bucket)
		}
	}
}

// TestWorkloadIDBytes: an id is printable ASCII without spaces, '!' (0x21)
// to '~' (0x7e), up to MaxWorkloadIDBytes.
func TestWorkloadIDBytes(t *testing.T) {
	tests := []struct {
		id     string
		wantOK bool
	}{
		{"!", true},
		{"~", true},
		{"a b", false},
		{"a\x7fb", false},
		{"a\x20", false},
		{strings.Repeat("x", MaxWorkloadIDBytes), true},
		{strings.Repeat("x", MaxWorkloadIDBytes+1), false},
	}
	for _, tt := range tests {
		if err := ValidateWorkloadID(tt.id); (err == nil) != tt.wantOK {
			t.Errorf("ValidateWorkloadID(%.20q) = %v, want ok = %v", tt.id, err, tt.wantOK)
		}
	}
}

// TestBuildBeatFillsEventsExactly: an event may be exactly MaxEventBytes
// (Sizes[i] == the limit), the first one and a continuation alike; a
// workload too large for any event, by its size or by its content, is
// refused; and so is one that fits only a continuation, which has less
// room to spare than the first event's Paygress fields leave: the first
// event never goes out empty ahead of the list.
func TestBuildBeatFillsEventsExactly(t *testing.T) {
	k := testKeys(t, "p")
	id := func(prefix string, n int) string { return prefix + strings.Repeat("x", n-len(prefix)) }
	a := WorkloadEpoch{ID: "a", Epoch: 1}
	long := WorkloadEpoch{ID: id("long-", 170), Epoch: 1}
	// ActiveWorkloads is fixed so every beat below has the same first-event
	// fields whatever its list.
	build := func(list []WorkloadEpoch, maxEvent, maxContent int) (Beat, error) {
		return BuildBeat(k, HeartbeatParams{At: t0, ActiveWorkloads: 1, Workloads: list, MaxEventBytes: maxEvent, MaxContentBytes: maxContent})
	}
	sizes := func(list []WorkloadEpoch, maxEvent int) []int {
		t.Helper()
		b, err := build(list, maxEvent, 0)
		if err != nil {
			t.Fatalf("BuildBeat(%d workloads, %d bytes) = %v", len(list), maxEvent, err)
		}
		return b.Sizes
	}

	one := sizes([]WorkloadEpoch{a, long}, 0)[0] // one event, as large as the list makes it
	// a fits the first event, long does not fit after it but fills a
	// continuation of 1,000 bytes: that continuation's size is exact.
	two := sizes([]WorkloadEpoch{a, long}, 1000)
	if len(two) != 2 {
		t.Fatalf("BuildBeat(a, long; 1000 bytes) = %d events, want 2", len(two))
	}
	tests := []struct {
		name       string
		list       []WorkloadEpoch
		maxEvent   int
		maxContent int
		wantEvents int // 0: refused
	}{
		{"first event exactly full", []WorkloadEpoch{a, long}, one, 0, 1},
		{"first event one byte short", []WorkloadEpoch{a, long}, one - 1, 0, 2},
		{"continuation exactly full", []WorkloadEpoch{a, long}, two[1], 0, 2},
		{"continuation one byte short", []WorkloadEpoch{a, long}, two[1] - 1, 0, 0},
		{"workload fits only a continuation", []WorkloadEpoch{a, long}, 1024, 0, 2},
		{"workload larger than any event", []WorkloadEpoch{a, long}, 950, 0, 0},
		{"first workload too large for the first event", []WorkloadEpoch{long, a}, two[1], 0, 0},
		{"workload content over MaxContentBytes", []WorkloadEpoch{a, long}, 1 << 20, 250, 0},
	}
	for _, tt := range tests {
		b, err := build(tt.list, tt.maxEvent, tt.maxContent)
		if tt.wantEvents == 0 {
			if err == nil {
				t.Errorf("BuildBeat(%s: %d bytes) = %d events %v, want an error", tt.name, tt.maxEvent, len(b.Stored), b.Sizes)
			}
			continue
		}
		if err != nil || len(b.Stored) != tt.wantEvents {
			t.Errorf("BuildBeat(%s: %d bytes) = %d events, %v, want %d", tt.name, tt.maxEvent, len(b.Stored), err, tt.wantEvents)
			continue
		}
		for i, ev := range b.Stored {
			if n := len(ev.String()); n > tt.maxEvent || b.Sizes[i] > tt.maxEvent {
				t.Errorf("BuildBeat(%s: %d bytes) event %d is %d bytes (sized %d), over the limit", tt.name, tt.maxEvent, i, n, b.Sizes[i])
			}
		}
	}
}

// TestBuildBeatMaxShards: a beat is at most lease.MaxShards events; a list
// that needs one more is refused.
func TestBuildBeatMaxShards(t *testing.T) {
	k := testKeys(t, "p")
	held := make([]WorkloadEpoch, lease.MaxShards+1)
	for i := range held {
		held[i] = WorkloadEpoch{ID: fmt.Sprintf("w%04d-%s", i, strings.Repeat("x", 180)), Epoch: 1}
	}
	p := HeartbeatParams{At: t0, ActiveWorkloads: 1, Workloads: held[:1]}
	one, err := BuildBeat(k, p)
	if err != nil {
		t.Fatal(err)
	}
	// Events of one workload each.
	p.MaxEventBytes = one.Sizes[0]
	p.Workloads = held[:lease.MaxShards]
	if b, err := BuildBeat(k, p); err != nil || len(b.Stored) != lease.MaxShards {
		t.Errorf("BuildBeat(MaxShards events' worth) = %d events, %v, want %d", len(b.Stored), err, lease.MaxShards)
	}
	p.Workloads = held
	if b, err := BuildBeat(k, p); err == nil {
		t.Errorf("BuildBeat(MaxShards+1 events' worth) = %d events, want an error", len(b.Stored))
	}
}
