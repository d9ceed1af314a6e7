package driver

import (
	"context"
	"time"
)

// Rule 7: a holder's revocation leaves only once the workload's process is
// fenced here, so that no successor starts while the old copy may still
// run. The Shell keeps the process operations of every workload (a start,
// a stop, a respawn) in a queue of its own, from the moment an effect or a
// planned move asks for one until the world has performed it; a workload
// is fenced when its queue is empty and the world says its process does
// not run. The durable outbox asks Release before it sends a row.

// OpKind is what a process operation does.
type OpKind int

const (
	// OpStart starts the workload's process (StartWorkload).
	OpStart OpKind = iota + 1
	// OpStop stops it (StopWorkload, or a planned move's stop).
	OpStop
	// OpRespawn restarts it after an exit (AttemptRespawn); its outcome is
	// reported (RespawnDone).
	OpRespawn
)

// Op is one process operation for the world to perform.
type Op struct {
	Kind     OpKind
	Workload string
	Epoch    uint64
	// Attempt is an OpRespawn's attempt.
	Attempt int
	// Command is an OpStart's or OpRespawn's command (the grant's).
	Command []string
	// Reason is an OpStop's reason, for the workload's log ("": fenced
	// by the lease machine).
	Reason string
	// Prepare, when set, is the world's work before an OpStart or
	// OpRespawn (the agent recovers a durable workload's checkpoint into
	// its run's directory). The Shell never calls it: Processes.Run does.
	Prepare func(ctx context.Context) error
}

// Processes performs process operations in the world.
type Processes interface {
	// Go runs work, which releases one workload's operations in order
	// until none is left: the agent on a goroutine of its own, the
	// simulator at once.
	Go(work func())
	// Run performs op and returns once it is done (a stop once its
	// process was told to end: Running says when it has).
	Run(ctx context.Context, op Op)
	// Running reports whether workload id's process runs here (a process
	// told to stop runs until it has exited).
	Running(id string) bool
}

// Enqueue queues op behind its workload's other operations; they are
// performed in order, one at a time (Processes.Go and Run), ctx being the
// lifetime of the work.
func (sh *Shell[P, X]) Enqueue(ctx context.Context, op Op) {
	id := op.Workload
	sh.mu.Lock()
	sh.queues[id] = append(sh.queues[id], op)
	idle := !sh.busy[id]
	sh.busy[id] = true
	sh.mu.Unlock()
	if idle {
		sh.procs.Go(func() { sh.work(ctx, id) })
	}
}

// work performs workload id's operations until its queue is empty. An
// operation stays at the queue's front while it runs, so that Pending
// sees it.
func (sh *Shell[P, X]) work(ctx context.Context, id string) {
	for {
		sh.mu.Lock()
		q := sh.queues[id]
		if len(q) == 0 {
			delete(sh.queues, id)
			delete(sh.busy, id)
			sh.mu.Unlock()
			return
		}
		op := q[0]
		sh.mu.Unlock()
		sh.procs.Run(ctx, op)
		sh.mu.Lock()
		sh.queues[id] = sh.queues[id][1:]
		sh.mu.Unlock()
	}
}

// Pending reports whether an operation of workload id is queued or under
// way.
func (sh *Shell[P, X]) Pending(id string) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.queues[id]) > 0
}

// Fenced reports whether workload id is fenced here: no operation of it
// queued or under way, and its process not running.
func (sh *Shell[P, X]) Fenced(id string) bool {
	return !sh.Pending(id) && !sh.procs.Running(id)
}

// Started is closed once Start has performed the restored machine's
// effects: the outbox may send from then on.
func (sh *Shell[P, X]) Started() <-chan struct{} { return sh.started }

// Release reports whether an outbox row may be sent now: none before Start
// performed the restored machine's stops, and a revocation (revokes: the
// workload it revokes; "" for any other row) only once that workload is
// fenced here. A row held back is due again after FenceRecheck.
func (sh *Shell[P, X]) Release(revokes string) bool {
	select {
	case <-sh.started:
	default:
		return false
	}
	return revokes == "" || sh.Fenced(revokes)
}

// FenceRecheck is how soon a row Release held back is due again.
func (sh *Shell[P, X]) FenceRecheck() time.Duration { return sh.recheck }
