package driver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"provideragent/lease"
)

// ErrUnpersisted means machine steps are held because their commit failed:
// their stops were performed, their starts, claims and revocations wait
// until a commit succeeds.
var ErrUnpersisted = errors.New("driver: machine steps not persisted yet")

// Token identifies one input whose step must be persisted before the
// caller may consider it done (the agent's subscription cursor token).
type Token uint64

// Config tunes the driver's commits. The zero value of a field means its
// default.
type Config struct {
	// CommitWait bounds how long a commit waits for the database (its
	// connection, and a write lock another process holds) when no step is
	// held. Default 250 ms.
	CommitWait time.Duration
	// ProbeWait bounds how long a retry of held steps waits for the
	// database: the failure showed it busy, so a retry only looks whether
	// that ended. Default 20 ms.
	ProbeWait time.Duration
	// CloseWait bounds how long the final save at Close waits for the
	// database: nothing else waits on the machine goroutine then, and a
	// connection held a moment by the courier or the uploader must not
	// leave the last steps unpersisted. Default 5 s.
	CloseWait time.Duration
	// RetryEvery is how often held steps are retried when no new step
	// asks for a commit: the next retry is due this long after the step
	// whose commit failed began. Default 1 s.
	RetryEvery time.Duration
	// CommitBatch bounds the workloads one commit writes; a bigger step
	// is committed in pieces (DrainBacklog). Default 256.
	CommitBatch int
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{CommitWait: 250 * time.Millisecond, ProbeWait: 20 * time.Millisecond, CloseWait: 5 * time.Second, RetryEvery: time.Second, CommitBatch: 256}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.CommitWait <= 0 {
		c.CommitWait = d.CommitWait
	}
	if c.ProbeWait <= 0 {
		c.ProbeWait = d.ProbeWait
	}
	if c.CloseWait <= 0 {
		c.CloseWait = d.CloseWait
	}
	if c.RetryEvery <= 0 {
		c.RetryEvery = d.RetryEvery
	}
	if c.CommitBatch <= 0 {
		c.CommitBatch = d.CommitBatch
	}
	return c
}

// Store is the driver's database. Every method that may wait for the
// database is told how long it may. P is the event an outbox row carries
// and X the caller's own rows a step commits with it (Batch).
type Store[P, X any] interface {
	// Load reads what Commit wrote: the machine's metadata (nil when none
	// was committed yet) and every workload row's snapshot.
	Load(ctx context.Context) (Loaded, error)
	// LastClaimTime returns the created_at (unix seconds) of workload id's
	// last claim event, as a Batch's ClaimTimes committed it; 0 when none.
	LastClaimTime(ctx context.Context, id string, wait time.Duration) (int64, error)
	// Commit writes b in one transaction, or nothing.
	Commit(ctx context.Context, b *Batch[P, X], wait time.Duration) error
}

// Loaded is what Store.Load read.
type Loaded struct {
	// Meta is the machine's metadata (lease.Machine.MetaSnapshot), nil
	// when none was committed.
	Meta *lease.Snapshot
	// Workloads are the workload rows.
	Workloads []lease.WorkloadSnapshot
}

// Batch is what one commit writes, in one transaction. Its values are the
// Store's to keep (copies of the machine's state); the Store encodes them
// as it likes (the agent as JSON, the simulator not at all). P is the event
// an outbox row carries (the agent's signed Nostr event as JSON, the
// simulator's event) and X the caller's own rows (the agent's operator
// commands marked applied; the simulator has none).
type Batch[P, X any] struct {
	// Workloads are the rows to write: each workload's current snapshot.
	Workloads []lease.WorkloadSnapshot
	// Deleted are the workloads whose rows (and claim time) to delete.
	Deleted []string
	// Meta, when not nil, replaces the machine's metadata.
	Meta *lease.Snapshot
	// ClaimTimes are created_at values (unix seconds) of claim events to
	// keep per workload (see Store.LastClaimTime).
	ClaimTimes map[string]int64
	// Outbox are the outbox rows the step's outbox effects queue.
	Outbox []OutboxRow[P]
	// Cursor, when not nil, is the caller's subscription cursor to save
	// (Save).
	Cursor *int64
	// Extra is the caller's own rows for this commit (Step.Extra), the
	// zero X when the step set none: the agent marks operator commands
	// applied with it.
	Extra X
}

// Outbox builds the events that outbox effects (lease.DurabilityOf ==
// lease.Outbox) queue, before the transaction that commits them: the agent
// signs Nostr events, the simulator makes simulated ones.
type Outbox[P any] interface {
	// Build builds one row per job, in order; a job whose event cannot be
	// built gets an error instead (its effect is left out of the commit).
	Build(jobs []OutboxJob) []OutboxResult[P]
}

// OutboxJob is one outbox effect to build, created at At, of a workload
// whose state is Workload.
type OutboxJob struct {
	Effect   lease.Effect
	At       time.Time
	Workload lease.WorkloadSnapshot
}

// OutboxResult is a built row or why it could not be built.
type OutboxResult[P any] struct {
	Row OutboxRow[P]
	Err error
	// Unneeded says there is nothing to queue: the event would change
	// nothing anywhere (a withdrawn marker for a claim no relay was ever
	// sent). The effect is done without a row.
	Unneeded bool
}

// OutboxRow is one event queued in the outbox with a step.
type OutboxRow[P any] struct {
	// Key is the row's idempotency key (one revocation per workload and
	// epoch, say).
	Key string
	// Payload is the event itself, as the caller's Store and outbox
	// understand it.
	Payload P
}

// Performer performs effects: through lease.Perform, the one table of what
// each effect means.
type Performer interface {
	// Perform carries out e. at is the created_at the driver gave its
	// event (a PublishClaim's claim); zero for the others.
	Perform(e lease.Effect, at time.Time)
}

// Events is told what an operator should hear about the driver's commits.
// Every method must return at once.
type Events interface {
	// Attempted reports each attempt to commit a step (not a Save, whose
	// caller sees its error): err is nil when it committed.
	Attempted(err error)
	// Held reports a step that could not commit and is held; first is
	// true for the first one of an episode.
	Held(err error, steps int, first bool)
	// Persisted reports held steps committed after an episode that began
	// at since.
	Persisted(steps int, since, now time.Time)
	// Backlog reports the number of workloads waiting in the backlog.
	Backlog(n int)
	// Saved reports the rows a Save wrote.
	Saved(rows int)
	// Dropped reports an outbox effect whose event could not be built: it
	// is left out (a standby's takeover covers a revocation that never
	// comes).
	Dropped(e lease.Effect, err error)
}

// NopEvents is an Events that tells nobody.
type NopEvents struct{}

func (NopEvents) Attempted(error)                     {}
func (NopEvents) Held(error, int, bool)               {}
func (NopEvents) Persisted(int, time.Time, time.Time) {}
func (NopEvents) Backlog(int)                         {}
func (NopEvents) Saved(int)                           {}
func (NopEvents) Dropped(lease.Effect, error)         {}

// Deps are the driver's collaborators.
type Deps[P, X any] struct {
	Store     Store[P, X]
	Outbox    Outbox[P]
	Performer Performer
	// Events defaults to NopEvents.
	Events Events
	// Finished receives the tokens of inputs whose steps are persisted.
	// Optional.
	Finished func([]Token)
}

// Driver is the one synchronous driver of a lease.Machine. It is not safe
// for concurrent use: the caller feeds it from one goroutine. P and X are
// its Store's: the event an outbox row carries and the caller's own rows a
// step commits with it.
type Driver[P, X any] struct {
	cfg  Config
	deps Deps[P, X]
	m    *lease.Machine

	dirty      idSet          // workloads an input may have changed without an effect (Save writes them)
	rivalWatch idSet          // workloads with rival claims: a Tick may adopt one without an effect
	pend       unpersisted[P] // steps whose commit failed
	bl         backlog        // pieces of big steps not committed yet
	claims     claimTimes     // created_at of claim events
	metaSaved  bool           // the machine's metadata is in the database
	restored   []lease.Effect // Restore's and Outstanding's effects, for CommitRestored
}

// Open restores the driver from what store holds, or starts an empty
// machine for provider self when it holds nothing. Workload rows without
// the machine's metadata (a database written before the first save by an
// agent older than this driver) are restored with empty relay tables:
// every committed workload comes back. The restored machine's effects
// (Restore's stops, then Outstanding's requests) are performed by
// CommitRestored, before anything else.
func Open[P, X any](ctx context.Context, now time.Time, cfg Config, lcfg lease.Config, self string, deps Deps[P, X]) (*Driver[P, X], error) {
	d := newDriver(cfg, deps)
	loaded, err := deps.Store.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("open driver: %w", err)
	}
	if loaded.Meta == nil && len(loaded.Workloads) == 0 {
		if d.m, err = lease.New(lcfg, self); err != nil {
			return nil, fmt.Errorf("open driver: %w", err)
		}
		return d, nil
	}
	var snap lease.Snapshot
	if loaded.Meta != nil {
		snap = *loaded.Meta
		d.metaSaved = true
	} else {
		snap = lease.Snapshot{Version: lease.SnapshotVersion, Self: self}
		for _, r := range lcfg.Relays {
			n, err := lease.NormalizeRelayURL(r)
			if err != nil {
				return nil, fmt.Errorf("open driver: %w", err)
			}
			snap.Relays = append(snap.Relays, n)
		}
	}
	if snap.Self != self {
		return nil, fmt.Errorf("open driver: database belongs to provider %s, this key is %s", snap.Self, self)
	}
	snap.Workloads = loaded.Workloads
	m, effs, err := lease.Restore(now, lcfg, snap)
	if err != nil {
		return nil, fmt.Errorf("open driver: %w", err)
	}
	d.m = m
	d.restored = append(effs, m.Outstanding()...)
	return d, nil
}

// New wraps an empty machine m (tests; Open restores from a Store).
func New[P, X any](cfg Config, m *lease.Machine, deps Deps[P, X]) *Driver[P, X] {
	d := newDriver(cfg, deps)
	d.m = m
	return d
}

func newDriver[P, X any](cfg Config, deps Deps[P, X]) *Driver[P, X] {
	if deps.Events == nil {
		deps.Events = NopEvents{}
	}
	return &Driver[P, X]{cfg: cfg.withDefaults(), deps: deps}
}

// MetaSaved reports whether the machine's metadata was found in, or
// committed to, the database: until then every commit writes it too.
func (d *Driver[P, X]) MetaSaved() bool { return d.metaSaved }

// Machine is the driven machine, for reading only (Held, State, Workload,
// HasQuorum...): an input fed to it directly, not through a Step, would
// bypass persistence.
func (d *Driver[P, X]) Machine() *lease.Machine { return d.m }

// Restored reports whether Open restored a machine whose effects
// CommitRestored has not performed yet.
func (d *Driver[P, X]) Restored() bool { return d.restored != nil }

// CommitRestored performs the restored machine's effects (Restore's stops
// for every workload not held here, then the claim-step requests
// Outstanding re-issues) as the first step: lease/doc.go's restart
// protocol. The stops are performed even when the commit fails.
func (d *Driver[P, X]) CommitRestored(ctx context.Context, now time.Time) error {
	effs := d.restored
	d.restored = nil
	if len(effs) == 0 {
		return nil
	}
	return d.commitStep(ctx, effs, commit[X]{now: now, run: true})
}

// Backlogged reports whether pieces of big steps wait for DrainBacklog.
func (d *Driver[P, X]) Backlogged() bool { return !d.bl.empty() }

// BacklogLen is the number of workloads waiting in the backlog.
func (d *Driver[P, X]) BacklogLen() int { return d.bl.len() }

// Held reports whether steps are held (their commit failed).
func (d *Driver[P, X]) Held() bool { return !d.pend.empty() }

// Wait is how long the caller's own database access on the driver's
// goroutine should wait, so that it never stalls it longer than a commit
// would: CommitWait, or ProbeWait while steps are held.
func (d *Driver[P, X]) Wait() time.Duration { return d.dbWait() }

// dbWait is how long the next database access may wait: CommitWait, or
// ProbeWait while steps are held.
func (d *Driver[P, X]) dbWait() time.Duration {
	if !d.pend.empty() {
		return min(d.cfg.CommitWait, d.cfg.ProbeWait)
	}
	return d.cfg.CommitWait
}

// finish hands the tokens of persisted inputs back.
func (d *Driver[P, X]) finish(toks []Token) {
	if len(toks) > 0 && d.deps.Finished != nil {
		d.deps.Finished(toks)
	}
}

// idSet is a set of workload ids.
type idSet map[string]struct{}

func (s *idSet) add(id string) {
	if *s == nil {
		*s = idSet{}
	}
	(*s)[id] = struct{}{}
}

func (s idSet) remove(id string) { delete(s, id) }
