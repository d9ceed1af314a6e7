package heartbeat

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus"

	"provideragent/identity"
	"provideragent/internal/fifo"
	"provideragent/lease"
)

// Config bounds what the Ingestor accepts. Zero values are not defaults: start
// from DefaultConfig.
type Config struct {
	// MaxEventBytes bounds a raw event (IngestRaw) or the summed size of an
	// event's content and tags (Ingest). Default 65536.
	MaxEventBytes int
	// MaxContentBytes bounds the content. Default 16384.
	MaxContentBytes int
	// MaxTags bounds the number of tags. Default 64.
	MaxTags int
	// MaxTagBytes bounds each tag element. Default 1024.
	MaxTagBytes int
	// MaxSkew is how far created_at may lie ahead of local time. Default 30s.
	MaxSkew time.Duration
	// HeartbeatMaxAge is how old a heartbeat's created_at may be: set it to
	// the lease machine's Stale. Default lease.DefaultConfig().Stale (180s).
	HeartbeatMaxAge time.Duration
	// CacheSize bounds the dedupe cache (event ids remembered). An entry
	// keeps the id and a keyed fingerprint of the verified event, never the
	// event or its decoded form: about 200 bytes whatever the event's size.
	// Duplicates arrive within seconds and heartbeats older than
	// HeartbeatMaxAge are rejected before the cache, so it only needs to hold
	// the events of that window. Default 8192 (under 2 MB).
	CacheSize int
	// CacheTTL ages entries out: an id not delivered again for CacheTTL is
	// forgotten (a later delivery is verified again). 0 means
	// HeartbeatMaxAge + MaxSkew, after which a heartbeat is refused as stale
	// before the cache anyway.
	CacheTTL time.Duration
	// RecentWorkloads bounds the decoded heartbeats kept for the other
	// relays' copies of the same event, counted in listed workloads (a
	// decoded shard of 1,000 workloads counts 1,000), and RecentTTL how long
	// one is kept (the copies of one event arrive within the relays'
	// delay). A copy arriving later is decoded again (its signature is not
	// checked again). Defaults 65,536 (a few MB) and 10 s.
	RecentWorkloads int
	RecentTTL       time.Duration
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		MaxEventBytes:   64 << 10,
		MaxContentBytes: 16 << 10,
		MaxTags:         64,
		MaxTagBytes:     1024,
		MaxSkew:         30 * time.Second,
		HeartbeatMaxAge: lease.DefaultConfig().Stale,
		CacheSize:       8192,
		RecentWorkloads: 1 << 16,
		RecentTTL:       10 * time.Second,
	}
}

// Validate names the first bad field and its value.
func (c Config) Validate() error {
	switch {
	case c.MaxEventBytes < 1024:
		return fmt.Errorf("heartbeat config: MaxEventBytes %d below 1024", c.MaxEventBytes)
	case c.MaxContentBytes < 256 || c.MaxContentBytes > c.MaxEventBytes:
		return fmt.Errorf("heartbeat config: MaxContentBytes %d, want 256 to MaxEventBytes (%d)", c.MaxContentBytes, c.MaxEventBytes)
	case c.MaxTags < 8:
		return fmt.Errorf("heartbeat config: MaxTags %d below 8", c.MaxTags)
	case c.MaxTagBytes < 128:
		return fmt.Errorf("heartbeat config: MaxTagBytes %d below 128", c.MaxTagBytes)
	case c.MaxSkew < 0:
		return fmt.Errorf("heartbeat config: MaxSkew %v is negative", c.MaxSkew)
	case c.HeartbeatMaxAge < time.Second:
		return fmt.Errorf("heartbeat config: HeartbeatMaxAge %v below 1s", c.HeartbeatMaxAge)
	case c.CacheSize < 16:
		return fmt.Errorf("heartbeat config: CacheSize %d below 16", c.CacheSize)
	case c.CacheTTL != 0 && c.CacheTTL < time.Second:
		return fmt.Errorf("heartbeat config: CacheTTL %v, want 0 (default) or at least 1s", c.CacheTTL)
	case c.RecentWorkloads < 0:
		return fmt.Errorf("heartbeat config: RecentWorkloads %d is negative", c.RecentWorkloads)
	case c.RecentTTL < 0:
		return fmt.Errorf("heartbeat config: RecentTTL %v is negative", c.RecentTTL)
	}
	return nil
}

// SignerPolicy answers the signer rules that depend on lease state. The agent
// implements it over its lease table; it must be safe for concurrent use and
// cheap (it runs on every delivery, duplicates included).
type SignerPolicy interface {
	// CurrentPrimary returns the hex public key of the workload's current
	// primary, false when the workload is unknown. Revocations are accepted
	// only from it.
	CurrentPrimary(workloadID string) (pubkey string, ok bool)
	// IsMember reports whether pubkey is the primary or a standby of the
	// workload. Promotion claims and checkpoint records are accepted only
	// from members, so a stranger cannot fence a workload with a forged
	// higher epoch or offer it a state to restore.
	IsMember(workloadID, pubkey string) bool
	// AllowedIssuer reports whether pubkey may issue lease grants.
	AllowedIssuer(pubkey string) bool
}

// Ingested is an accepted event. Exactly one of the decoded pointers is set.
// The decoded values may be shared between deliveries of the same event:
// treat them as read-only.
type Ingested struct {
	// Event is the event as this delivery carried it.
	Event *nostr.Event
	// Duplicate is true when the same event was accepted before (another
	// relay delivered it first); its signature was not checked again.
	Duplicate bool
	// Heartbeat is set for kinds 38384, 20384 and 38389.
	Heartbeat *Heartbeat
	// Revocation is set for kind 38385.
	Revocation *Revocation
	// Promotion is set for kind 38386.
	Promotion *Promotion
	// LeaseGrant is set for kind 38388.
	LeaseGrant *LeaseGrant
	// Checkpoint is set for kind 38387.
	Checkpoint *CheckpointRecord
}

// Ingestor verifies and decodes incoming events: cheap checks first, the
// signature once per event however many relays deliver it, then decoding and
// the signer rules. It is safe for concurrent use.
//
// Its dedupe cache remembers verified event ids with a keyed fingerprint of
// the whole event, not the event: a copy from another relay is a duplicate
// only if every field matches what was verified, and is then decoded again
// without a signature check (or taken from a small, short-lived cache of
// decoded heartbeats, bounded in listed workloads). Ids age out after
// CacheTTL.
type Ingestor struct {
	cfg    Config
	policy SignerPolicy
	log    *slog.Logger
	m      *metrics
	seed   maphash.Seed

	mu       sync.Mutex
	good     *generations      // verified events
	bad      *generations      // rejections cacheable by (id, sig)
	inflight map[string]*entry // being verified now (bounded by concurrency)
	recent   recentDecoded     // decoded heartbeats for the other relays' copies
}

type entryState uint8

const (
	statePending entryState = iota
	stateGood
	stateBad
)

// entry is one dedupe cache slot, keyed by event id. A good entry holds a
// keyed fingerprint of the verified event (every field): a later delivery
// is a duplicate only if its fingerprint matches, so a forgery reusing a
// real id never rides on the real event's verification. A bad entry is only
// made after the id was recomputed, so (id, sig) determines the event and
// matching sig is enough.
type entry struct {
	state entryState
	done  chan struct{} // closed when a pending entry is settled
	fp    uint64        // good: fingerprint of the event; bad: of its sig
	rej   *RejectError  // bad: the cached rejection
}

// NewIngestor returns an Ingestor. reg may be nil (metrics are then not
// registered); logger may be nil (nothing is logged).
func NewIngestor(cfg Config, policy SignerPolicy, reg prometheus.Registerer, logger *slog.Logger) (*Ingestor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new ingestor: %w", err)
	}
	if policy == nil {
		return nil, fmt.Errorf("new ingestor: nil signer policy")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("new ingestor: %w", err)
	}
	ttl := cfg.CacheTTL
	if ttl == 0 {
		ttl = cfg.HeartbeatMaxAge + cfg.MaxSkew
	}
	ttlSec := max(int64(ttl/time.Second), 2)
	return &Ingestor{
		cfg: cfg, policy: policy, log: logger.With("component", "heartbeat"), m: m,
		seed:     maphash.MakeSeed(),
		good:     newGenerations(cfg.CacheSize, ttlSec),
		bad:      newGenerations(max(cfg.CacheSize/4, 8), ttlSec),
		inflight: map[string]*entry{},
		recent:   recentDecoded{budget: cfg.RecentWorkloads, ttl: cfg.RecentTTL, byID: map[string]*recentItem{}},
	}, nil
}

// IngestRaw parses raw as a Nostr event (the JSON object, not an envelope)
// and ingests it. It exists for fuzzing and for callers holding bytes.
func (in *Ingestor) IngestRaw(ctx context.Context, now time.Time, raw []byte) (Ingested, error) {
	if len(raw) > in.cfg.MaxEventBytes {
		return Ingested{}, in.rejected(nil, reject(ReasonTooLarge, "raw event is %d bytes, max %d", len(raw), in.cfg.MaxEventBytes))
	}
	var ev nostr.Event
	if err := ev.UnmarshalJSON(raw); err != nil {
		return Ingested{}, in.rejected(nil, rejectErr(ReasonMalformed, err, "raw event is not an event object"))
	}
	return in.Ingest(ctx, now, &ev)
}

// Ingest checks one delivery of ev against local time now. It returns the
// decoded event, or an error wrapping a *RejectError (see ReasonOf) saying why
// it was not accepted. It blocks only while another goroutine verifies the
// same event, and returns early with ReasonCanceled when ctx ends.
func (in *Ingestor) Ingest(ctx context.Context, now time.Time, ev *nostr.Event) (Ingested, error) {
	if ev == nil {
		return Ingested{}, in.rejected(nil, reject(ReasonMalformed, "nil event"))
	}
	if rej := in.cheapChecks(now, ev); rej != nil {
		return Ingested{}, in.rejected(ev, rej)
	}
	nowSec := now.Unix()
	var fp uint64
	fpDone := false
	fingerprint := func() uint64 {
		if !fpDone {
			fp, fpDone = in.fingerprint(ev), true
		}
		return fp
	}

	leader := false
	var e *entry
	for attempt := 0; attempt < 2 && !leader; attempt++ {
		in.mu.Lock()
		e = in.lookup(ev.ID, nowSec)
		switch {
		case e == nil:
			e = &entry{state: statePending, done: make(chan struct{})}
			in.inflight[ev.ID] = e
			leader = true
			in.mu.Unlock()
		case e.state == stateGood:
			want := e.fp
			in.mu.Unlock()
			if fingerprint() != want {
				// Same id, different event (a forgery or another signature):
				// verify it on its own without touching the cached entry.
				e, attempt = nil, 2
				continue
			}
			return in.duplicate(now, ev, want)
		case e.state == stateBad && e.fp == in.hashString(ev.Sig):
			rej := e.rej
			in.mu.Unlock()
			return Ingested{}, in.rejected(ev, rej)
		case e.state == statePending:
			done := e.done
			in.mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
				return Ingested{}, in.rejected(ev, rejectErr(ReasonCanceled, ctx.Err(), "waiting for a concurrent verification"))
			}
			e = nil
		default:
			// A cached rejection with another signature: verify on its own.
			in.mu.Unlock()
			e = nil
			attempt = 2
		}
	}

	res, rej, cacheable := in.verifyAndDecode(ev)
	var settled *entry
	switch {
	case rej == nil:
		settled = &entry{state: stateGood, fp: fingerprint()}
	case cacheable:
		settled = &entry{state: stateBad, fp: in.hashString(ev.Sig), rej: rej}
	}
	in.mu.Lock()
	if leader && in.inflight[ev.ID] == e {
		delete(in.inflight, ev.ID)
	}
	id := strings.Clone(ev.ID) // never retain the delivery's buffers
	switch {
	case settled == nil:
	case settled.state == stateGood:
		in.bad.remove(id)
		in.good.insert(id, settled, nowSec) // replaces a good entry with another signature
		if res.Heartbeat != nil {
			in.recent.put(id, settled.fp, res.Heartbeat, now)
		}
	case in.good.lookup(id, nowSec) == nil:
		in.bad.insert(id, settled, nowSec) // never shadows a verified event
	}
	in.mu.Unlock()
	if leader {
		close(e.done)
	}
	if rej != nil {
		return Ingested{}, in.rejected(ev, rej)
	}
	res.Event = ev
	return in.finish(now, res)
}

// duplicate accepts a delivery of an event verified before (its fingerprint
// matched): decoded again, or taken from the recent decoded heartbeats.
func (in *Ingestor) duplicate(now time.Time, ev *nostr.Event, fp uint64) (Ingested, error) {
	var res Ingested
	if IsHeartbeatKind(ev.Kind) {
		in.mu.Lock()
		res.Heartbeat = in.recent.get(ev.ID, fp, now)
		in.mu.Unlock()
	}
	if res.Heartbeat == nil {
		var rej *RejectError
		if res, rej = decodeKind(ev); rej != nil {
			// The verified event decoded before: unreachable unless the
			// fingerprint collided.
			return Ingested{}, in.rejected(ev, rej)
		}
	}
	res.Event, res.Duplicate = ev, true
	return in.finish(now, res)
}

// fingerprint is a keyed 64-bit hash of every field of ev. The seed is
// random per Ingestor, so nobody can build another event with the same
// fingerprint on purpose.
func (in *Ingestor) fingerprint(ev *nostr.Event) uint64 {
	var h maphash.Hash
	h.SetSeed(in.seed)
	var num [8]byte
	put := func(s string) {
		binary.LittleEndian.PutUint64(num[:], uint64(len(s)))
		_, _ = h.Write(num[:])
		_, _ = h.WriteString(s)
	}
	put(ev.ID)
	put(ev.PubKey)
	put(ev.Sig)
	binary.LittleEndian.PutUint64(num[:], uint64(ev.CreatedAt))
	_, _ = h.Write(num[:])
	binary.LittleEndian.PutUint64(num[:], uint64(ev.Kind))
	_, _ = h.Write(num[:])
	binary.LittleEndian.PutUint64(num[:], uint64(len(ev.Tags)))
	_, _ = h.Write(num[:])
	for _, t := range ev.Tags {
		binary.LittleEndian.PutUint64(num[:], uint64(len(t)))
		_, _ = h.Write(num[:])
		for _, v := range t {
			put(v)
		}
	}
	put(ev.Content)
	return h.Sum64()
}

func (in *Ingestor) hashString(s string) uint64 { return maphash.String(in.seed, s) }

// cheapChecks runs the checks that need no hashing: shapes, kind, sizes and
// the time window (which depends on now, so it runs on every delivery).
func (in *Ingestor) cheapChecks(now time.Time, ev *nostr.Event) *RejectError {
	if len(ev.ID) != 64 || len(ev.PubKey) != 64 || len(ev.Sig) != 128 {
		return reject(ReasonMalformed, "id, pubkey or sig has the wrong length")
	}
	switch ev.Kind {
	case KindHeartbeat, KindHeartbeatEphemeral, KindHeartbeatShard, KindRevocation, KindPromotion, KindLeaseGrant, KindCheckpoint:
	default:
		return reject(ReasonBadKind, "kind %d is not a protocol kind", ev.Kind)
	}
	if len(ev.Content) > in.cfg.MaxContentBytes {
		return reject(ReasonTooLarge, "content is %d bytes, max %d", len(ev.Content), in.cfg.MaxContentBytes)
	}
	if ev.Kind == KindCheckpoint && len(ev.Content) > MaxCheckpointContentBytes {
		return reject(ReasonTooLarge, "checkpoint content is %d bytes, max %d", len(ev.Content), MaxCheckpointContentBytes)
	}
	if len(ev.Tags) > in.cfg.MaxTags {
		return reject(ReasonTooLarge, "%d tags, max %d", len(ev.Tags), in.cfg.MaxTags)
	}
	nowUnix := now.Unix()
	created := int64(ev.CreatedAt)
	if created > nowUnix+int64(in.cfg.MaxSkew/time.Second) {
		return reject(ReasonFuture, "created_at %d is %ds ahead of local time", created, created-nowUnix)
	}
	if IsHeartbeatKind(ev.Kind) {
		if created < nowUnix-int64(in.cfg.HeartbeatMaxAge/time.Second) {
			return reject(ReasonStale, "heartbeat created_at %d is %ds old", created, nowUnix-created)
		}
	}
	exp, ok, rej := expiration(ev.Tags)
	if rej != nil {
		return rej
	}
	if ok && nowUnix >= exp {
		return reject(ReasonExpired, "NIP-40 expiration %d has passed", exp)
	}
	return nil
}

// verifyAndDecode is the full path for an event not seen before. cacheable
// says whether a rejection is a property of the event itself (given a correct
// id), so it may be remembered by (id, sig).
func (in *Ingestor) verifyAndDecode(ev *nostr.Event) (res Ingested, rej *RejectError, cacheable bool) {
	size := len(ev.Content) + 200
	for _, t := range ev.Tags {
		if len(t) == 0 {
			return res, reject(ReasonBadTags, "empty tag"), false
		}
		for _, s := range t {
			if len(s) > in.cfg.MaxTagBytes {
				return res, reject(ReasonTooLarge, "tag element of %d bytes, max %d", len(s), in.cfg.MaxTagBytes), false
			}
			size += len(s) + 4
		}
	}
	if size > in.cfg.MaxEventBytes {
		return res, reject(ReasonTooLarge, "event is about %d bytes, max %d", size, in.cfg.MaxEventBytes), false
	}
	if !identity.IsLowerHex(ev.PubKey) || !identity.IsLowerHex(ev.Sig) {
		return res, reject(ReasonMalformed, "pubkey or sig is not lowercase hex"), false
	}
	if !ev.CheckID() {
		return res, reject(ReasonBadID, "id is not the hash of the event"), false
	}
	// Decoding and the signer rules cost far less than a signature check,
	// and refuse whatever the signature: an event they refuse (another
	// provider's claim, a revocation for a workload not tracked or
	// finished here) is never verified. The decoders take any input (they
	// are fuzzed).
	res, rej = decodeKind(ev)
	if rej != nil {
		return Ingested{}, rej, true
	}
	if rej := in.signerRules(res); rej != nil {
		return Ingested{}, rej, false
	}
	in.m.sigChecks.Inc()
	ok, err := ev.CheckSignature()
	if err != nil {
		return Ingested{}, rejectErr(ReasonBadSig, err, "signature check failed"), true
	}
	if !ok {
		return Ingested{}, reject(ReasonBadSig, "signature does not verify"), true
	}
	return res, nil, false
}

// Tracker is optionally implemented by a SignerPolicy: Tracks reports
// whether revocations and promotion claims for the workload still matter
// (it is tracked and not finished). Those that do not are refused
// (unknown_workload) before any signature check.
type Tracker interface {
	Tracks(workloadID string) bool
}

// Addressee is optionally implemented by a SignerPolicy: Named reports
// whether a lease grant's spec names this provider (lease.Spec.Names). Grants that do not are refused (not_named) before any
// signature check: @nostr-relay/core matches live events on ids, authors,
// kinds and times only, so it sends every grant of a trusted issuer to
// every provider that subscribes to its own (a fleet's 10,000 grants to
// each of its providers).
type Addressee interface {
	Named(spec lease.Spec) bool
}

// signerRules applies the signer rules that depend on lease state (before
// the signature check, and again on every delivery in finish).
func (in *Ingestor) signerRules(res Ingested) *RejectError {
	tracks := func(id string) bool {
		t, ok := in.policy.(Tracker)
		return !ok || t.Tracks(id)
	}
	switch {
	case res.Revocation != nil:
		r := res.Revocation
		primary, ok := in.policy.CurrentPrimary(r.WorkloadID)
		if !ok || !tracks(r.WorkloadID) {
			return reject(ReasonUnknownWorkload, "revocation for unknown or finished workload %.64q", r.WorkloadID)
		}
		if primary != r.Signer {
			return reject(ReasonWrongSigner, "revocation of %.64q not signed by its current primary", r.WorkloadID)
		}
	case res.Promotion != nil:
		p := res.Promotion
		if !in.policy.IsMember(p.WorkloadID, p.Signer) {
			return reject(ReasonWrongSigner, "promotion of %.64q signed by a non-member", p.WorkloadID)
		}
		if !tracks(p.WorkloadID) {
			return reject(ReasonUnknownWorkload, "promotion of finished workload %.64q", p.WorkloadID)
		}
	case res.LeaseGrant != nil:
		g := res.LeaseGrant
		if !in.policy.AllowedIssuer(g.Issuer) {
			return reject(ReasonWrongSigner, "lease grant from an issuer that is not allowed")
		}
		if a, ok := in.policy.(Addressee); ok && !a.Named(g.Spec) {
			return reject(ReasonNotNamed, "lease grant of %.64q names this provider neither as primary nor as standby", g.Spec.ID)
		}
	case res.Checkpoint != nil:
		c := res.Checkpoint
		if !in.policy.IsMember(c.WorkloadID, c.Signer) {
			return reject(ReasonWrongSigner, "checkpoint record of %.64q (epoch %d) signed by a non-member %.64s", c.WorkloadID, c.Epoch, c.Signer)
		}
		if !tracks(c.WorkloadID) {
			return reject(ReasonUnknownWorkload, "checkpoint record of finished workload %.64q", c.WorkloadID)
		}
	}
	return nil
}

// decodeKind decodes a verified event of a protocol kind.
func decodeKind(ev *nostr.Event) (res Ingested, rej *RejectError) {
	var derr error
	switch ev.Kind {
	case KindHeartbeat, KindHeartbeatEphemeral, KindHeartbeatShard:
		res.Heartbeat, derr = DecodeHeartbeat(ev)
	case KindRevocation:
		res.Revocation, derr = DecodeRevocation(ev)
	case KindPromotion:
		res.Promotion, derr = DecodePromotion(ev)
	case KindLeaseGrant:
		res.LeaseGrant, derr = DecodeLeaseGrant(ev)
	case KindCheckpoint:
		res.Checkpoint, derr = DecodeCheckpointRecord(ev)
	}
	if derr != nil {
		if re, ok := derr.(*RejectError); ok {
			return Ingested{}, re
		}
		return Ingested{}, rejectErr(ReasonDecode, derr, "decode")
	}
	return res, nil
}

// finish runs the checks that depend on now or on lease state (every
// delivery) and counts the acceptance.
func (in *Ingestor) finish(now time.Time, res Ingested) (Ingested, error) {
	if rej := in.signerRules(res); rej != nil {
		return Ingested{}, in.rejected(res.Event, rej)
	}
	if g := res.LeaseGrant; g != nil {
		if exp := g.Spec.ExpiresAt; !exp.IsZero() && !now.Before(exp) {
			return Ingested{}, in.rejected(res.Event, reject(ReasonExpired, "lease of %.64q expired at %d", g.Spec.ID, exp.Unix()))
		}
	}
	if res.Duplicate {
		in.m.duplicate[kindIndex(res.Event.Kind)].Inc()
	} else {
		in.m.accepted[kindIndex(res.Event.Kind)].Inc()
	}
	return res, nil
}

func (in *Ingestor) rejected(ev *nostr.Event, rej *RejectError) error {
	in.m.rejected[rej.Reason].Inc()
	if in.log.Enabled(context.Background(), slog.LevelDebug) {
		id, kind := "", 0
		if ev != nil {
			id, kind = ev.ID, ev.Kind
		}
		in.log.Debug("event rejected", "reason", string(rej.Reason), "id", fmt.Sprintf("%.64s", id), "kind", kind, "detail", rej.Detail)
	}
	return rej
}

// lookup finds id among verified events, cached rejections and events
// being verified (caller holds mu).
func (in *Ingestor) lookup(id string, now int64) *entry {
	if e := in.good.lookup(id, now); e != nil {
		return e
	}
	if e := in.bad.lookup(id, now); e != nil {
		return e
	}
	return in.inflight[id]
}

// CacheLen returns the number of event ids remembered, verified and rejected
// (for tests and status).
func (in *Ingestor) CacheLen() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.good.len() + in.bad.len()
}

// RecentLen returns the number of workloads listed by the decoded
// heartbeats kept for other relays' copies (for tests).
func (in *Ingestor) RecentLen() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.recent.used
}

// generations is a bounded map of two generations: inserts go to the current
// one, which becomes the old one when full or when it is ttl/2 old (the
// previous old one is dropped), and a hit in the old one moves to the
// current one. At most capacity ids are kept, an id not seen again for ttl
// is forgotten, recently used ones survive, and nothing is ever scanned.
type generations struct {
	cur, old map[string]*entry
	half     int
	curStart int64 // unix seconds the current generation began
	rotate   int64 // seconds after which the current generation turns old
}

func newGenerations(capacity int, ttl int64) *generations {
	half := max(capacity/2, 1)
	return &generations{cur: make(map[string]*entry, half), old: map[string]*entry{}, half: half, rotate: max(ttl/2, 1)}
}

// age turns the current generation old once it is rotate seconds old, and
// drops both once they are older than twice that (nothing was inserted).
func (g *generations) age(now int64) {
	switch {
	case g.curStart == 0:
		g.curStart = now
	case now-g.curStart >= 2*g.rotate:
		// Nothing in either generation is young enough to keep.
		clear(g.old)
		clear(g.cur)
		g.curStart = now
	case now-g.curStart >= g.rotate:
		g.old, g.cur = g.cur, make(map[string]*entry, min(len(g.cur), g.half))
		g.curStart = now
	}
}

func (g *generations) lookup(id string, now int64) *entry {
	g.age(now)
	if e, ok := g.cur[id]; ok {
		return e
	}
	if e, ok := g.old[id]; ok {
		delete(g.old, id)
		g.insert(id, e, now)
		return e
	}
	return nil
}

func (g *generations) insert(id string, e *entry, now int64) {
	g.age(now)
	if _, ok := g.cur[id]; !ok && len(g.cur) >= g.half {
		g.old = g.cur
		g.cur = make(map[string]*entry, g.half)
		g.curStart = now
	}
	delete(g.old, id)
	g.cur[id] = e
}

func (g *generations) remove(id string) {
	delete(g.cur, id)
	delete(g.old, id)
}

func (g *generations) len() int { return len(g.cur) + len(g.old) }

// recentDecoded keeps decoded heartbeats for a short time so that the
// other relays' copies of an event are not decoded again: at most budget
// listed workloads in all and ttl each, evicted oldest first.
type recentDecoded struct {
	budget int
	ttl    time.Duration
	used   int
	byID   map[string]*recentItem
	fifo   fifo.Queue[*recentItem]
}

type recentItem struct {
	id   string
	fp   uint64
	hb   *Heartbeat
	at   time.Time
	cost int
}

func (r *recentDecoded) put(id string, fp uint64, hb *Heartbeat, now time.Time) {
	cost := len(hb.Workloads) + 1
	if r.ttl <= 0 || cost > r.budget {
		return
	}
	r.expire(now)
	for r.used+cost > r.budget && r.fifo.Len() > 0 {
		r.drop()
	}
	it := &recentItem{id: id, fp: fp, hb: hb, at: now, cost: cost}
	if old := r.byID[id]; old != nil {
		r.used -= old.cost
		old.cost = 0
		old.hb = nil
	}
	r.byID[id] = it
	r.fifo.Push(it)
	r.used += cost
}

func (r *recentDecoded) get(id string, fp uint64, now time.Time) *Heartbeat {
	r.expire(now)
	if it := r.byID[id]; it != nil && it.fp == fp {
		return it.hb
	}
	return nil
}

func (r *recentDecoded) expire(now time.Time) {
	for it, ok := r.fifo.Front(); ok && now.Sub(it.at) > r.ttl; it, ok = r.fifo.Front() {
		r.drop()
	}
}

// drop evicts the oldest item.
func (r *recentDecoded) drop() {
	it, _ := r.fifo.Pop()
	if cur := r.byID[it.id]; cur == it {
		delete(r.byID, it.id)
	}
	r.used -= it.cost
}
