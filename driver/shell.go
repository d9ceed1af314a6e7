package driver

import (
	"context"
	"sync"
	"time"

	"provideragent/lease"
)

// SaveEvery is the cadence of the periodic save (Shell.Save): the
// machine's metadata, the rows inputs changed without an effect, and the
// subscription cursor.
const SaveEvery = 5 * time.Second

// DefaultFenceRecheck is ShellConfig.FenceRecheck's default.
const DefaultFenceRecheck = 100 * time.Millisecond

// Shell is the machine goroutine's shell around the one Driver: the part
// of a daemon's loop that is the same whatever world it runs in. The agent's
// machine loop and the simulator's node both create one and run every turn
// through it, as etcd's raft has node.go over rawnode.go, so the properties
// check the code the agent runs:
//
//   - a turn (Begin, Turn.Feed, Turn.Mark, Turn.Tick, Turn.Commit): one
//     step fed in the one way every input is fed;
//   - the periodic save (Save, SaveIfDue: every SaveEvery) and the save at
//     shutdown (Close), with the world's subscription cursor;
//   - the release of process operations (Enqueue): in order and one at a
//     time per workload, performed by the world's Processes (the agent on
//     a goroutine per workload, the simulator at once);
//   - the fence gate (Release, Fenced; fence.go): the durable outbox sends
//     nothing before the restored machine's stops were performed (Start),
//     and a revocation only once its workload is fenced here (rule 7).
//
// P and X are its Driver's. A Shell is used from the machine goroutine,
// except Enqueue, Pending,
// Fenced, Release and Started, which are safe for concurrent use (the
// agent's outbox and its planned moves call them from goroutines of their
// own).
type Shell[P, X any] struct {
	d        *Driver[P, X]
	procs    Processes
	cursor   func() int64
	recheck  time.Duration
	started  chan struct{} // closed by Start
	nextSave time.Time

	mu     sync.Mutex
	queues map[string][]Op // per workload: the operation under way first, then those queued
	busy   map[string]bool // a worker releases the workload's operations
}

// ShellConfig tunes a Shell. The zero value of a field means its default.
type ShellConfig struct {
	// FenceRecheck is how soon an outbox row the fence gate held back is
	// due again (Release). Default DefaultFenceRecheck.
	FenceRecheck time.Duration
}

// ShellDeps are a Shell's collaborators.
type ShellDeps struct {
	// Processes performs the process operations (Enqueue) and says
	// whether a workload's process runs here (Fenced).
	Processes Processes
	// Cursor is the subscription cursor a save writes (Store's
	// Batch.Cursor). Optional: nil saves 0.
	Cursor func() int64
}

// NewShell wraps d, opened at now (the first periodic save is due
// SaveEvery later). Nothing is performed until Start.
func NewShell[P, X any](d *Driver[P, X], now time.Time, cfg ShellConfig, deps ShellDeps) *Shell[P, X] {
	if cfg.FenceRecheck <= 0 {
		cfg.FenceRecheck = DefaultFenceRecheck
	}
	if deps.Cursor == nil {
		deps.Cursor = func() int64 { return 0 }
	}
	return &Shell[P, X]{
		d: d, procs: deps.Processes, cursor: deps.Cursor, recheck: cfg.FenceRecheck,
		started: make(chan struct{}), nextSave: now.Add(SaveEvery),
		queues: map[string][]Op{}, busy: map[string]bool{},
	}
}

// Driver is the wrapped driver.
func (sh *Shell[P, X]) Driver() *Driver[P, X] { return sh.d }

// Start performs the restored machine's effects (Driver.CommitRestored:
// Restore's stops for every workload not held here, then Outstanding's
// requests) as the first step, and then opens the outbox (Started): a
// revocation committed before a crash leaves only after the stop that
// preceded it was performed again, which keeps rule 7 across the crash
// (lease/doc.go's restart protocol). The outbox opens even when that
// commit fails: the stops were performed, the rest is held like any
// step's.
func (sh *Shell[P, X]) Start(ctx context.Context, now time.Time) error {
	err := sh.d.CommitRestored(ctx, now)
	close(sh.started)
	return err
}

// Save is the periodic save (Driver.Save with the world's cursor); the
// next one is due SaveEvery after now.
func (sh *Shell[P, X]) Save(ctx context.Context, now time.Time) error {
	sh.nextSave = now.Add(SaveEvery)
	return sh.d.Save(ctx, now, sh.cursor())
}

// SaveIfDue saves (Save) when the periodic save is due at now, for a
// caller that looks at every turn rather than keeping a ticker; it
// reports whether it saved.
func (sh *Shell[P, X]) SaveIfDue(ctx context.Context, now time.Time) (bool, error) {
	if now.Before(sh.nextSave) {
		return false, nil
	}
	return true, sh.Save(ctx, now)
}

// Close persists everything at shutdown (Driver.Close with the world's
// cursor).
func (sh *Shell[P, X]) Close(ctx context.Context, now time.Time) error {
	return sh.d.Close(ctx, now, sh.cursor())
}

// Turn is one turn of the machine goroutine: one step at one time, fed
// inputs and marks, then committed. Its Step is there for what only an
// operator or a planned move feeds (HandOver, SetDraining, Release,
// Extra, SetClockSuspect).
type Turn[P, X any] struct{ *Step[P, X] }

// Begin starts a turn at now (the caller's clock).
func (sh *Shell[P, X]) Begin(now time.Time) *Turn[P, X] { return &Turn[P, X]{Step: sh.d.Begin(now)} }

// Input is one machine input as the world received and verified it. At
// most one of its inputs is set, besides Claims, which come alone or with
// the ClaimRead that found them; Token goes with any.
type Input struct {
	// Token, when set, is finished once the step is persisted (the
	// agent's subscription cursor token).
	Token *Token
	// Heartbeat is a verified heartbeat as one relay delivered it.
	Heartbeat *lease.Heartbeat
	// Revocation is a verified lease revocation.
	Revocation *lease.Revocation
	// Claims are verified promotion claims, withdrawn markers or Paygress
	// announcements (lease decides what one without an epoch counts as).
	Claims []lease.PromotionClaim
	// ClaimRead, when set, is the claim read that found Claims.
	ClaimRead *lease.ClaimRead
	// Grant is a lease grant.
	Grant *lease.Spec
	// Exit is a workload process's exit.
	Exit *lease.ProcessExit
	// Respawn is an AttemptRespawn's outcome.
	Respawn *lease.RespawnResult
	// Restored is a RestoreCheckpoint's outcome.
	Restored *lease.RestoreResult
	// ClaimAck is a PublishClaim's outcome.
	ClaimAck *lease.ClaimAck
}

// Fed is what feeding one input tells the caller.
type Fed struct {
	// Err is a grant's refusal (lease.Machine.Track's error).
	Err error
	// Competing is a claim read's count of the other providers with an
	// active claim at or above the epoch read (Step.ClaimsRead).
	Competing int
}

// Feed feeds one input to the turn's step: the one table of how each
// input reaches the machine.
func (t *Turn[P, X]) Feed(in Input) Fed {
	var fed Fed
	if in.Token != nil {
		t.Token(*in.Token)
	}
	switch {
	case in.Heartbeat != nil:
		t.Heartbeat(*in.Heartbeat)
	case in.Revocation != nil:
		t.Revocation(*in.Revocation)
	case in.Grant != nil:
		fed.Err = t.Grant(*in.Grant)
	case in.Exit != nil:
		t.Exited(*in.Exit)
	case in.Respawn != nil:
		t.RespawnDone(*in.Respawn)
	case in.Restored != nil:
		t.Restored(*in.Restored)
	case in.ClaimAck != nil:
		t.ClaimPublished(*in.ClaimAck)
	}
	if in.ClaimRead != nil {
		fed.Competing = t.ClaimsRead(*in.ClaimRead, in.Claims)
		return fed
	}
	for _, c := range in.Claims {
		t.Claim(c)
	}
	return fed
}

// MarkKind is what a Mark says about its relay's stream.
type MarkKind int

const (
	// MarkGap: the stream may miss events from here on (a connection
	// begins or ends, a CLOSED, a REQ sent again): Step.RelayGap.
	MarkGap MarkKind = iota + 1
	// MarkSynced: the stream's EOSE: Step.RelaySynced.
	MarkSynced
	// MarkOwnBeat: this provider's own heartbeat, fed ahead as unordered,
	// and every event before it on the stream has been fed:
	// Step.RelayShown.
	MarkOwnBeat
)

// Mark is what one relay's stream showed, fed once every event that came
// before it on that stream has been fed (lease/doc.go's relay streams).
type Mark struct {
	Kind  MarkKind
	Relay string
	// Created and Received are a MarkOwnBeat's heartbeat's created_at and
	// arrival.
	Created, Received time.Time
}

// Mark feeds m. It reports whether it ended the relay sync a restart
// awaits (rule 10): restored workloads may resume.
func (t *Turn[P, X]) Mark(m Mark) (synced bool) {
	switch m.Kind {
	case MarkGap:
		t.RelayGap(m.Relay)
	case MarkSynced:
		mach := t.d.m
		syncing := mach.AwaitingSync()
		t.RelaySynced(m.Relay)
		return syncing && !mach.AwaitingSync()
	case MarkOwnBeat:
		t.RelayShown(m.Relay, m.Created, m.Received)
	}
	return false
}
