package agent

// Durable workloads (a lease with a checkpoint policy): the durables
// type, their settings, and which checkpoint each held epoch stands on,
// which its revocation names (kept in the agent's database). Restoring is
// in checkpoint_restore.go, publishing in checkpoint_publish.go, the
// heartbeats' checkpoint marks in checkpoint_mark.go, planned moves in
// move.go.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"provideragent/agentdb"
	"provideragent/backend"
	"provideragent/checkpoint"
	"provideragent/identity"
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

// durables is the durable-workload cluster (leases with a checkpoint
// policy): which epoch of which workload this provider holds, the
// checkpoint each held epoch stands on (kept in the agent's database and
// named by its revocations), the restores before an epoch starts, the
// publishing of each new checkpoint, and the moves' bookkeeping. The agent
// reaches it only through its methods; it reaches the agent only through
// durableEnv.
//
// Who owns what is in the types: the fields up to books are set by
// newDurables and only read after it; books is reached only under its
// lock (guarded), from whichever goroutine calls: the machine goroutine
// (noteState, watch, unwatch, restoreRequest), the checkpoint loop and its
// publishes, restores, moves and /status. The methods say which goroutine
// calls them where it matters.
type durables struct {
	env       durableEnv
	deps      CheckpointDeps
	restorer  *checkpoint.Restorer
	watcher   *checkpoint.Watcher   // nil when checkpoints are not published
	publisher *checkpoint.Publisher // likewise
	moveSem   chan struct{}         // bounds the moves in flight

	books guarded[durableBooks]
}

// durableEnv is what the durable cluster needs of the agent: who this
// provider is, where it logs, counts and writes, and how it reaches a
// workload's checkpoint directory.
type durableEnv struct {
	keys    *identity.Keys
	self    string   // keys' hex public key
	issuers []string // trusted grant issuers (Config.TrustedIssuers)
	logger  *slog.Logger
	met     *metrics
	now     func() time.Time
	emit    func(kind, workload, format string, args ...any)
	ledger  *agentdb.Store  // the checkpoint ledger's rows
	backend backend.Backend // a backend.Checkpointer gives the run's directory
}

// durableBooks is the durable cluster's bookkeeping, by workload.
type durableBooks struct {
	restores  map[string]*restoreRun           // the attempt in flight
	last      map[string]epochState            // the checkpoint its newest epoch here stands on
	parents   map[string]epochState            // the record its newest epoch here was restored from (uri: event id)
	holding   map[string]uint64                // workloads held here (a Holding state), by epoch
	durable   map[string]bool                  // workloads whose tiles the lease's own uploads carry
	watched   map[string]checkpoint.PublishJob // what a new checkpoint of its run is published as
	busy      map[string]context.CancelFunc    // the publish in flight
	uploaders map[string]uploader.Uploader     // by server set and K
	watchedAt map[string]time.Time             // when its run's directory began to be watched
	moving    map[string]bool                  // workloads a planned move is handing over
	keys      map[string]grantKey              // its grant's checkpoint key, opened
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

// durableWiring is what newDurables builds the restorer and the
// publisher over: the relays, the verifying ingest, the lease settings and
// the claim step's read timeout.
type durableWiring struct {
	pool        RelayPool
	verifier    checkpoint.RecordVerifier
	lease       lease.Config
	readTimeout time.Duration
	secretKey   string // the uploads' BUD-11 authorization key
}

// newDurables builds the durable cluster from deps, the workloads the
// restored machine holds (id: epoch; their EnteredState effects came
// before this run) and the checkpoint ledger.
func newDurables(ctx context.Context, deps CheckpointDeps, env durableEnv, wire durableWiring, holding map[string]uint64) (*durables, error) {
	if deps.HTTPClient == nil {
		deps.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if deps.MaxBytes <= 0 {
		deps.MaxBytes = checkpoint.DefaultMaxBytes
	}
	if deps.MoveTimeout <= 0 {
		deps.MoveTimeout = DefaultMoveTimeout
	}
	if deps.Store != nil {
		if deps.Uploader.TileSize == 0 {
			deps.Uploader = uploader.DefaultConfig()
		}
		if deps.PublishTimeout <= 0 {
			deps.PublishTimeout = DefaultCheckpointPublishTimeout
		}
	}
	d := &durables{env: env, deps: deps, moveSem: make(chan struct{}, maxMoves)}
	d.books.v = durableBooks{
		restores: map[string]*restoreRun{}, last: map[string]epochState{}, parents: map[string]epochState{},
		holding: holding, durable: map[string]bool{}, watched: map[string]checkpoint.PublishJob{},
		busy: map[string]context.CancelFunc{}, uploaders: map[string]uploader.Uploader{},
		moving: map[string]bool{}, watchedAt: map[string]time.Time{}, keys: map[string]grantKey{},
	}
	if d.books.v.holding == nil {
		d.books.v.holding = map[string]uint64{}
	}
	if deps.Store != nil {
		d.watcher = checkpoint.NewWatcher(deps.PollInterval)
		d.publisher = &checkpoint.Publisher{
			Store: deps.Store, Uploader: func(servers []string, k int) (uploader.Uploader, error) {
				return d.leaseUploader(servers, k, wire.secretKey)
			},
			Relays: wire.pool, Keys: env.keys, Quorum: wire.lease.M,
			TileSize: deps.Uploader.TileSize, MaxBytes: deps.MaxBytes, Holds: d.holds, Now: env.now, Logger: env.logger,
			Deleter: uploader.Deleter{Keys: env.keys, Client: deps.HTTPClient, AuthTTL: deps.Uploader.AuthTTL, Now: env.now},
			// A standby's evidence is the newest heartbeat it heard: the
			// next one names a newer checkpoint within an interval.
			NamedFor: 2*wire.lease.HeartbeatInterval + wire.lease.RelayDelay,
		}
	}
	rows, err := env.ledger.Checkpoints(ctx)
	if err != nil {
		return nil, fmt.Errorf("checkpoint ledger: %w", err)
	}
	for _, r := range rows {
		g := r.GrantAt.Unix()
		d.books.v.last[r.Workload] = epochState{grant: g, epoch: r.Epoch, uri: r.StateURI}
		switch {
		case r.Seq == 0 && r.EventID != "":
			d.books.v.parents[r.Workload] = epochState{grant: g, epoch: r.Epoch, uri: r.EventID}
		case r.Seq > 0 && d.publisher != nil:
			d.publisher.Remember(checkpoint.Published{Workload: r.Workload, Epoch: r.Epoch, Seq: r.Seq,
				EventID: r.EventID, CreatedAt: r.CreatedAt, StateURI: r.StateURI, GrantAt: r.GrantAt})
		}
	}
	d.exportServers(deps.Servers)
	d.restorer = &checkpoint.Restorer{
		Relays: wire.pool, Verify: wire.verifier, Blobs: checkpoint.HTTPBlobs{Client: deps.HTTPClient},
		Self: env.self, MaxSkew: wire.lease.MaxSkew, Quorum: wire.lease.N - wire.lease.M + 1,
		QueryTimeout: wire.readTimeout, MaxBytes: deps.MaxBytes, OnBadCopy: d.badCopy, Now: env.now, Logger: env.logger,
	}
	return d, nil
}

// publishes reports whether this agent publishes checkpoints (it has a
// tile store).
func (d *durables) publishes() bool { return d.publisher != nil }

// setStateURI records that epoch of id's grant (made at grantAt) stands
// on the checkpoint uri (the one it restored, then each it publishes).
func (d *durables) setStateURI(id string, grantAt time.Time, epoch uint64, uri string) {
	if uri == "" {
		return
	}
	g := grantAt.Unix()
	d.books.with(func(b *durableBooks) {
		if cur, ok := b.last[id]; !ok || cur.grant != g || cur.epoch <= epoch {
			b.last[id] = epochState{grant: g, epoch: epoch, uri: uri}
		}
	})
}

// stateURI is the checkpoint a revocation of epoch of id's grant names:
// the last one that epoch published or restored, "" when none.
func (d *durables) stateURI(id string, grantAt time.Time, epoch uint64) (uri string) {
	d.books.with(func(b *durableBooks) {
		if cur := b.last[id]; cur.grant == grantAt.Unix() && cur.epoch == epoch {
			uri = cur.uri
		}
	})
	return uri
}

// revocationStateURI is the state_uri a revocation effect carries: the
// planned handover's final checkpoint, else for a durable workload the
// checkpoint its epoch last stood on (none if it never had one), else the
// grant's.
func (d *durables) revocationStateURI(e lease.Effect, spec lease.Spec) string {
	r, ok := e.(lease.PublishRevocation)
	switch {
	case !ok:
		return spec.StateURI
	case r.StateURI != "":
		return r.StateURI
	case spec.Checkpoint != nil:
		return d.stateURI(r.ID, spec.CreatedAt, r.Epoch)
	}
	return spec.StateURI
}

// holds reports whether this provider holds workload id at epoch now (a
// Holding state, as the machine last reported it).
func (d *durables) holds(id string, epoch uint64) (held bool) {
	d.books.with(func(b *durableBooks) {
		e, ok := b.holding[id]
		held = ok && e == epoch
	})
	return held
}

// noteState follows the machine's transitions (machine goroutine): which
// epoch of which workload this provider holds.
func (d *durables) noteState(e lease.EnteredState) {
	d.books.with(func(b *durableBooks) {
		if e.To.Holding() {
			b.holding[e.ID] = e.Epoch
			return
		}
		delete(b.holding, e.ID)
		if e.To.Terminal() {
			delete(b.last, e.ID)
			delete(b.parents, e.ID)
			delete(b.keys, e.ID)
			if d.publisher != nil {
				d.publisher.Forget(e.ID)
			}
		}
	})
}

// checkpointKey is the checkpoint key of spec's grant, opened once per
// grant: nil when the grant has none (its checkpoints are plaintext), an
// error when this provider cannot open it (then nothing of the workload is
// published, and a restore fails naming it). The grant's issuer sealed it
// to this provider with NIP-44; a lease does not name its issuer, so this
// provider's own key (the grants its operator queues) and every trusted
// issuer are tried.
func (d *durables) checkpointKey(spec lease.Spec) (key *checkpoint.Key, err error) {
	p := spec.Checkpoint
	if p == nil || len(p.Keys) == 0 {
		return nil, nil
	}
	g := spec.CreatedAt.Unix()
	d.books.with(func(b *durableBooks) {
		k, ok := b.keys[spec.ID]
		if !ok || k.grant != g {
			k = grantKey{grant: g}
			opened, err := checkpoint.OpenGrantKey(d.env.keys, p.Keys, append([]string{d.env.self}, d.env.issuers...))
			if err != nil {
				k.err = fmt.Errorf("%s: %w", spec.ID, err)
			} else {
				k.key = &opened
			}
			b.keys[spec.ID] = k
		}
		key, err = k.key, k.err
	})
	return key, err
}

// durableWorkload reports whether the workload's tiles are uploaded by
// its lease's own publishes (the global upload loop leaves them).
func (d *durables) durableWorkload(id string) (durable bool) {
	d.books.with(func(b *durableBooks) { durable = b.durable[id] })
	return durable
}

// published records a checkpoint published: the revocation of its epoch
// names it, also after a restart.
func (d *durables) published(ctx context.Context, pub checkpoint.Published) {
	met := d.env.met
	met.ckptPublished.WithLabelValues("published").Inc()
	met.blobDeletes.WithLabelValues("deleted").Add(float64(pub.Deleted))
	met.blobDeletes.WithLabelValues("failed").Add(float64(pub.DeleteFailed))
	d.setStateURI(pub.Workload, pub.GrantAt, pub.Epoch, pub.StateURI)
	d.saveCheckpoint(ctx, agentdb.CheckpointRow{Workload: pub.Workload, GrantAt: pub.GrantAt, Epoch: pub.Epoch, Seq: pub.Seq,
		EventID: pub.EventID, StateURI: pub.StateURI, CreatedAt: pub.CreatedAt})
}

// saveCheckpoint writes the workload's ledger row (a failure is logged:
// the row only matters after a restart).
func (d *durables) saveCheckpoint(ctx context.Context, row agentdb.CheckpointRow) {
	if err := d.env.ledger.PutCheckpoint(context.WithoutCancel(ctx), row); err != nil {
		d.env.logger.Error("record the checkpoint in the ledger", "workload", row.Workload, "epoch", row.Epoch, "err", err)
	}
}

// heldStateURI is the checkpoint epoch of id stands on, whatever its
// grant (for /status).
func (d *durables) heldStateURI(id string, epoch uint64) (uri string) {
	d.books.with(func(b *durableBooks) {
		if cur := b.last[id]; cur.epoch == epoch {
			uri = cur.uri
		}
	})
	return uri
}

// observeCheckpointAge sets agent_checkpoint_age_seconds: the oldest last
// published checkpoint among the watched workloads (since the watch began
// for one that published none at its epoch yet).
func (d *durables) observeCheckpointAge(now time.Time) {
	if d.publisher == nil {
		return
	}
	type watch struct {
		epoch uint64
		since time.Time
	}
	var ws map[string]watch
	d.books.with(func(b *durableBooks) {
		ws = make(map[string]watch, len(b.watched))
		for id, job := range b.watched {
			ws[id] = watch{epoch: job.Epoch, since: b.watchedAt[id]}
		}
	})
	var oldest time.Duration
	for id, w := range ws {
		at := w.since
		if last, ok := d.publisher.Last(id); ok && last.Epoch == w.epoch && last.TakenAt.After(at) {
			at = last.TakenAt
		}
		oldest = max(oldest, now.Sub(at))
	}
	d.env.met.ckptAge.Set(oldest.Seconds())
}
