package agent

// Durable workloads (a lease with a checkpoint policy): their settings and
// state, and which checkpoint each held epoch stands on, which its
// revocation names (kept in the agent's database). Restoring is in
// checkpoint_restore.go, publishing in checkpoint_publish.go, planned
// moves in move.go.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"provideragent/agentdb"
	"provideragent/checkpoint"
	"provideragent/lease"
	"provideragent/uploader"
)

// DefaultCheckpointPublishTimeout bounds one checkpoint's publish (its
// upload and its record) when CheckpointDeps names no bound.
const DefaultCheckpointPublishTimeout = 30 * time.Second

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
	// Store is the tile store checkpoints are cut into before they are
	// uploaded; nil: checkpoints are restored but never published.
	Store *uploader.Store
	// Uploader is the uploader settings a lease's uploads use, with the
	// lease's servers and K (zero: uploader.DefaultConfig()).
	Uploader uploader.Config
	// Metrics are the uploader's (nil: unregistered).
	Metrics *uploader.Metrics
	// PollInterval is how often a checkpoint directory is looked at (0:
	// checkpoint.DefaultPollInterval).
	PollInterval time.Duration
	// PublishTimeout bounds one checkpoint's upload and record (0:
	// DefaultCheckpointPublishTimeout).
	PublishTimeout time.Duration
	// MoveTimeout bounds a planned move's final publish (0:
	// DefaultMoveTimeout).
	MoveTimeout time.Duration
}

// ckptWork is the agent's durable-workload state.
type ckptWork struct {
	deps     CheckpointDeps
	restorer *checkpoint.Restorer

	watcher   *checkpoint.Watcher   // nil when checkpoints are not published
	publisher *checkpoint.Publisher // likewise

	mu        sync.Mutex
	restores  map[string]*restoreRun           // by workload: the attempt in flight
	last      map[string]epochState            // by workload: the checkpoint its newest epoch here stands on
	parents   map[string]epochState            // by workload: the record its newest epoch here was restored from (uri: event id)
	holding   map[string]uint64                // workloads held here (a Holding state), by epoch
	durable   map[string]bool                  // workloads whose tiles the lease's own uploads carry
	watched   map[string]checkpoint.PublishJob // by workload: what a new checkpoint of its run is published as
	busy      map[string]context.CancelFunc    // by workload: the publish in flight
	uploaders map[string]uploader.Uploader     // by server set and K
	watchedAt map[string]time.Time             // by workload: when its run's directory began to be watched
	moving    map[string]bool                  // workloads a planned move is handing over
	moveSem   chan struct{}                    // bounds the moves in flight
	keys      map[string]grantKey              // by workload: its grant's checkpoint key, opened
}

// grantKey is the checkpoint key of a grant (its created_at, unix
// seconds) as this provider opened it, or why it could not.
type grantKey struct {
	grant int64
	key   *checkpoint.Key
	err   error
}

// epochState is the checkpoint (its BUD-10 state_uri) an epoch of a
// grant (its created_at, unix seconds) stands on.
type epochState struct {
	grant int64
	epoch uint64
	uri   string
}

func (a *Agent) initCheckpoints(ctx context.Context, deps CheckpointDeps) error {
	if deps.HTTPClient == nil {
		deps.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if deps.MaxBytes <= 0 {
		deps.MaxBytes = checkpoint.DefaultMaxBytes
	}
	a.ckpt.deps = deps
	a.ckpt.restores = map[string]*restoreRun{}
	a.ckpt.last = map[string]epochState{}
	a.ckpt.parents = map[string]epochState{}
	a.ckpt.holding = map[string]uint64{}
	a.ckpt.durable = map[string]bool{}
	a.ckpt.watched = map[string]checkpoint.PublishJob{}
	a.ckpt.busy = map[string]context.CancelFunc{}
	a.ckpt.uploaders = map[string]uploader.Uploader{}
	a.ckpt.moving = map[string]bool{}
	a.ckpt.watchedAt = map[string]time.Time{}
	a.ckpt.keys = map[string]grantKey{}
	a.ckpt.moveSem = make(chan struct{}, maxMoves)
	if a.ckpt.deps.MoveTimeout <= 0 {
		a.ckpt.deps.MoveTimeout = DefaultMoveTimeout
	}
	if deps.Store != nil {
		if deps.Uploader.TileSize == 0 {
			deps.Uploader = uploader.DefaultConfig()
			a.ckpt.deps.Uploader = deps.Uploader
		}
		if a.ckpt.deps.PublishTimeout <= 0 {
			a.ckpt.deps.PublishTimeout = DefaultCheckpointPublishTimeout
		}
		a.ckpt.watcher = checkpoint.NewWatcher(deps.PollInterval)
		a.ckpt.publisher = &checkpoint.Publisher{
			Store: deps.Store, Uploader: a.leaseUploader, Relays: a.pool, Keys: a.me.keys, Quorum: a.cfg.Lease.M,
			TileSize: deps.Uploader.TileSize, MaxBytes: deps.MaxBytes, Holds: a.holds, Now: a.now, Logger: a.logger,
			Deleter: uploader.Deleter{Keys: a.me.keys, Client: deps.HTTPClient, AuthTTL: deps.Uploader.AuthTTL, Now: a.now},
			// A standby's evidence is the newest heartbeat it heard: the
			// next one names a newer checkpoint within an interval.
			NamedFor: 2*a.cfg.Lease.HeartbeatInterval + a.cfg.Lease.RelayDelay,
		}
	}
	// What the restored machine holds (its EnteredState effects came
	// before this run).
	for _, id := range a.machine().IDs() {
		if w, ok := a.machine().Workload(id); ok && w.Holder == a.me.self && w.State.Holding() {
			a.ckpt.holding[id] = w.Epoch
		}
	}
	rows, err := a.data.tables.Checkpoints(ctx)
	if err != nil {
		return fmt.Errorf("checkpoint ledger: %w", err)
	}
	for _, r := range rows {
		g := r.GrantAt.Unix()
		a.ckpt.last[r.Workload] = epochState{grant: g, epoch: r.Epoch, uri: r.StateURI}
		switch {
		case r.Seq == 0 && r.EventID != "":
			a.ckpt.parents[r.Workload] = epochState{grant: g, epoch: r.Epoch, uri: r.EventID}
		case r.Seq > 0 && a.ckpt.publisher != nil:
			a.ckpt.publisher.Remember(checkpoint.Published{Workload: r.Workload, Epoch: r.Epoch, Seq: r.Seq,
				EventID: r.EventID, CreatedAt: r.CreatedAt, StateURI: r.StateURI, GrantAt: r.GrantAt})
		}
	}
	a.exportServers(deps.Servers)
	a.ckpt.restorer = &checkpoint.Restorer{
		Relays: a.pool, Verify: a.inbound.ingestor, Blobs: checkpoint.HTTPBlobs{Client: deps.HTTPClient},
		Self: a.me.self, MaxSkew: a.cfg.Lease.MaxSkew, Quorum: a.cfg.Lease.N - a.cfg.Lease.M + 1,
		QueryTimeout: a.claimIOTimeout(), MaxBytes: deps.MaxBytes, OnBadCopy: a.badCopy, Now: a.now, Logger: a.logger,
	}
	return nil
}

// setStateURI records that epoch of id's grant (made at grantAt) stands
// on the checkpoint uri (the one it restored, then each it publishes).
func (a *Agent) setStateURI(id string, grantAt time.Time, epoch uint64, uri string) {
	if uri == "" {
		return
	}
	g := grantAt.Unix()
	a.ckpt.mu.Lock()
	if cur, ok := a.ckpt.last[id]; !ok || cur.grant != g || cur.epoch <= epoch {
		a.ckpt.last[id] = epochState{grant: g, epoch: epoch, uri: uri}
	}
	a.ckpt.mu.Unlock()
}

// stateURI is the checkpoint a revocation of epoch of id's grant names:
// the last one that epoch published or restored, "" when none.
func (a *Agent) stateURI(id string, grantAt time.Time, epoch uint64) string {
	a.ckpt.mu.Lock()
	defer a.ckpt.mu.Unlock()
	if cur := a.ckpt.last[id]; cur.grant == grantAt.Unix() && cur.epoch == epoch {
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
		return a.stateURI(r.ID, spec.CreatedAt, r.Epoch)
	}
	return spec.StateURI
}

// holds reports whether this provider holds workload id at epoch now (a
// Holding state, as the machine last reported it).
func (a *Agent) holds(id string, epoch uint64) bool {
	a.ckpt.mu.Lock()
	defer a.ckpt.mu.Unlock()
	e, ok := a.ckpt.holding[id]
	return ok && e == epoch
}

// noteState follows the machine's transitions (machine goroutine): which
// epoch of which workload this provider holds.
func (a *Agent) noteState(e lease.EnteredState) {
	a.ckpt.mu.Lock()
	defer a.ckpt.mu.Unlock()
	if e.To.Holding() {
		a.ckpt.holding[e.ID] = e.Epoch
		return
	}
	delete(a.ckpt.holding, e.ID)
	if e.To.Terminal() {
		delete(a.ckpt.last, e.ID)
		delete(a.ckpt.parents, e.ID)
		delete(a.ckpt.keys, e.ID)
		if a.ckpt.publisher != nil {
			a.ckpt.publisher.Forget(e.ID)
		}
	}
}

// checkpointKey is the checkpoint key of spec's grant, opened once per
// grant: nil when the grant has none (its checkpoints are plaintext), an
// error when this provider cannot open it (then nothing of the workload is
// published, and a restore fails naming it). The grant's issuer sealed it
// to this provider with NIP-44; a lease does not name its issuer, so this
// provider's own key (the grants its operator queues) and every trusted
// issuer are tried.
func (a *Agent) checkpointKey(spec lease.Spec) (*checkpoint.Key, error) {
	p := spec.Checkpoint
	if p == nil || len(p.Keys) == 0 {
		return nil, nil
	}
	g := spec.CreatedAt.Unix()
	a.ckpt.mu.Lock()
	defer a.ckpt.mu.Unlock()
	if k, ok := a.ckpt.keys[spec.ID]; ok && k.grant == g {
		return k.key, k.err
	}
	k := grantKey{grant: g}
	key, err := checkpoint.OpenGrantKey(a.me.keys, p.Keys, append([]string{a.me.self}, a.cfg.TrustedIssuers...))
	if err != nil {
		k.err = fmt.Errorf("%s: %w", spec.ID, err)
	} else {
		k.key = &key
	}
	a.ckpt.keys[spec.ID] = k
	return k.key, k.err
}

// durableWorkload reports whether the workload's tiles are uploaded by
// its lease's own publishes (the global upload loop leaves them).
func (a *Agent) durableWorkload(id string) bool {
	a.ckpt.mu.Lock()
	defer a.ckpt.mu.Unlock()
	return a.ckpt.durable[id]
}

// published records a checkpoint published: the revocation of its epoch
// names it, also after a restart.
func (a *Agent) published(ctx context.Context, pub checkpoint.Published) {
	a.obs.met.ckptPublished.WithLabelValues("published").Inc()
	a.obs.met.blobDeletes.WithLabelValues("deleted").Add(float64(pub.Deleted))
	a.obs.met.blobDeletes.WithLabelValues("failed").Add(float64(pub.DeleteFailed))
	a.setStateURI(pub.Workload, pub.GrantAt, pub.Epoch, pub.StateURI)
	a.saveCheckpoint(ctx, agentdb.CheckpointRow{Workload: pub.Workload, GrantAt: pub.GrantAt, Epoch: pub.Epoch, Seq: pub.Seq,
		EventID: pub.EventID, StateURI: pub.StateURI, CreatedAt: pub.CreatedAt})
}

// saveCheckpoint writes the workload's ledger row (a failure is logged:
// the row only matters after a restart).
func (a *Agent) saveCheckpoint(ctx context.Context, row agentdb.CheckpointRow) {
	if err := a.data.tables.PutCheckpoint(context.WithoutCancel(ctx), row); err != nil {
		a.logger.Error("record the checkpoint in the ledger", "workload", row.Workload, "epoch", row.Epoch, "err", err)
	}
}

// heldStateURI is the checkpoint epoch of id stands on, whatever its
// grant (for /status).
func (a *Agent) heldStateURI(id string, epoch uint64) string {
	a.ckpt.mu.Lock()
	defer a.ckpt.mu.Unlock()
	if cur := a.ckpt.last[id]; cur.epoch == epoch {
		return cur.uri
	}
	return ""
}

// observeCheckpointAge sets agent_checkpoint_age_seconds: the oldest last
// published checkpoint among the watched workloads (since the watch began
// for one that published none at its epoch yet).
func (a *Agent) observeCheckpointAge(now time.Time) {
	if a.ckpt.publisher == nil {
		return
	}
	a.ckpt.mu.Lock()
	type watch struct {
		epoch uint64
		since time.Time
	}
	ws := make(map[string]watch, len(a.ckpt.watched))
	for id, job := range a.ckpt.watched {
		ws[id] = watch{epoch: job.Epoch, since: a.ckpt.watchedAt[id]}
	}
	a.ckpt.mu.Unlock()
	var oldest time.Duration
	for id, w := range ws {
		at := w.since
		if last, ok := a.ckpt.publisher.Last(id); ok && last.Epoch == w.epoch && last.TakenAt.After(at) {
			at = last.TakenAt
		}
		oldest = max(oldest, now.Sub(at))
	}
	a.obs.met.ckptAge.Set(oldest.Seconds())
}
