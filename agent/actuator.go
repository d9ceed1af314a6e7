package agent

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"provideragent/backend"
	"provideragent/driver"
	"provideragent/lease"
)

// actuator is the Shell's driver.Processes in the agent: it performs the
// process operations the Shell releases (in order per workload, one at a
// time) against the backend, each workload's on a goroutine of its own,
// and reports their outcomes back as machine inputs.
type actuator struct {
	backend backend.Backend
	logger  *slog.Logger
	report  func(ctx context.Context, in input)
	wg      sync.WaitGroup
}

var _ driver.Processes = (*actuator)(nil)

// errStartDropped is what a start's prepare (driver.Op.Prepare) returns
// when a stop cancelled it: the start is dropped, not failed.
var errStartDropped = errors.New("start dropped")

func newActuator(b backend.Backend, logger *slog.Logger, report func(ctx context.Context, in input)) *actuator {
	return &actuator{backend: b, logger: logger, report: report}
}

// Go runs a workload's operations on a goroutine of their own (wait
// awaits it).
func (a *actuator) Go(work func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		work()
	}()
}

// Running implements driver.Processes.
func (a *actuator) Running(id string) bool { return a.backend.Running(id) }

// Run implements driver.Processes.
func (a *actuator) Run(ctx context.Context, o driver.Op) {
	id := o.Workload
	switch o.Kind {
	case driver.OpStart:
		if ctx.Err() != nil {
			return
		}
		dropped, err := a.start(ctx, o)
		if dropped {
			return
		}
		if err != nil {
			a.logger.Error("start workload", "workload", id, "epoch", o.Epoch, "err", err)
			a.report(ctx, input{exit: &lease.ProcessExit{Workload: id, Epoch: o.Epoch, Reason: "start failed: " + err.Error()}})
		}
	case driver.OpStop:
		// A stop runs even during shutdown: fencing must complete.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		reason := o.Reason
		if reason == "" {
			reason = stopReasonFenced
		}
		if err := a.backend.Stop(sctx, id, reason); err != nil {
			a.logger.Error("stop workload", "workload", id, "err", err)
		}
		cancel()
	case driver.OpRespawn:
		// The machine emits AttemptRespawn only once it is due: at once.
		if ctx.Err() != nil {
			return
		}
		dropped, err := a.start(ctx, o)
		if dropped {
			return
		}
		res := lease.RespawnResult{Workload: id, Attempt: o.Attempt, OK: err == nil}
		if err != nil {
			res.Reason = err.Error()
		}
		a.report(ctx, input{respawn: &res})
	}
}

// start runs o's prepare step, if any, then starts the workload; dropped
// is true when prepare gave the start up (errStartDropped), which is
// neither a start nor a failure to report.
func (a *actuator) start(ctx context.Context, o driver.Op) (dropped bool, err error) {
	if o.Prepare != nil {
		err = o.Prepare(ctx)
	}
	if errors.Is(err, errStartDropped) {
		return true, nil
	}
	if err == nil {
		err = a.backend.Start(ctx, backend.StartSpec{WorkloadID: o.Workload, Epoch: o.Epoch, Command: o.Command})
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

// wait blocks until every worker has returned: a worker returns once its
// workload's queue is empty.
func (a *actuator) wait() { a.wg.Wait() }
