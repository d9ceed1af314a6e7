package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"provideragent/backend"
	"provideragent/lease"
)

// actuator runs backend operations off the machine goroutine, in order per
// workload, and reports their outcomes back as machine inputs. It is the
// FenceGate of the Nostr forwarder: a workload is fenced when nothing is
// queued for it and its process does not run.
type actuator struct {
	backend backend.Backend
	logger  *slog.Logger
	report  func(ctx context.Context, in input)

	mu     sync.Mutex
	queues map[string][]op
	busy   map[string]bool
	wg     sync.WaitGroup
}

type opKind int

const (
	opStart opKind = iota
	opStop
	opRespawn
)

type op struct {
	kind    opKind
	epoch   uint64
	command []string
	attempt int
	reason  string // opStop: the reason given to the backend ("": fenced)
	// prepare, when set, runs before an opStart or opRespawn (a durable workload's
	// checkpoint is recovered into its run's directory): errStartDropped
	// drops the start (a stop, queued next, cancelled it); another error
	// is reported as the start's failure.
	prepare func(ctx context.Context) error
}

// errStartDropped is what a start's prepare returns when a stop cancelled
// it: the start is dropped, not failed.
var errStartDropped = errors.New("start dropped")

func newActuator(b backend.Backend, logger *slog.Logger, report func(ctx context.Context, in input)) *actuator {
	return &actuator{backend: b, logger: logger, report: report, queues: map[string][]op{}, busy: map[string]bool{}}
}

// enqueue adds an operation for workload id; a worker goroutine (one per
// workload with queued work) runs them in order until ctx ends.
func (a *actuator) enqueue(ctx context.Context, id string, o op) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.queues[id] = append(a.queues[id], o)
	if a.busy[id] {
		return
	}
	a.busy[id] = true
	a.wg.Add(1)
	go a.work(ctx, id)
}

func (a *actuator) work(ctx context.Context, id string) {
	defer a.wg.Done()
	for {
		a.mu.Lock()
		q := a.queues[id]
		if len(q) == 0 {
			delete(a.queues, id)
			delete(a.busy, id)
			a.mu.Unlock()
			return
		}
		o := q[0]
		a.mu.Unlock()
		a.run(ctx, id, o)
		a.mu.Lock()
		a.queues[id] = a.queues[id][1:]
		a.mu.Unlock()
	}
}

func (a *actuator) run(ctx context.Context, id string, o op) {
	switch o.kind {
	case opStart:
		if ctx.Err() != nil {
			return
		}
		dropped, err := a.start(ctx, id, o)
		if dropped {
			return
		}
		if err != nil {
			a.logger.Error("start workload", "workload", id, "epoch", o.epoch, "err", err)
			a.report(ctx, input{exit: &lease.ProcessExit{Workload: id, Epoch: o.epoch, Reason: "start failed: " + err.Error()}})
		}
	case opStop:
		// A stop runs even during shutdown: fencing must complete.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		reason := o.reason
		if reason == "" {
			reason = stopReasonFenced
		}
		if err := a.backend.Stop(sctx, id, reason); err != nil {
			a.logger.Error("stop workload", "workload", id, "err", err)
		}
		cancel()
	case opRespawn:
		// The machine emits AttemptRespawn only once it is due: at once.
		if ctx.Err() != nil {
			return
		}
		dropped, err := a.start(ctx, id, o)
		if dropped {
			return
		}
		res := lease.RespawnResult{Workload: id, Attempt: o.attempt, OK: err == nil}
		if err != nil {
			res.Reason = err.Error()
		}
		a.report(ctx, input{respawn: &res})
	}
}

// start runs o's prepare step, if any, then starts the workload; dropped
// is true when prepare gave the start up (errStartDropped), which is
// neither a start nor a failure to report.
func (a *actuator) start(ctx context.Context, id string, o op) (dropped bool, err error) {
	if o.prepare != nil {
		err = o.prepare(ctx)
	}
	if errors.Is(err, errStartDropped) {
		return true, nil
	}
	if err == nil {
		err = a.backend.Start(ctx, backend.StartSpec{WorkloadID: id, Epoch: o.epoch, Command: o.command})
	}
	return false, err
}

// The reasons the agent gives backend.Stop (they end up in the workload's
// log and its Exit).
const (
	stopReasonFenced   = "fenced by the lease machine"
	stopReasonShutdown = "agent shutting down (stop_workloads_on_exit)"
	stopReasonMove     = "planned move: final checkpoint, then handover"
)

// Fenced implements FenceGate. An operation stays in its workload's queue
// while it runs (work removes it after), so a queue holds every start or
// stop not yet done; after the last one, Running has the answer.
func (a *actuator) Fenced(id string) bool {
	a.mu.Lock()
	pending := len(a.queues[id]) > 0
	a.mu.Unlock()
	return !pending && !a.backend.Running(id)
}

// wait blocks until every worker has returned: a worker returns once its
// workload's queue is empty, or when ctx ends.
func (a *actuator) wait() { a.wg.Wait() }
