package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// Epoch is the wall-clock instant that simulated time zero maps to on a
// provider whose clock has no offset.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ProviderID indexes a provider (0 is the workload's first primary).
type ProviderID int

// RelayID indexes a relay of the workload's relay set.
type RelayID int

// EventID identifies an event (random, like a Nostr id, so ties between
// replaceable events with the same created_at break at random).
type EventID uint64

// QueryID identifies one read request (REQ ... EOSE) to one relay.
type QueryID uint64

// Kind is the kind of a simulated event.
type Kind int

const (
	// KindHeartbeat is a stored heartbeat; its D key is the minute bucket.
	KindHeartbeat Kind = iota + 1
	// KindRevocation is an addressable lease revocation.
	KindRevocation
	// KindClaim is an addressable promotion claim (active or withdrawn).
	KindClaim
	// KindCheckpoint is an addressable checkpoint record (kind 38387), one
	// per (author, workload, epoch) (CheckpointD): relays keep the newest.
	// No node subscribes to it: records are read by query when a new epoch
	// restores its state.
	KindCheckpoint
)

func (k Kind) String() string {
	switch k {
	case KindHeartbeat:
		return "heartbeat"
	case KindRevocation:
		return "revocation"
	case KindClaim:
		return "claim"
	case KindCheckpoint:
		return "checkpoint"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Event is an immutable simulated Nostr event. Body is protocol defined and
// must not be mutated after publishing (receivers share the pointer).
type Event struct {
	ID        EventID
	Kind      Kind
	Author    ProviderID
	CreatedAt int64 // unix seconds, on the author's clock
	D         string
	Body      any
	// SentAt is the simulated instant the event was first published (the
	// true clock, for probes; nodes never read it).
	SentAt time.Duration
	// Forged marks an event whose signature does not verify (a relay
	// serving garbage): nodes must reject it before it touches anything.
	Forged bool
	// Injected marks an event a relay serves that no provider of the world
	// made (InjectForged), signature valid or not: never evidence that an
	// epoch was held.
	Injected bool
	// AuthorHeldLive is, for a checkpoint record, whether its author's
	// node held the record's workload Live at the record's epoch at the
	// instant it published it (the world looked; nodes never read it).
	AuthorHeldLive bool
}

// Config sizes the simulated world and its healthy-network behaviour.
type Config struct {
	Providers int
	Relays    int
	// LegDelay bounds one network leg (provider to relay, or relay to
	// provider) on a healthy link; publish-to-delivery is at most 2*LegDelay.
	LegDelay time.Duration
	// PublishTimeout is how long a publisher waits for OK before counting the
	// relay as not having accepted.
	PublishTimeout time.Duration
	// QueryTimeout is how long a read waits for EOSE.
	QueryTimeout time.Duration
	// ReconnectDelay bounds the time to reconnect after a link becomes usable.
	ReconnectDelay time.Duration
	// TickInterval is the agent's tick cadence (per provider, phase shifted).
	TickInterval time.Duration
	// KeepHeartbeats is how many heartbeat buckets a relay keeps per author.
	KeepHeartbeats int
	// AgentDeathGrace is how long a workload keeps running after its agent
	// crashed (not its node): the backend's supervisor stops it then. A
	// negative value lets workloads outlive their agent until it restarts.
	AgentDeathGrace time.Duration
	// StopTime bounds how long a stop takes: each StopWorkload the node
	// performs completes after a random delay in [0, StopTime] (the
	// backend's SIGTERM, then SIGKILL after its stop grace), and until then
	// the workload counts as running. A start asked for meanwhile runs once
	// the stop completed, as the agent's actuator orders them. 0: stops are
	// instant.
	StopTime time.Duration
	// Seed drives every per-message random choice.
	Seed uint64
}

// DefaultConfig returns a 3-provider, 3-relay world with 2 s legs.
func DefaultConfig() Config {
	return Config{
		Providers:       3,
		Relays:          3,
		LegDelay:        2 * time.Second,
		PublishTimeout:  10 * time.Second,
		QueryTimeout:    10 * time.Second,
		ReconnectDelay:  5 * time.Second,
		TickInterval:    5 * time.Second,
		KeepHeartbeats:  8,
		AgentDeathGrace: 10 * time.Second,
		StopTime:        10 * time.Second,
	}
}

// Validate reports the first field with an unusable value.
func (c Config) Validate() error {
	switch {
	case c.Providers < 1 || c.Providers > 16:
		return fmt.Errorf("sim config: Providers = %d, want 1..16", c.Providers)
	case c.Relays < 1 || c.Relays > 16:
		return fmt.Errorf("sim config: Relays = %d, want 1..16", c.Relays)
	case c.LegDelay < 0:
		return fmt.Errorf("sim config: LegDelay = %v, want >= 0", c.LegDelay)
	case c.PublishTimeout <= 0:
		return fmt.Errorf("sim config: PublishTimeout = %v, want > 0", c.PublishTimeout)
	case c.QueryTimeout <= 0:
		return fmt.Errorf("sim config: QueryTimeout = %v, want > 0", c.QueryTimeout)
	case c.ReconnectDelay < 0:
		return fmt.Errorf("sim config: ReconnectDelay = %v, want >= 0", c.ReconnectDelay)
	case c.TickInterval <= 0:
		return fmt.Errorf("sim config: TickInterval = %v, want > 0", c.TickInterval)
	case c.KeepHeartbeats < 1:
		return fmt.Errorf("sim config: KeepHeartbeats = %d, want >= 1", c.KeepHeartbeats)
	case c.StopTime < 0:
		return fmt.Errorf("sim config: StopTime = %v, want >= 0", c.StopTime)
	}
	return nil
}

// Node is one provider's protocol logic (the agent around its machine). The
// simulator calls it only while the provider is up and not paused; every call
// gets the provider's local clock reading. Calls never nest.
type Node interface {
	// Boot starts the process: first start, or restart after Crash (the node
	// restores whatever it persisted).
	Boot(env Env, now time.Time)
	// Tick is the agent's periodic tick.
	Tick(env Env, now time.Time)
	// Receive delivers an event from a relay subscription.
	Receive(env Env, now time.Time, r RelayID, ev *Event)
	// Connected reports that a (re)connection to r is up and the node's
	// subscription went out on it: r's stored events and then EOSE follow.
	// A connection's end is never reported: the node learns of it only by
	// the next Connected (a silent network cut goes unnoticed until the
	// driver makes a new connection).
	Connected(env Env, now time.Time, r RelayID)
	// EOSE reports that a (re)subscription to r delivered all stored events.
	EOSE(env Env, now time.Time, r RelayID)
	// PublishResult reports whether r accepted event id (OK true) or not
	// (OK false, refused, or no answer within PublishTimeout).
	PublishResult(env Env, now time.Time, r RelayID, id EventID, ok bool)
	// QueryResult answers a Query: the stored matching events, or ok=false.
	QueryResult(env Env, now time.Time, r RelayID, q QueryID, evs []*Event, ok bool)
	// Timer fires a timer set with Env.At.
	Timer(env Env, now time.Time, tag any)
	// Exited reports that the workload process (started at epoch) exited.
	Exited(env Env, now time.Time, workload string, epoch uint64)
	// Crash drops all volatile state; only what the node persisted survives.
	Crash()
	// Live reports whether this node's machine holds workload w Live, and
	// at which epoch (called after every event: keep it allocation-free).
	Live(w string) (epoch uint64, ok bool)
	// Describe is a short state summary for timelines.
	Describe() string
	// Since is the node's subscription cursor (unix seconds on its clock):
	// a (re)subscription delivers stored events other than heartbeats only
	// from this created_at on (0: everything), as a REQ's since does.
	Since() int64
}

// Env is what a Node may do to the world. Effects happen at the current
// simulated instant; results come back later through Node callbacks.
type Env interface {
	Self() ProviderID
	NumRelays() int
	// Publish sends ev to the relays in to (all relays when to is nil). The
	// simulator sets ID and Author; the caller sets CreatedAt from its clock.
	Publish(ev Event, to []RelayID) EventID
	// Republish sends an event that already has an ID (from NewEventID, or
	// an earlier Publish) again, as a durable outbox does; nil to means all
	// relays.
	Republish(ev Event, to []RelayID)
	// NewEventID returns a fresh event ID.
	NewEventID() EventID
	// Query reads the stored events matching match from relay r.
	Query(r RelayID, match func(*Event) bool) QueryID
	// Start and Stop flip the provider's "workload running" flag.
	Start(workload string, epoch uint64)
	Stop(workload string)
	Running(workload string) (epoch uint64, ok bool)
	// At sets a timer for a local-clock instant.
	At(local time.Time, tag any)
	// Logf adds a line to the timeline.
	Logf(format string, args ...any)
	// Stall makes this provider's agent handle nothing for d, from right
	// after the current callback (its loop waits for the database):
	// deliveries, results and ticks wait, as in a pause.
	Stall(d time.Duration)
	// CrashAgent crashes this provider's agent (not its node) right after
	// the current callback and restarts it after d; its workload follows
	// it as CrashProvider says.
	CrashAgent(d time.Duration)
	// Report tells the world's report probes about a decision of the node
	// (for checkers; it changes nothing).
	Report(v any)
	// PutBlob stores a checkpoint's content on the blob servers, and
	// FetchBlob reads it back (blobs.go).
	PutBlob(id, workload string, epoch, value uint64) bool
	FetchBlob(id string) (value uint64, ok bool)
}

// Entry is one line of a timeline.
type Entry struct {
	At   time.Duration
	Who  string
	What string
}

// Violation is the first invariant failure, with the timeline up to it.
type Violation struct {
	At       time.Duration
	Msg      string
	Timeline []Entry
}

// Checker inspects the world after every event and returns an error when an
// invariant fails.
type Checker func(s *Sim) error

type item struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type itemHeap []*item

func (h itemHeap) Len() int { return len(h) }
func (h itemHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h itemHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *itemHeap) Push(x any)   { *h = append(*h, x.(*item)) }
func (h *itemHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	return it
}

type link struct {
	partitioned bool
	connected   bool
	connecting  bool
	gen         uint64
	lossPct     int
	dupPct      int
	reorder     bool
	extra       time.Duration // added to every leg on this link
	lastUp      time.Duration // FIFO horizon provider->relay
	lastDown    time.Duration // FIFO horizon relay->provider
}

type storeKey struct {
	kind   Kind
	author ProviderID
	d      string
	id     EventID // only for events without a D key
}

type relayState struct {
	up    bool
	store map[storeKey]*Event
	hbs   map[ProviderID]int // stored heartbeats per author
	// frozen holds what reached a frozen relay, in order: it keeps its
	// connections but handles nothing until it thaws (FreezeRelay).
	frozen   []func()
	isFrozen bool
}

// stopOp is a stop in progress: the process still runs until it completes;
// restart is the epoch of a start asked for meanwhile (0: none).
type stopOp struct {
	restart uint64
}

type provider struct {
	id          ProviderID
	node        Node
	name        string
	up          bool
	dead        bool
	incarnation uint64
	paused      bool
	inbox       []func()
	clock       Clock
	running     map[string]uint64
	stopping    map[string]*stopOp // stops in progress (Config.StopTime)
	tickPhase   time.Duration
	tickQueued  bool // a tick waits in inbox (ticks missed in a pause collapse into one)
}

// Sim is the simulated world. It is not safe for concurrent use.
type Sim struct {
	cfg       Config
	now       time.Duration
	seq       uint64
	q         itemHeap
	rng       *rand.Rand
	relays    []*relayState
	provs     []*provider
	links     [][]*link
	pathExtra map[[3]int]time.Duration
	nextQuery QueryID
	trace     []Entry
	checkers  []Checker
	violation *Violation
	steps     uint64
	starts    int
	maxEpoch  uint64

	deliveryProbes []DeliveryProbe
	reportProbes   []ReportProbe
	keep           *claimKeep // the storage assumption (KeepClaims), nil: none
	blobs          map[string]blob
	blobsDown      bool
}

// DeliveryProbe observes every event a relay hands to a provider's node
// (live fan-out, replays and subscription catch-up), at the instant the node
// receives it. Probes feed checkers; they must not change the world.
type DeliveryProbe func(to ProviderID, r RelayID, ev *Event)

// ReportProbe observes what a node reports through Env.Report.
type ReportProbe func(who ProviderID, v any)

// AddDeliveryProbe registers a delivery probe.
func (s *Sim) AddDeliveryProbe(p DeliveryProbe) { s.deliveryProbes = append(s.deliveryProbes, p) }

// AddReportProbe registers a report probe.
func (s *Sim) AddReportProbe(p ReportProbe) { s.reportProbes = append(s.reportProbes, p) }

// receive hands ev from relay r to provider pr's node, telling the probes.
func (s *Sim) receive(pr *provider, now time.Time, r RelayID, ev *Event) {
	for _, pb := range s.deliveryProbes {
		pb(pr.id, r, ev)
	}
	pr.node.Receive(envFor(s, pr), now, r, ev)
}

// New builds a world with the given nodes (len(nodes) == cfg.Providers) and
// clocks (nil means perfect clocks). Nothing runs until Boot and Run.
func New(cfg Config, nodes []Node, clocks []Clock) (*Sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(nodes) != cfg.Providers {
		return nil, fmt.Errorf("new sim: %d nodes for %d providers", len(nodes), cfg.Providers)
	}
	if clocks != nil && len(clocks) != cfg.Providers {
		return nil, fmt.Errorf("new sim: %d clocks for %d providers", len(clocks), cfg.Providers)
	}
	s := &Sim{
		cfg:       cfg,
		rng:       rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		pathExtra: map[[3]int]time.Duration{},
		blobs:     map[string]blob{},
	}
	for i := 0; i < cfg.Relays; i++ {
		s.relays = append(s.relays, &relayState{up: true, store: map[storeKey]*Event{}, hbs: map[ProviderID]int{}})
	}
	for i, n := range nodes {
		p := &provider{id: ProviderID(i), node: n, name: fmt.Sprintf("P%d", i), running: map[string]uint64{}, stopping: map[string]*stopOp{}}
		if clocks != nil {
			p.clock = clocks[i]
		}
		p.tickPhase = time.Duration(s.rng.Int64N(int64(cfg.TickInterval)))
		s.provs = append(s.provs, p)
		row := make([]*link, cfg.Relays)
		for r := range row {
			row[r] = &link{}
		}
		s.links = append(s.links, row)
	}
	return s, nil
}

// Config returns the world's configuration.
func (s *Sim) Config() Config { return s.cfg }

// Now is the current simulated instant.
func (s *Sim) Now() time.Duration { return s.now }

// Starts counts workload starts (a start of an already running copy at the
// same epoch is not counted); MaxEpoch is the highest epoch started.
func (s *Sim) Starts() (starts int, maxEpoch uint64) { return s.starts, s.maxEpoch }

// Steps is the number of events processed so far.
func (s *Sim) Steps() uint64 { return s.steps }

// AddChecker registers an invariant checked after every event.
func (s *Sim) AddChecker(c Checker) { s.checkers = append(s.checkers, c) }

// Violation returns the first invariant failure, or nil.
func (s *Sim) Violation() *Violation { return s.violation }

// Clock returns provider p's clock.
func (s *Sim) Clock(p ProviderID) Clock { return s.provs[p].clock }

// LocalNow is provider p's clock reading now.
func (s *Sim) LocalNow(p ProviderID) time.Time { return s.provs[p].clock.Local(s.now) }

// Node returns provider p's node.
func (s *Sim) Node(p ProviderID) Node { return s.provs[p].node }

// Up reports whether provider p's process is running (paused counts as up).
func (s *Sim) Up(p ProviderID) bool { return s.provs[p].up }

// Paused reports whether provider p is paused.
func (s *Sim) Paused(p ProviderID) bool { return s.provs[p].paused }

// Dead reports whether provider p crashed for good.
func (s *Sim) Dead(p ProviderID) bool { return s.provs[p].dead }

// RelayUp reports whether relay r is up.
func (s *Sim) RelayUp(r RelayID) bool { return s.relays[r].up }

// Partitioned reports whether the link between p and r is cut.
func (s *Sim) Partitioned(p ProviderID, r RelayID) bool { return s.links[p][r].partitioned }

// Running reports the epoch at which provider p runs workload w.
func (s *Sim) Running(p ProviderID, w string) (uint64, bool) {
	e, ok := s.provs[p].running[w]
	return e, ok
}

// Stored returns relay r's stored events, sorted by (kind, author, created_at, id).
func (s *Sim) Stored(r RelayID) []*Event {
	var out []*Event
	for _, ev := range s.relays[r].store {
		out = append(out, ev)
	}
	sortEvents(out)
	return out
}

func sortEvents(evs []*Event) {
	sort.Slice(evs, func(i, j int) bool {
		a, b := evs[i], evs[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Author != b.Author {
			return a.Author < b.Author
		}
		if a.CreatedAt != b.CreatedAt {
			return a.CreatedAt < b.CreatedAt
		}
		return a.ID < b.ID
	})
}

// Timeline returns the recorded timeline.
func (s *Sim) Timeline() []Entry { return s.trace }

// Logf adds a world-level line to the timeline.
func (s *Sim) Logf(format string, args ...any) {
	s.trace = append(s.trace, Entry{At: s.now, Who: "world", What: fmt.Sprintf(format, args...)})
}

// FormatTimeline renders entries one per line: "+612.0s P1 ...".
func FormatTimeline(entries []Entry) string {
	var b strings.Builder
	for _, e := range entries {
		fmt.Fprintf(&b, "%+9.1fs  %-5s %s\n", e.At.Seconds(), e.Who, e.What)
	}
	return b.String()
}

func (s *Sim) schedule(at time.Duration, fn func()) {
	if at < s.now {
		at = s.now
	}
	s.seq++
	heap.Push(&s.q, &item{at: at, seq: s.seq, fn: fn})
}

// RunFor processes events until d of simulated time has passed (or a
// violation is found, in which case it stops at once).
func (s *Sim) RunFor(d time.Duration) {
	s.RunUntil(s.now + d)
}

// RunUntil processes events up to and including simulated instant t.
func (s *Sim) RunUntil(t time.Duration) {
	s.RunWhile(t, func() bool { return true })
}

// RunWhile processes events until cond returns false or t is reached; it
// returns the instant at which cond became false (or -1).
func (s *Sim) RunWhile(t time.Duration, cond func() bool) time.Duration {
	if !cond() {
		return s.now
	}
	for s.violation == nil && len(s.q) > 0 && s.q[0].at <= t {
		it := heap.Pop(&s.q).(*item)
		s.now = it.at
		it.fn()
		s.steps++
		s.check()
		if !cond() {
			return s.now
		}
	}
	if s.violation == nil && t > s.now {
		s.now = t
	}
	return -1
}

func (s *Sim) check() {
	if s.violation != nil {
		return
	}
	s.noteLive()
	for _, c := range s.checkers {
		if err := c(s); err != nil {
			s.violate(err.Error())
			return
		}
	}
	// A driver that failed (a Track, Restore or snapshot error) would
	// otherwise sit silently down, and safety would hold trivially.
	for _, p := range s.provs {
		if n, ok := p.node.(interface{ Err() error }); ok {
			if err := n.Err(); err != nil {
				s.violate(fmt.Sprintf("driver error on %s: %v", p.name, err))
				return
			}
		}
	}
}

func (s *Sim) violate(msg string) {
	tl := append([]Entry(nil), s.trace...)
	s.violation = &Violation{At: s.now, Msg: msg, Timeline: tl}
}

// Boot starts every provider and connects every link.
func (s *Sim) Boot() {
	for _, p := range s.provs {
		s.bootProvider(p)
	}
	s.check()
}

func (s *Sim) bootProvider(p *provider) {
	p.up = true
	p.paused = false
	p.inbox = nil
	p.tickQueued = false
	p.incarnation++
	p.node.Boot(envFor(s, p), p.clock.Local(s.now))
	inc := p.incarnation
	// First tick at the provider's phase, then every TickInterval.
	next := s.now + p.tickPhase
	var tick func()
	tick = func() {
		if !p.up || p.incarnation != inc {
			return
		}
		s.schedule(s.now+s.cfg.TickInterval, tick)
		if p.paused {
			if p.tickQueued {
				return
			}
			p.tickQueued = true
		}
		s.deliver(p, inc, func(now time.Time) {
			p.tickQueued = false
			p.node.Tick(envFor(s, p), now)
		})
	}
	s.schedule(next, tick)
	for r := range s.relays {
		s.maybeConnect(p.id, RelayID(r))
	}
}
