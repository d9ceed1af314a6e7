package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
)

// TestIngestLimitsAreInclusive: an event at exactly MaxEventBytes (raw),
// MaxContentBytes, MaxTags or MaxTagBytes is accepted; one byte more is
// refused as too large (one tag more: TestIngestCheapRejections).
func TestIngestLimitsAreInclusive(t *testing.T) {
	p := testKeys(t, "p")
	list := make([]WorkloadEpoch, 20)
	for i := range list {
		list[i] = WorkloadEpoch{ID: fmt.Sprintf("workload-%02d", i), Epoch: 1}
	}
	base, err := BuildHeartbeat(p, HeartbeatParams{At: t0, Workloads: list}, true)
	if err != nil {
		t.Fatal(err)
	}
	// Eight tags, one of them an element of 128 bytes (the smallest
	// MaxTags and MaxTagBytes Validate allows).
	ev := mutate(t, base, p, func(ev *nostr.Event) {
		for len(ev.Tags) < 7 {
			ev.Tags = append(ev.Tags, nostr.Tag{"x", "y"})
		}
		ev.Tags = append(ev.Tags, nostr.Tag{"x", strings.Repeat("z", 128)})
	})
	raw, err := ev.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) < 1024 || len(ev.Content) < 256 || len(ev.Tags) != 8 {
		t.Fatalf("test event: %d bytes, content %d, %d tags; want at least 1024 and 256, and 8", len(raw), len(ev.Content), len(ev.Tags))
	}
	tests := []struct {
		name   string
		change func(*Config)
		want   RejectReason
	}{
		{"MaxEventBytes = its size", func(c *Config) { c.MaxEventBytes = len(raw) }, ""},
		{"MaxEventBytes one short", func(c *Config) { c.MaxEventBytes = len(raw) - 1 }, ReasonTooLarge},
		{"MaxContentBytes = its content", func(c *Config) { c.MaxContentBytes = len(ev.Content) }, ""},
		{"MaxContentBytes one short", func(c *Config) { c.MaxContentBytes = len(ev.Content) - 1 }, ReasonTooLarge},
		{"MaxTags = its tags", func(c *Config) { c.MaxTags = 8 }, ""},
		{"MaxTagBytes = its longest", func(c *Config) { c.MaxTagBytes = 128 }, ""},
	}
	for _, tt := range tests {
		cfg := DefaultConfig()
		tt.change(&cfg)
		cfg.MaxContentBytes = min(cfg.MaxContentBytes, cfg.MaxEventBytes)
		in, _ := newTestIngestor(t, cfg, newFakePolicy())
		_, err := in.IngestRaw(context.Background(), t0, raw)
		if got := ReasonOf(err); got != tt.want {
			t.Errorf("IngestRaw(%s) = %v, want reason %q", tt.name, err, tt.want)
		}
	}
}

// TestIngestParsedEventSize: an event delivered already parsed (as the
// relay connections deliver them) is refused as too large when its tags
// take it over MaxEventBytes, though no tag, the content and the tag count
// are within their own limits.
func TestIngestParsedEventSize(t *testing.T) {
	p := testKeys(t, "p")
	cfg := DefaultConfig()
	cfg.MaxEventBytes, cfg.MaxContentBytes, cfg.MaxTagBytes, cfg.MaxTags = 1024, 1024, 128, 16
	hb, err := BuildHeartbeat(p, HeartbeatParams{At: t0}, true)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tags int // extra tags of 100 bytes
		want RejectReason
	}{
		{1, ""},
		{8, ReasonTooLarge}, // 800 bytes of tags and the event's own fields
	}
	for _, tt := range tests {
		ev := mutate(t, hb, p, func(ev *nostr.Event) {
			for range tt.tags {
				ev.Tags = append(ev.Tags, nostr.Tag{"x", strings.Repeat("y", 100)})
			}
		})
		in, _ := newTestIngestor(t, cfg, newFakePolicy())
		if _, err := in.Ingest(context.Background(), t0, ev); ReasonOf(err) != tt.want {
			t.Errorf("Ingest(%d extra tags of 100 bytes, MaxEventBytes 1024) = %v, want reason %q", tt.tags, err, tt.want)
		}
	}
}

// TestIngestDefaultTimeWindow: with DefaultConfig an event may be up to 30 s
// ahead of the local clock and a heartbeat up to lease.DefaultConfig().Stale
// (180 s) old, and a rejection says by how much the event missed.
func TestIngestDefaultTimeWindow(t *testing.T) {
	p := testKeys(t, "p")
	in, _ := newTestIngestor(t, DefaultConfig(), newFakePolicy())
	tests := []struct {
		offset     time.Duration // created_at - now
		want       RejectReason
		wantDetail string
	}{
		{30 * time.Second, "", ""},
		{31 * time.Second, ReasonFuture, "is 31s ahead"},
		{-180 * time.Second, "", ""},
		{-181 * time.Second, ReasonStale, "is 181s old"},
	}
	for _, tt := range tests {
		ev, err := BuildHeartbeat(p, HeartbeatParams{At: t0.Add(tt.offset), TTL: time.Hour}, false)
		if err != nil {
			t.Fatal(err)
		}
		_, err = in.Ingest(context.Background(), t0, ev)
		if got := ReasonOf(err); got != tt.want {
			t.Errorf("Ingest(created %v from now) = %v, want reason %q", tt.offset, err, tt.want)
			continue
		}
		var rej *RejectError
		if errors.As(err, &rej) && !strings.Contains(rej.Detail, tt.wantDetail) {
			t.Errorf("Ingest(created %v from now) detail = %q, want it to say %q", tt.offset, rej.Detail, tt.wantDetail)
		}
	}
}

// TestIngestDefaultCacheTTL: with CacheTTL 0 an id is remembered for
// HeartbeatMaxAge + MaxSkew: another relay's copy of a revocation (which
// never goes stale) arriving HeartbeatMaxAge later is a duplicate, not
// verified again; one arriving after twice that is verified again.
func TestIngestDefaultCacheTTL(t *testing.T) {
	p, s1 := testKeys(t, "p"), testKeys(t, "s1")
	cfg := DefaultConfig()
	pol := newFakePolicy()
	pol.setWorkload("a", p.PublicKey(), s1.PublicKey())
	in, _ := newTestIngestor(t, cfg, pol)
	rev, err := BuildRevocation(p, RevocationParams{WorkloadID: "a", Standbys: []string{s1.PublicKey()}, At: t0, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tt := range []struct {
		at            time.Duration
		wantDuplicate bool
	}{
		{0, false},
		{cfg.HeartbeatMaxAge, true},
		{3 * (cfg.HeartbeatMaxAge + cfg.MaxSkew), false},
	} {
		c := copyEvent(rev)
		res, err := in.Ingest(ctx, t0.Add(tt.at), &c)
		if err != nil || res.Duplicate != tt.wantDuplicate {
			t.Errorf("Ingest(revocation copy at +%v) = duplicate %v, %v, want duplicate %v", tt.at, res.Duplicate, err, tt.wantDuplicate)
		}
	}
}

// TestIngestCacheLen: CacheLen counts every id remembered, verified or
// rejected, in both generations of the cache.
func TestIngestCacheLen(t *testing.T) {
	p := testKeys(t, "p")
	cfg := DefaultConfig()
	cfg.CacheSize = 16 // generations of 8 verified ids
	in, _ := newTestIngestor(t, cfg, newFakePolicy())
	ctx := context.Background()
	for i := range 12 {
		ev, err := BuildHeartbeat(p, HeartbeatParams{At: t0.Add(time.Duration(i) * time.Second)}, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := in.Ingest(ctx, t0, ev); err != nil {
			t.Fatal(err)
		}
	}
	if n := in.CacheLen(); n != 12 {
		t.Errorf("CacheLen() after 12 verified events (cache of 16) = %d, want 12", n)
	}
	for i := range 2 {
		ev, err := BuildHeartbeat(p, HeartbeatParams{At: t0.Add(time.Duration(-i-1) * time.Second)}, false)
		if err != nil {
			t.Fatal(err)
		}
		ev.Sig = flipHex(ev.Sig)
		if _, err := in.Ingest(ctx, t0, ev); ReasonOf(err) != ReasonBadSig {
			t.Fatalf("Ingest(bad sig) = %v, want bad_sig", err)
		}
	}
	if n := in.CacheLen(); n != 14 {
		t.Errorf("CacheLen() after 12 verified and 2 rejected events = %d, want 14", n)
	}
}

// TestIngestHoldsNothingForFinishedDeliveries: once a delivery is answered,
// accepted or refused (refusals the cache does not keep included: the
// signer rules depend on lease state), nothing of it stays in flight, so a
// stream of such events costs no memory beyond the bounded caches.
func TestIngestHoldsNothingForFinishedDeliveries(t *testing.T) {
	p, stranger := testKeys(t, "p"), testKeys(t, "stranger")
	pol := newFakePolicy()
	pol.setWorkload("a", p.PublicKey())
	in, _ := newTestIngestor(t, DefaultConfig(), pol)
	ctx := context.Background()
	for i := range 5 {
		good, err := BuildHeartbeat(p, HeartbeatParams{At: t0.Add(time.Duration(i) * time.Second)}, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := in.Ingest(ctx, t0, good); err != nil {
			t.Fatal(err)
		}
		// A revocation by a key that is not the primary: refused by the
		// signer rules, not cached.
		forged, err := BuildRevocation(stranger, RevocationParams{WorkloadID: "a", At: t0.Add(time.Duration(i) * time.Second), Epoch: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := in.Ingest(ctx, t0, forged); ReasonOf(err) != ReasonWrongSigner {
			t.Fatalf("Ingest(revocation by a stranger) = %v, want wrong_signer", err)
		}
	}
	in.mu.Lock()
	n := len(in.inflight)
	in.mu.Unlock()
	if n != 0 {
		t.Errorf("deliveries in flight after every one was answered = %d, want 0", n)
	}
}

// TestRecentDecodedBudget: the decoded heartbeats kept for other relays'
// copies cost one plus their listed workloads each, together at most the
// budget, the oldest evicted first; each is kept for ttl (a copy exactly
// ttl later still finds it), none when ttl is 0, and one larger than the
// whole budget is not kept. Keeping a newer decoding of the same id
// replaces the older one.
func TestRecentDecodedBudget(t *testing.T) {
	hb := func(n int) *Heartbeat { return &Heartbeat{Workloads: make([]WorkloadEpoch, n)} }
	type put struct {
		id string
		n  int // listed workloads
		at time.Duration
	}
	tests := []struct {
		name     string
		budget   int
		ttl      time.Duration
		puts     []put
		getAt    time.Duration
		wantKept []string
		wantUsed int
	}{
		{"two fit", 10, time.Second, []put{{"a", 3, 0}, {"b", 4, 0}}, 0, []string{"a", "b"}, 9},
		{"exactly the budget", 10, time.Second, []put{{"a", 4, 0}, {"b", 4, 0}}, 0, []string{"a", "b"}, 10},
		{"oldest evicted", 10, time.Second, []put{{"a", 3, 0}, {"b", 3, 0}, {"c", 3, 0}}, 0, []string{"b", "c"}, 8},
		{"one as large as the budget", 10, time.Second, []put{{"a", 9, 0}}, 0, []string{"a"}, 10},
		{"one larger than the budget", 10, time.Second, []put{{"a", 1, 0}, {"b", 10, 0}}, 0, []string{"a"}, 2},
		{"same id again", 10, time.Second, []put{{"a", 3, 0}, {"a", 3, 0}}, 0, []string{"a"}, 4},
		{"kept for exactly ttl", 10, time.Second, []put{{"a", 3, 0}}, time.Second, []string{"a"}, 4},
		{"gone after ttl", 10, time.Second, []put{{"a", 3, 0}}, time.Second + time.Nanosecond, nil, 0},
		{"ttl 0 keeps nothing", 10, 0, []put{{"a", 3, 0}}, 0, nil, 0},
	}
	for _, tt := range tests {
		r := recentDecoded{budget: tt.budget, ttl: tt.ttl, byID: map[string]*recentItem{}}
		kept := map[string]*Heartbeat{}
		for _, p := range tt.puts {
			h := hb(p.n)
			kept[p.id] = h
			r.put(p.id, 1, h, t0.Add(p.at))
		}
		var got []string
		for _, id := range []string{"a", "b", "c"} {
			h := r.get(id, 1, t0.Add(tt.getAt))
			if h == nil {
				continue
			}
			if h != kept[id] {
				t.Errorf("%s: get(%s) = an older decoding, want the last one kept", tt.name, id)
			}
			got = append(got, id)
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.wantKept) || r.used != tt.wantUsed {
			t.Errorf("%s: kept %v using %d, want %v using %d", tt.name, got, r.used, tt.wantKept, tt.wantUsed)
		}
	}
}

// TestDecodeNullFields: Paygress writes an absent Option as null; a null
// field anywhere in the content reads as absent (a null version is the
// default version 1) and the fields after it are still read.
func TestDecodeNullFields(t *testing.T) {
	p := testKeys(t, "p")
	hb, err := BuildHeartbeat(p, HeartbeatParams{At: t0, Workloads: []WorkloadEpoch{{ID: "a", Epoch: 3}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"version", "shard", "shards", "unknown"} {
		ev := mutate(t, hb, p, func(ev *nostr.Event) {
			// The field once (a second one would be a duplicate field).
			c := strings.Replace(ev.Content, `"`+field+`":1,`, "", 1)
			ev.Content = `{"` + field + `":null,` + c[1:]
		})
		h, err := DecodeHeartbeat(ev)
		if err != nil || h.Version != SchemaVersion || len(h.Workloads) != 1 || h.Workloads[0].Epoch != 3 {
			t.Errorf("DecodeHeartbeat(%s null first) = %+v, %v, want version 1 and the workload", field, h, err)
		}
	}
}

// TestRejectError: a rejection reads "event rejected: <reason>: <detail>",
// with its cause after it when there is one, and unwraps to ErrRejected and
// the cause.
func TestRejectError(t *testing.T) {
	tests := []struct {
		rej  *RejectError
		want string
	}{
		{&RejectError{Reason: ReasonStale, Detail: "too old"}, "event rejected: stale: too old"},
		{&RejectError{Reason: ReasonDecode, Detail: "content", Err: io.ErrUnexpectedEOF}, "event rejected: decode: content: unexpected EOF"},
	}
	for _, tt := range tests {
		if got := tt.rej.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		if !errors.Is(tt.rej, ErrRejected) {
			t.Errorf("errors.Is(%q, ErrRejected) = false, want true", tt.want)
		}
		if tt.rej.Err != nil && !errors.Is(tt.rej, tt.rej.Err) {
			t.Errorf("errors.Is(%q, its cause) = false, want true", tt.want)
		}
	}
}
