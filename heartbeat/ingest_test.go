package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"provideragent/identity"
	"provideragent/lease"
)

func newTestIngestor(t testing.TB, cfg Config, pol SignerPolicy) (*Ingestor, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	in, err := NewIngestor(cfg, pol, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return in, reg
}

func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func TestIngestVerifiesOncePerID(t *testing.T) {
	p := testKeys(t, "p")
	in, reg := newTestIngestor(t, DefaultConfig(), newFakePolicy())
	ev, err := BuildHeartbeat(p, HeartbeatParams{At: t0, Workloads: []WorkloadEpoch{{ID: "a", Epoch: 1}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var first *Heartbeat
	for relay := 0; relay < 3; relay++ {
		delivered := copyEvent(ev) // each relay yields its own *nostr.Event
		res, err := in.Ingest(ctx, t0.Add(time.Second), &delivered)
		if err != nil {
			t.Fatalf("Ingest(delivery %d) = %v, want accepted", relay, err)
		}
		if res.Duplicate != (relay > 0) || res.Heartbeat == nil || res.Event != &delivered {
			t.Fatalf("Ingest(delivery %d) = %+v, want duplicate=%v with the heartbeat", relay, res, relay > 0)
		}
		if first == nil {
			first = res.Heartbeat
		} else if res.Heartbeat != first {
			t.Fatalf("duplicate delivery decoded again, want the cached value")
		}
	}
	if got := testutil.ToFloat64(in.m.sigChecks); got != 1 {
		t.Fatalf("signature checks = %v, want 1", got)
	}
	if got := counter(t, reg, "heartbeat_events_accepted_total", map[string]string{"kind": "heartbeat"}); got != 1 {
		t.Fatalf("accepted{heartbeat} = %v, want 1", got)
	}
	if got := counter(t, reg, "heartbeat_events_duplicate_total", map[string]string{"kind": "heartbeat"}); got != 2 {
		t.Fatalf("duplicate{heartbeat} = %v, want 2", got)
	}
}

func TestIngestConcurrentDeliveriesVerifyOnce(t *testing.T) {
	p := testKeys(t, "p")
	in, _ := newTestIngestor(t, DefaultConfig(), newFakePolicy())
	const events, relays = 20, 3
	evs := make([]*nostr.Event, events)
	for i := range evs {
		ev, err := BuildHeartbeat(p, HeartbeatParams{At: t0.Add(time.Duration(i) * time.Second)}, true)
		if err != nil {
			t.Fatal(err)
		}
		evs[i] = ev
	}
	var wg sync.WaitGroup
	errs := make(chan error, events*relays)
	for r := 0; r < relays; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, ev := range evs {
				c := copyEvent(ev)
				if _, err := in.Ingest(context.Background(), t0.Add(time.Minute), &c); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Ingest = %v, want accepted", err)
	}
	if got := testutil.ToFloat64(in.m.sigChecks); got != events {
		t.Fatalf("signature checks = %v, want %d (one per event)", got, events)
	}
}

func TestIngestForgeryDoesNotPoisonCache(t *testing.T) {
	p := testKeys(t, "p")
	in, reg := newTestIngestor(t, DefaultConfig(), newFakePolicy())
	real, err := BuildHeartbeat(p, HeartbeatParams{At: t0}, false)
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Second)
	ctx := context.Background()

	// Same id and content, garbage signature, delivered first.
	badSig := copyEvent(real)
	badSig.Sig = real.Sig[:126] + flipHex(real.Sig[126:])
	if _, err := in.Ingest(ctx, now, &badSig); ReasonOf(err) != ReasonBadSig {
		t.Fatalf("Ingest(bad sig) = %v, want bad_sig", err)
	}
	// The same forgery again is rejected from the cache, no second check.
	again := copyEvent(&badSig)
	if _, err := in.Ingest(ctx, now, &again); ReasonOf(err) != ReasonBadSig {
		t.Fatalf("Ingest(bad sig again) = %v, want bad_sig", err)
	}
	if got := testutil.ToFloat64(in.m.sigChecks); got != 1 {
		t.Fatalf("signature checks after two forgeries = %v, want 1", got)
	}
	// The real event is still accepted.
	if res, err := in.Ingest(ctx, now, real); err != nil || res.Duplicate {
		t.Fatalf("Ingest(real after forgery) = %+v, %v, want a fresh acceptance", res, err)
	}
	// A forgery with the real id and sig but other content is not a duplicate.
	forged := copyEvent(real)
	forged.Content = `{"provider_npub":"x"}`
	if _, err := in.Ingest(ctx, now, &forged); ReasonOf(err) != ReasonBadID {
		t.Fatalf("Ingest(forged content, real id) = %v, want bad_id", err)
	}
	forgedTags := copyEvent(real)
	forgedTags.Tags[0] = nostr.Tag{"t", "x"}
	if _, err := in.Ingest(ctx, now, &forgedTags); ReasonOf(err) != ReasonBadID {
		t.Fatalf("Ingest(forged tags, real id) = %v, want bad_id", err)
	}
	// And the real event stays a cheap duplicate.
	if res, err := in.Ingest(ctx, now, real); err != nil || !res.Duplicate {
		t.Fatalf("Ingest(real again) = %+v, %v, want duplicate", res, err)
	}
	if got := counter(t, reg, "heartbeat_events_rejected_total", map[string]string{"reason": "bad_id"}); got != 2 {
		t.Fatalf("rejected{bad_id} = %v, want 2", got)
	}
}

func flipHex(s string) string {
	b := []byte(s)
	for i := range b {
		if b[i] == '0' {
			b[i] = '1'
		} else {
			b[i] = '0'
		}
	}
	return string(b)
}

func TestIngestTimeWindow(t *testing.T) {
	p := testKeys(t, "p")
	cfg := DefaultConfig()
	cfg.MaxSkew = 10 * time.Second
	cfg.HeartbeatMaxAge = 60 * time.Second
	pol := newFakePolicy()
	pol.setWorkload("a", p.PublicKey())
	hb := func(at time.Time, ttl time.Duration) *nostr.Event {
		ev, err := BuildHeartbeat(p, HeartbeatParams{At: at, TTL: ttl}, false)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	rev, err := BuildRevocation(p, RevocationParams{WorkloadID: "a", At: t0.Add(-24 * time.Hour), Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		ev   *nostr.Event
		now  time.Time
		want RejectReason
	}{
		{"fresh", hb(t0, 0), t0, ""},
		{"skew within bound", hb(t0.Add(10*time.Second), 0), t0, ""},
		{"future", hb(t0.Add(11*time.Second), 0), t0, ReasonFuture},
		{"age at bound", hb(t0.Add(-60*time.Second), 0), t0, ""},
		{"stale", hb(t0.Add(-61*time.Second), 0), t0, ReasonStale},
		{"expired", hb(t0.Add(-30*time.Second), 30*time.Second), t0, ReasonExpired},
		{"not yet expired", hb(t0.Add(-29*time.Second), 30*time.Second), t0, ""},
		{"old revocation still counts", rev, t0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, _ := newTestIngestor(t, cfg, pol)
			_, err := in.Ingest(context.Background(), tt.now, tt.ev)
			if got := ReasonOf(err); got != tt.want {
				t.Fatalf("Ingest(%s) = %v, want reason %q", tt.name, err, tt.want)
			}
		})
	}

	// A duplicate delivered later is judged against the later time.
	in, _ := newTestIngestor(t, cfg, pol)
	ev := hb(t0, 0)
	if _, err := in.Ingest(context.Background(), t0, ev); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Ingest(context.Background(), t0.Add(61*time.Second), ev); ReasonOf(err) != ReasonStale {
		t.Fatalf("Ingest(replayed old heartbeat) = %v, want stale", err)
	}
}

func TestIngestSignerRules(t *testing.T) {
	p, s1, s2, issuer, stranger := testKeys(t, "p"), testKeys(t, "s1"), testKeys(t, "s2"), testKeys(t, "issuer"), testKeys(t, "stranger")
	pol := newFakePolicy()
	pol.setWorkload("a", p.PublicKey(), s1.PublicKey(), s2.PublicKey())
	pol.issuers[issuer.PublicKey()] = true

	revP, _ := BuildRevocation(p, RevocationParams{WorkloadID: "a", Standbys: []string{s1.PublicKey()}, At: t0, Epoch: 1})
	revS1, _ := BuildRevocation(s1, RevocationParams{WorkloadID: "a", Standbys: []string{s2.PublicKey()}, At: t0, Epoch: 1})
	revUnknown, _ := BuildRevocation(p, RevocationParams{WorkloadID: "zz", At: t0, Epoch: 1})
	promS1, _ := BuildPromotion(s1, PromotionParams{WorkloadID: "a", At: t0, Epoch: 2})
	promStranger, _ := BuildPromotion(stranger, PromotionParams{WorkloadID: "a", At: t0, Epoch: 9})
	lease := func(k *identity.Keys, exp time.Time) *nostr.Event {
		ev, err := BuildLeaseGrant(k, LeaseGrantParams{WorkloadID: "a", Primary: p.PublicKey(), Standbys: []string{s1.PublicKey()},
			Relays: []string{"wss://r1"}, Quorum: 1, Replication: lease.ReplicationWarmStandby, RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure},
			Command: []string{"run"}, ExpiresAt: exp, At: t0})
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	tests := []struct {
		name string
		ev   *nostr.Event
		now  time.Time
		want RejectReason
	}{
		{"revocation by primary", revP, t0, ""},
		{"revocation by standby", revS1, t0, ReasonWrongSigner},
		{"revocation unknown workload", revUnknown, t0, ReasonUnknownWorkload},
		{"promotion by member", promS1, t0, ""},
		{"promotion by stranger", promStranger, t0, ReasonWrongSigner},
		{"lease by issuer", lease(issuer, time.Time{}), t0, ""},
		{"lease by stranger", lease(stranger, time.Time{}), t0, ReasonWrongSigner},
		{"lease expired", lease(issuer, t0.Add(time.Minute)), t0.Add(time.Minute), ReasonExpired},
	}
	in, _ := newTestIngestor(t, DefaultConfig(), pol)
	for _, tt := range tests {
		for delivery := 0; delivery < 2; delivery++ { // the rule holds for duplicates too
			_, err := in.Ingest(context.Background(), tt.now, tt.ev)
			if got := ReasonOf(err); got != tt.want {
				t.Fatalf("Ingest(%s, delivery %d) = %v, want reason %q", tt.name, delivery, err, tt.want)
			}
		}
	}
	// After a handoff the old primary's revocation no longer passes, even
	// though its signature is cached as good.
	pol.setWorkload("a", s1.PublicKey(), s2.PublicKey())
	if _, err := in.Ingest(context.Background(), t0, revP); ReasonOf(err) != ReasonWrongSigner {
		t.Fatalf("Ingest(revocation by former primary) = %v, want wrong_signer", err)
	}
}

func TestIngestCheapRejections(t *testing.T) {
	p := testKeys(t, "p")
	cfg := DefaultConfig()
	in, reg := newTestIngestor(t, cfg, newFakePolicy())
	good, _ := BuildHeartbeat(p, HeartbeatParams{At: t0}, false)
	tests := []struct {
		name   string
		change func(*nostr.Event)
		want   RejectReason
	}{
		{"short id", func(ev *nostr.Event) { ev.ID = ev.ID[:10] }, ReasonMalformed},
		{"upper hex pubkey", func(ev *nostr.Event) { ev.PubKey = "A" + ev.PubKey[1:] }, ReasonMalformed},
		{"kind 1", func(ev *nostr.Event) { ev.Kind = 1 }, ReasonBadKind},
		{"big content", func(ev *nostr.Event) { ev.Content = string(make([]byte, cfg.MaxContentBytes+1)) }, ReasonTooLarge},
		{"many tags", func(ev *nostr.Event) {
			for len(ev.Tags) <= cfg.MaxTags {
				ev.Tags = append(ev.Tags, nostr.Tag{"x", "y"})
			}
		}, ReasonTooLarge},
		{"long tag", func(ev *nostr.Event) {
			ev.Tags = append(ev.Tags, nostr.Tag{"x", string(make([]byte, cfg.MaxTagBytes+1))})
		}, ReasonTooLarge},
		{"empty tag", func(ev *nostr.Event) { ev.Tags = append(ev.Tags, nostr.Tag{}) }, ReasonBadTags},
		{"changed content", func(ev *nostr.Event) { ev.Content += " " }, ReasonBadID},
		{"bad sig", func(ev *nostr.Event) { ev.Sig = flipHex(ev.Sig) }, ReasonBadSig},
	}
	for _, tt := range tests {
		ev := copyEvent(good)
		tt.change(&ev)
		_, err := in.Ingest(context.Background(), t0, &ev)
		if got := ReasonOf(err); got != tt.want {
			t.Errorf("Ingest(%s) = %v, want reason %q", tt.name, err, tt.want)
		}
		if !errors.Is(err, ErrRejected) {
			t.Errorf("Ingest(%s) error %v does not wrap ErrRejected", tt.name, err)
		}
	}
	if _, err := in.Ingest(context.Background(), t0, nil); ReasonOf(err) != ReasonMalformed {
		t.Errorf("Ingest(nil) = %v, want malformed", err)
	}
	if got := testutil.ToFloat64(in.m.sigChecks); got != 1 {
		t.Errorf("signature checks = %v, want 1 (only the bad-sig case gets that far)", got)
	}
	if got := counter(t, reg, "heartbeat_events_rejected_total", map[string]string{"reason": "too_large"}); got != 3 {
		t.Errorf("rejected{too_large} = %v, want 3", got)
	}
}

func TestIngestRaw(t *testing.T) {
	p := testKeys(t, "p")
	in, _ := newTestIngestor(t, DefaultConfig(), newFakePolicy())
	ev, _ := BuildHeartbeat(p, HeartbeatParams{At: t0}, true)
	raw, err := ev.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		raw  []byte
		want RejectReason
	}{
		{"event", raw, ""},
		{"again", raw, ""},
		{"garbage", []byte("not json"), ReasonMalformed},
		{"envelope", []byte(`["EVENT","sub",` + string(raw) + `]`), ReasonMalformed},
		{"empty object", []byte(`{}`), ReasonMalformed},
		{"too large", make([]byte, DefaultConfig().MaxEventBytes+1), ReasonTooLarge},
	}
	for _, tt := range tests {
		_, err := in.IngestRaw(context.Background(), t0, tt.raw)
		if got := ReasonOf(err); got != tt.want {
			t.Errorf("IngestRaw(%s) = %v, want reason %q", tt.name, err, tt.want)
		}
	}
}

func TestIngestCacheIsBounded(t *testing.T) {
	p := testKeys(t, "p")
	cfg := DefaultConfig()
	cfg.CacheSize = 16
	in, _ := newTestIngestor(t, cfg, newFakePolicy())
	var evs []*nostr.Event
	for i := 0; i < 40; i++ {
		ev, err := BuildHeartbeat(p, HeartbeatParams{At: t0.Add(time.Duration(-i) * time.Second)}, true)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
		if _, err := in.Ingest(context.Background(), t0, ev); err != nil {
			t.Fatal(err)
		}
		if n := in.CacheLen(); n > cfg.CacheSize {
			t.Fatalf("CacheLen() = %d after %d events, want <= %d", n, i+1, cfg.CacheSize)
		}
	}
	// The newest are still remembered; the oldest were forgotten and are
	// verified again (still accepted).
	if res, err := in.Ingest(context.Background(), t0, evs[39]); err != nil || !res.Duplicate {
		t.Fatalf("Ingest(recent) = %+v, %v, want duplicate", res, err)
	}
	if res, err := in.Ingest(context.Background(), t0, evs[0]); err != nil || res.Duplicate {
		t.Fatalf("Ingest(forgotten) = %+v, %v, want a fresh acceptance", res, err)
	}
}

func TestIngestWaiterHonoursContext(t *testing.T) {
	p := testKeys(t, "p")
	in, _ := newTestIngestor(t, DefaultConfig(), newFakePolicy())
	ev, _ := BuildHeartbeat(p, HeartbeatParams{At: t0}, true)
	// Plant a pending entry as if another goroutine were verifying ev.
	pending := &entry{state: statePending, done: make(chan struct{})}
	in.mu.Lock()
	in.inflight[ev.ID] = pending
	in.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := in.Ingest(ctx, t0, ev); ReasonOf(err) != ReasonCanceled {
		t.Fatalf("Ingest(canceled while waiting) = %v, want canceled", err)
	}
	// When the "leader" gives up without a verdict, the waiter verifies itself.
	go func() {
		in.mu.Lock()
		delete(in.inflight, ev.ID)
		close(pending.done)
		in.mu.Unlock()
	}()
	if res, err := in.Ingest(context.Background(), t0, ev); err != nil || res.Heartbeat == nil {
		t.Fatalf("Ingest(after leader gave up) = %+v, %v, want accepted", res, err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
	tests := []struct {
		name   string
		change func(*Config)
	}{
		{"MaxEventBytes", func(c *Config) { c.MaxEventBytes = 10 }},
		{"MaxContentBytes", func(c *Config) { c.MaxContentBytes = c.MaxEventBytes + 1 }},
		{"MaxTags", func(c *Config) { c.MaxTags = 1 }},
		{"MaxTagBytes", func(c *Config) { c.MaxTagBytes = 1 }},
		{"MaxSkew", func(c *Config) { c.MaxSkew = -1 }},
		{"HeartbeatMaxAge", func(c *Config) { c.HeartbeatMaxAge = 0 }},
		{"CacheSize", func(c *Config) { c.CacheSize = 0 }},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.change(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.name) {
			t.Errorf("Validate(bad %s) = %v, want an error naming it", tt.name, err)
		}
	}
	if _, err := NewIngestor(DefaultConfig(), nil, nil, nil); err == nil {
		t.Errorf("NewIngestor(nil policy) = nil error, want one")
	}
	reg := prometheus.NewRegistry()
	if _, err := NewIngestor(DefaultConfig(), newFakePolicy(), reg, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := NewIngestor(DefaultConfig(), newFakePolicy(), reg, nil); err == nil {
		t.Errorf("NewIngestor(same registry twice) = nil error, want a registration error")
	}
}

// TestIngestJunkDoesNotEvictVerified floods the ingestor with events that
// fail the id check or the signature; the verified event stays cached.
func TestIngestJunkDoesNotEvictVerified(t *testing.T) {
	p := testKeys(t, "p")
	cfg := DefaultConfig()
	cfg.CacheSize = 16
	in, _ := newTestIngestor(t, cfg, newFakePolicy())
	ctx := context.Background()
	good, _ := BuildHeartbeat(p, HeartbeatParams{At: t0}, true)
	if _, err := in.Ingest(ctx, t0, good); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		ev, _ := BuildHeartbeat(p, HeartbeatParams{At: t0.Add(-time.Duration(i+1) * time.Second)}, true)
		badID := copyEvent(ev)
		badID.ID = flipHex(badID.ID)
		if _, err := in.Ingest(ctx, t0, &badID); ReasonOf(err) != ReasonBadID {
			t.Fatalf("Ingest(bad id %d) = %v, want bad_id", i, err)
		}
		badSig := copyEvent(ev)
		badSig.Sig = flipHex(badSig.Sig)
		if _, err := in.Ingest(ctx, t0, &badSig); ReasonOf(err) != ReasonBadSig {
			t.Fatalf("Ingest(bad sig %d) = %v, want bad_sig", i, err)
		}
	}
	if res, err := in.Ingest(ctx, t0, good); err != nil || !res.Duplicate {
		t.Fatalf("Ingest(good after junk) = %+v, %v, want a duplicate", res, err)
	}
	if n := in.CacheLen(); n > cfg.CacheSize+max(cfg.CacheSize/4, 8) {
		t.Fatalf("CacheLen() = %d, want bounded", n)
	}
}

// TestIngestCacheAgesOut: an id the relays stopped delivering is forgotten
// after CacheTTL (the next delivery is verified again), while one delivered
// within the TTL stays a duplicate. Against a cache with no
// age-out, only a size cap, the late delivery would still be a duplicate.
func TestIngestCacheAgesOut(t *testing.T) {
	p := testKeys(t, "p")
	cfg := DefaultConfig()
	cfg.HeartbeatMaxAge = time.Hour // keep the heartbeat fresh for the test
	cfg.CacheTTL = 10 * time.Second
	in, _ := newTestIngestor(t, cfg, newFakePolicy())
	ctx := context.Background()
	ev, err := BuildHeartbeat(p, HeartbeatParams{At: t0}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Ingest(ctx, t0, ev); err != nil {
		t.Fatal(err)
	}
	c := copyEvent(ev)
	if res, err := in.Ingest(ctx, t0.Add(4*time.Second), &c); err != nil || !res.Duplicate {
		t.Fatalf("Ingest(+4s) = %+v, %v, want a duplicate", res, err)
	}
	// Other events keep the cache busy meanwhile.
	for i := 1; i <= 30; i++ {
		other, err := BuildHeartbeat(p, HeartbeatParams{At: t0.Add(time.Duration(i) * time.Second)}, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := in.Ingest(ctx, t0.Add(time.Duration(i)*time.Second), other); err != nil {
			t.Fatal(err)
		}
	}
	c2 := copyEvent(ev)
	res, err := in.Ingest(ctx, t0.Add(30*time.Second), &c2)
	if err != nil || res.Duplicate {
		t.Fatalf("Ingest(+30s, TTL 10s) = %+v, %v, want a fresh verification", res, err)
	}
	if n := in.CacheLen(); n > 20 {
		t.Fatalf("CacheLen() = %d after 30 s of one event a second with a 10 s TTL, want the last TTL's worth", n)
	}
}

// TestIngestKeepsIDsNotEvents: the cache holds no decoded heartbeat beyond
// RecentTTL and RecentWorkloads: a copy delivered after RecentTTL is decoded
// again (an equal, separate value; no signature check), and a heartbeat
// listing more workloads than RecentWorkloads is never kept decoded.
// Against a cache that kept decoded events with the id the
// late copy would return the cached pointer and RecentLen would not drop.
func TestIngestKeepsIDsNotEvents(t *testing.T) {
	p := testKeys(t, "p")
	cfg := DefaultConfig()
	cfg.RecentTTL = 2 * time.Second
	cfg.RecentWorkloads = 100
	in, _ := newTestIngestor(t, cfg, newFakePolicy())
	ctx := context.Background()
	list := func(n int) []WorkloadEpoch {
		out := make([]WorkloadEpoch, n)
		for i := range out {
			out[i] = WorkloadEpoch{ID: fmt.Sprintf("w-%04d", i), Epoch: 1}
		}
		return out
	}
	small, err := BuildHeartbeat(p, HeartbeatParams{At: t0, Workloads: list(10)}, false)
	if err != nil {
		t.Fatal(err)
	}
	first, err := in.Ingest(ctx, t0, small)
	if err != nil {
		t.Fatal(err)
	}
	c := copyEvent(small)
	soon, err := in.Ingest(ctx, t0.Add(time.Second), &c)
	if err != nil || !soon.Duplicate || soon.Heartbeat != first.Heartbeat {
		t.Fatalf("Ingest(copy within RecentTTL) = %+v, %v, want the decoded value kept for it", soon, err)
	}
	c2 := copyEvent(small)
	late, err := in.Ingest(ctx, t0.Add(5*time.Second), &c2)
	if err != nil || !late.Duplicate {
		t.Fatalf("Ingest(copy after RecentTTL) = %+v, %v, want a duplicate", late, err)
	}
	if late.Heartbeat == first.Heartbeat {
		t.Fatalf("copy after RecentTTL got the kept decoded value, want it decoded again")
	}
	if len(late.Heartbeat.Workloads) != 10 || late.Heartbeat.Workloads[9] != first.Heartbeat.Workloads[9] {
		t.Fatalf("copy decoded again = %+v, want the same list", late.Heartbeat.Workloads)
	}
	if n := in.RecentLen(); n != 0 {
		t.Fatalf("RecentLen() = %d after RecentTTL, want 0", n)
	}
	big, err := BuildHeartbeat(p, HeartbeatParams{At: t0.Add(6 * time.Second), Workloads: list(500)}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Ingest(ctx, t0.Add(6*time.Second), big); err != nil {
		t.Fatal(err)
	}
	if n := in.RecentLen(); n > cfg.RecentWorkloads {
		t.Fatalf("RecentLen() = %d, want at most RecentWorkloads %d", n, cfg.RecentWorkloads)
	}
	if got := testutil.ToFloat64(in.m.sigChecks); got != 2 {
		t.Fatalf("signature checks = %v, want 2 (one per distinct event)", got)
	}
}

// TestIngestSignerRulesBeforeSignature: events the signer rules refuse (a
// claim by a provider the lease does not name, a revocation by another key
// than the primary, a claim or revocation for a finished workload) are
// refused without a signature check: at volume (a mass failover, a public
// relay's traffic) those checks are the agent's largest cost. An ingest that
// verified first would pay a signature check for every one.
func TestIngestSignerRulesBeforeSignature(t *testing.T) {
	p, s, stranger := testKeys(t, "p"), testKeys(t, "s"), testKeys(t, "x")
	pol := newFakePolicy()
	pol.setWorkload("w1", p.PublicKey(), s.PublicKey())
	pol.setWorkload("w2", p.PublicKey(), s.PublicKey())
	pol.done["w2"] = true
	issuer, other := testKeys(t, "i"), testKeys(t, "o")
	pol.issuers[issuer.PublicKey()] = true
	pol.self = s.PublicKey()
	in, _ := newTestIngestor(t, DefaultConfig(), pol)
	ctx := context.Background()
	grant := func(primary string, standbys ...string) *nostr.Event {
		ev, err := BuildLeaseGrant(issuer, LeaseGrantParams{WorkloadID: "g", Primary: primary, Standbys: standbys,
			Relays: []string{"wss://r1"}, Quorum: 1, Replication: lease.ReplicationWarmStandby, RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure},
			Command: []string{"run"}, At: t0})
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	claim := func(k *identity.Keys, id string) *nostr.Event {
		ev, err := BuildPromotion(k, PromotionParams{WorkloadID: id, At: t0, Epoch: 2, Status: ClaimActive})
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	rev := func(k *identity.Keys, id string) *nostr.Event {
		ev, err := BuildRevocation(k, RevocationParams{WorkloadID: id, At: t0, Epoch: 1, Standbys: []string{s.PublicKey()}})
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	for _, tc := range []struct {
		name string
		ev   *nostr.Event
		want RejectReason
	}{
		{"claim by a stranger", claim(stranger, "w1"), ReasonWrongSigner},
		{"revocation by a standby", rev(s, "w1"), ReasonWrongSigner},
		{"claim for a finished workload", claim(s, "w2"), ReasonUnknownWorkload},
		{"revocation for a finished workload", rev(p, "w2"), ReasonUnknownWorkload},
		{"revocation for an unknown workload", rev(p, "w3"), ReasonUnknownWorkload},
		{"grant naming others only", grant(p.PublicKey(), other.PublicKey()), ReasonNotNamed},
	} {
		if _, err := in.Ingest(ctx, t0, tc.ev); ReasonOf(err) != tc.want {
			t.Errorf("Ingest(%s) = %v, want %s", tc.name, err, tc.want)
		}
	}
	if got := testutil.ToFloat64(in.m.sigChecks); got != 0 {
		t.Fatalf("signature checks = %v, want 0 (refused by the signer rules first)", got)
	}
	if _, err := in.Ingest(ctx, t0, claim(s, "w1")); err != nil {
		t.Fatalf("Ingest(member's claim) = %v, want accepted", err)
	}
	if got := testutil.ToFloat64(in.m.sigChecks); got != 1 {
		t.Fatalf("signature checks = %v, want 1", got)
	}
	for _, g := range []*nostr.Event{grant(s.PublicKey(), other.PublicKey()), grant(p.PublicKey(), other.PublicKey(), s.PublicKey())} {
		if _, err := in.Ingest(ctx, t0, g); err != nil {
			t.Fatalf("Ingest(grant naming this provider) = %v, want accepted", err)
		}
	}
}
