package agent

// Durable workloads (a lease with a checkpoint policy): restoring the last
// published checkpoint before a new epoch's start, off the machine loop
// like the claim step's reads, and remembering which checkpoint each held
// epoch last stood on, which its revocation names.

import (
	"context"
	"net/http"
	"sync"
	"time"

	"provideragent/backend"
	"provideragent/checkpoint"
	"provideragent/lease"
)

// CheckpointDeps configure durable workloads.
type CheckpointDeps struct {
	// Servers are this provider's Blossom servers (uploader.servers):
	// checkpoints of a lease whose policy names none go there, and a
	// restore tries them after a record's own servers.
	Servers []string
	// HTTPClient downloads blobs (nil: one with a 30 s timeout).
	HTTPClient *http.Client
	// MaxBytes bounds a checkpoint (0: checkpoint.DefaultMaxBytes).
	MaxBytes int64
}

// ckptWork is the agent's durable-workload state.
type ckptWork struct {
	deps     CheckpointDeps
	restorer *checkpoint.Restorer

	mu       sync.Mutex
	restores map[string]*restoreRun // by workload: the attempt in flight
	last     map[string]epochState  // by workload: the checkpoint its newest epoch here stands on
}

// epochState is the checkpoint (its BUD-10 state_uri) an epoch stands on.
type epochState struct {
	epoch uint64
	uri   string
}

// restoreRun is a restore attempt in flight, cancelled by a stop.
type restoreRun struct {
	epoch   uint64
	attempt int
	cancel  context.CancelFunc
}

func (a *Agent) initCheckpoints(deps CheckpointDeps) {
	if deps.HTTPClient == nil {
		deps.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if deps.MaxBytes <= 0 {
		deps.MaxBytes = checkpoint.DefaultMaxBytes
	}
	a.ckpt.deps = deps
	a.ckpt.restores = map[string]*restoreRun{}
	a.ckpt.last = map[string]epochState{}
	a.ckpt.restorer = &checkpoint.Restorer{
		Relays: a.pool, Verify: a.inbound.ingestor, Blobs: checkpoint.HTTPBlobs{Client: deps.HTTPClient},
		Self: a.me.self, MaxSkew: a.cfg.Lease.MaxSkew, Quorum: a.cfg.Lease.N - a.cfg.Lease.M + 1,
		QueryTimeout: a.claimIOTimeout(), MaxBytes: deps.MaxBytes, Now: a.now, Logger: a.logger,
	}
}

// restoreMargin is how much sooner than the machine's restore timeout an
// attempt gives up, so that its report arrives while the machine still
// waits for it.
func restoreMargin(timeout time.Duration) time.Duration {
	return min(timeout/10, 2*time.Second)
}

// beginRestore registers a restore attempt of e and returns its context,
// bounded by the attempt's timeout; a previous attempt of the workload is
// cancelled.
func (a *Agent) beginRestore(ctx context.Context, e lease.RestoreCheckpoint) (context.Context, func()) {
	rctx, cancel := context.WithTimeout(ctx, e.Timeout-restoreMargin(e.Timeout))
	run := &restoreRun{epoch: e.Epoch, attempt: e.Attempt, cancel: cancel}
	a.ckpt.mu.Lock()
	if old := a.ckpt.restores[e.ID]; old != nil {
		old.cancel()
	}
	a.ckpt.restores[e.ID] = run
	a.ckpt.mu.Unlock()
	return rctx, func() {
		cancel()
		a.ckpt.mu.Lock()
		if a.ckpt.restores[e.ID] == run {
			delete(a.ckpt.restores, e.ID)
		}
		a.ckpt.mu.Unlock()
	}
}

// cancelRestore cancels the workload's restore in flight, if any: a stop
// never waits for a download, and nothing is placed after it.
func (a *Agent) cancelRestore(id string) {
	a.ckpt.mu.Lock()
	if run := a.ckpt.restores[id]; run != nil {
		run.cancel()
		delete(a.ckpt.restores, id)
	}
	a.ckpt.mu.Unlock()
}

// restoreRequest is what the restorer needs for e, read from the machine
// (machine goroutine).
func (a *Agent) restoreRequest(e lease.RestoreCheckpoint) checkpoint.RestoreRequest {
	req := checkpoint.RestoreRequest{RestoreCheckpoint: e}
	if w, ok := a.machine().Workload(e.ID); ok {
		req.Members = append([]string{w.Spec.Primary}, w.Spec.Standbys...)
		if p := w.Spec.Checkpoint; p != nil {
			req.Servers = append(req.Servers, p.Servers...)
		}
	}
	req.Servers = append(req.Servers, a.ckpt.deps.Servers...)
	return req
}

// runRestore carries out one restore attempt (off the machine goroutine)
// and returns the machine's input.
func (a *Agent) runRestore(ctx context.Context, req checkpoint.RestoreRequest) lease.RestoreResult {
	fail := func(reason string) lease.RestoreResult {
		return lease.RestoreResult{Workload: req.ID, Epoch: req.Epoch, Attempt: req.Attempt, Reason: reason}
	}
	cp, ok := a.work.backend.(backend.Checkpointer)
	if !ok {
		return fail("the backend gives workloads no checkpoint directory")
	}
	dir, err := cp.CheckpointDir(req.ID, req.Epoch)
	if err != nil {
		return fail(err.Error())
	}
	req.Dir = checkpoint.Dir{Path: dir.Path, UID: dir.UID, GID: dir.GID}
	start := time.Now()
	out := a.ckpt.restorer.Restore(ctx, req)
	log := a.logger.With("workload", req.ID, "epoch", req.Epoch, "attempt", req.Attempt, "took", time.Since(start).Round(time.Millisecond))
	for _, f := range out.Refused {
		a.met.ckptRefused.WithLabelValues(f.Reason).Inc()
		log.Warn("checkpoint refused", "record", f.EventID, "reason", f.Reason, "detail", f.Detail)
	}
	switch r := out.Result; {
	case r.OK:
		a.setStateURI(req.ID, req.Epoch, out.StateURI)
		log.Info("checkpoint restored", "from", r.From, "dir", dir.Path)
		a.emit("restore", req.ID, "checkpoint restored for epoch %d: %s", req.Epoch, r.From)
	case r.Fresh:
		log.Info("no checkpoint to restore", "reason", r.Reason)
	default:
		log.Warn("checkpoint restore failed", "reason", r.Reason)
	}
	return out.Result
}

// setStateURI records that epoch of id stands on the checkpoint uri (the
// one it restored, then each it publishes).
func (a *Agent) setStateURI(id string, epoch uint64, uri string) {
	if uri == "" {
		return
	}
	a.ckpt.mu.Lock()
	if cur, ok := a.ckpt.last[id]; !ok || cur.epoch <= epoch {
		a.ckpt.last[id] = epochState{epoch: epoch, uri: uri}
	}
	a.ckpt.mu.Unlock()
}

// stateURI is the checkpoint a revocation of epoch of id names: the last
// one that epoch published or restored, "" when none.
func (a *Agent) stateURI(id string, epoch uint64) string {
	a.ckpt.mu.Lock()
	defer a.ckpt.mu.Unlock()
	if cur := a.ckpt.last[id]; cur.epoch == epoch {
		return cur.uri
	}
	return ""
}

// revocationStateURI is the state_uri a revocation effect carries: the
// planned handover's final checkpoint, else for a durable workload the
// checkpoint its epoch last stood on (none if it never had one), else the
// grant's.
func (a *Agent) revocationStateURI(e lease.Effect, spec lease.Spec) string {
	r, ok := e.(lease.PublishRevocation)
	switch {
	case !ok:
		return spec.StateURI
	case r.StateURI != "":
		return r.StateURI
	case spec.Checkpoint != nil:
		return a.stateURI(r.ID, r.Epoch)
	}
	return spec.StateURI
}
