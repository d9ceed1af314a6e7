package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/relay"
	"provideragent/uploader"
)

// RecordPublisher publishes an event on the lease's relays and returns
// once need of them accepted it (the agent's RelayPool).
type RecordPublisher interface {
	PublishQuorum(ctx context.Context, ev *nostr.Event, need int) relay.PublishResult
}

// UploaderFor returns the uploader that places a workload's blobs on
// servers, an upload counting once minServers of them stored it.
type UploaderFor func(servers []string, minServers int) (uploader.Uploader, error)

// ErrNotHolder means a checkpoint was not published because this provider
// no longer holds the workload at the checkpoint's epoch (a fence came
// first): only the current holder at its epoch may publish.
var ErrNotHolder = errors.New("checkpoint: not the workload's holder at that epoch")

// PublishJob is one checkpoint to publish: the file in Dir of a workload
// held at Epoch.
type PublishJob struct {
	Workload string
	Epoch    uint64
	// Dir is the run's checkpoint directory; UID its user (< 0: any owner).
	Dir Dir
	// Servers are the Blossom servers of the lease; MinServers is K (0:
	// all of them).
	Servers    []string
	MinServers int
	// GrantAt binds the record to the lease grant.
	GrantAt time.Time
	// Parent is the record the epoch's state was restored from, the
	// parent of its first record ("" when none).
	Parent string
	// Final marks the checkpoint written after the process exited in a
	// planned stop.
	Final bool
	// Key is the grant's checkpoint key: the tiles and the manifest are
	// stored sealed with it. nil: stored in plaintext (a grant without a
	// key, such as one Paygress made).
	Key *Key
}

// Published is a checkpoint whose blobs are on K servers and whose record
// M relays accepted.
type Published struct {
	Workload  string
	Epoch     uint64
	Seq       uint64
	EventID   string
	CreatedAt time.Time
	StateURI  string
	Manifest  string
	Size      int64
	TakenAt   time.Time
	Servers   []string
	Relays    []string
	File      FileID
	// Blobs are the manifest's and the tiles' hashes (this run's only).
	Blobs []string
	// GrantAt is the lease grant's time the record names.
	GrantAt time.Time
	// Deleted and DeleteFailed count the copies of superseded blobs this
	// publish deleted from the servers, or failed to.
	Deleted, DeleteFailed int
}

// Publisher publishes a workload's checkpoints: it tiles the file into
// the uploader's store, uploads the tiles and the manifest until every
// blob is on K of the lease's servers, and then, only if Holds still
// says this provider holds the workload at that epoch, signs the
// checkpoint record (kind 38387) and publishes it on M relays. It
// remembers the last record of each workload (seq, parent, created_at).
// Publish is safe for concurrent use, for different workloads.
type Publisher struct {
	Store    *uploader.Store
	Uploader UploaderFor
	Relays   RecordPublisher
	Keys     *identity.Keys
	// Quorum is M, the relays that must accept a record.
	Quorum int
	// TileSize cuts checkpoints (0: uploader.DefaultTileSize).
	TileSize int
	// MaxBytes bounds a checkpoint (<= 0: DefaultMaxBytes).
	MaxBytes int64
	// Holds reports whether this provider holds workload at epoch now.
	Holds func(workload string, epoch uint64) bool
	Now   func() time.Time
	// Sleep waits for d or until ctx ends (nil: a timer); a record is
	// never dated after the clock, and a publish waits for its second.
	Sleep  func(ctx context.Context, d time.Duration) error
	Logger *slog.Logger

	// Deleter deletes the blobs of superseded checkpoints from the
	// servers once a newer one is acknowledged (nil: they stay).
	Deleter BlobDeleter
	// NamedFor is how long a checkpoint a heartbeat named (Named) keeps
	// its blobs after it was superseded: as long as a standby may hold
	// that heartbeat as its newest evidence while this holder goes on
	// publishing (two heartbeat intervals and the relay delay).
	NamedFor time.Duration

	mu   sync.Mutex
	last map[string]Published
	sup  superseded
}

// Last is the last checkpoint published of workload (ok false: none since
// this Publisher began).
func (p *Publisher) Last(workload string) (Published, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.last[workload]
	return l, ok
}

// Remember sets the last checkpoint published of pub.Workload (one
// published before a restart): the next record continues its seq, names it
// as parent and is created after it.
func (p *Publisher) Remember(pub Published) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[string]Published{}
	}
	if cur, ok := p.last[pub.Workload]; !ok || cur.Epoch < pub.Epoch || (cur.Epoch == pub.Epoch && cur.Seq <= pub.Seq) {
		p.last[pub.Workload] = pub
	}
}

func (p *Publisher) logger() *slog.Logger {
	if p.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Logger
}

func (p *Publisher) now() time.Time {
	if p.Now == nil {
		return time.Now()
	}
	return p.Now()
}

// Publish publishes the checkpoint file of job. It returns ErrNotHolder
// (wrapped) when the workload is no longer held at job.Epoch, and other
// errors when the file could not be read (checkpoint.Open's refusals),
// stored on K servers or accepted by M relays.
func (p *Publisher) Publish(ctx context.Context, job PublishJob) (Published, error) {
	maxBytes := p.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	tile := p.TileSize
	if tile <= 0 {
		tile = uploader.DefaultTileSize
	}
	if len(job.Servers) == 0 {
		return Published{}, errors.New("publish checkpoint: no Blossom servers (the grant names none and uploader.servers is empty)")
	}
	k := job.MinServers
	if k <= 0 || k > len(job.Servers) {
		k = len(job.Servers)
	}
	unlock, err := p.lock(ctx, job.Workload)
	if err != nil {
		return Published{}, fmt.Errorf("publish checkpoint: %w", err)
	}
	defer unlock()
	st, err := p.store(ctx, job, tile, maxBytes)
	if err != nil {
		return Published{}, err
	}
	holding, err := p.upload(ctx, job, k, st.shas)
	if err != nil {
		return Published{}, err
	}
	pub, prev, err := p.announce(ctx, job, st, holding)
	if err != nil {
		return Published{}, err
	}
	var keep []string
	pub.Deleted, pub.DeleteFailed, keep = p.deleteSuperseded(ctx, job, pub)
	// The local copies (and placements) of the checkpoints whose blobs
	// went are no longer needed: keep those of the kept checkpoints and of
	// the one before this.
	keep = append(keep, prev.Blobs...)
	if n, err := p.Store.PruneUploaded(ctx, job.Workload, keep); err != nil {
		p.logger().Warn("prune old checkpoint tiles", "workload", job.Workload, "err", err)
	} else if n > 0 {
		p.logger().Debug("pruned old checkpoint tiles", "workload", job.Workload, "tiles", n)
	}
	return pub, nil
}

// stored is a checkpoint in the uploader's store, tiles and manifest,
// ready to upload.
type stored struct {
	m        uploader.Manifest // what is stored: the file's tiles, or their sealed copies
	size     int64             // the checkpoint's size (plaintext)
	info     Info              // the file read
	manifest string            // the manifest blob's hash
	mb       []byte            // the manifest blob
	shas     []string          // the manifest's and the tiles' hashes
}

// store reads the checkpoint in job.Dir (at most maxBytes), cuts it into
// tiles (sealed with job.Key when set) and stores them and their manifest
// blob in the uploader's store.
func (p *Publisher) store(ctx context.Context, job PublishJob, tile int, maxBytes int64) (stored, error) {
	f, err := Open(job.Dir.Path, job.Dir.UID, maxBytes)
	if err != nil {
		return stored{}, fmt.Errorf("publish checkpoint: %w", err)
	}
	// m is what is stored: the file's tiles, or their sealed copies.
	var m uploader.Manifest
	var sealed *sealingReader
	if job.Key != nil {
		tile = min(tile, uploader.MaxTileSize-SealOverhead)
		sealed = newSealingReader(*job.Key, f, tile)
		m, _, err = p.Store.AddFile(ctx, job.Workload, sealed, tile+SealOverhead)
	} else {
		m, _, err = p.Store.AddFile(ctx, job.Workload, f, tile)
	}
	if err == nil {
		err = f.Verify()
	}
	info := f.Info
	f.Close()
	if err != nil {
		return stored{}, fmt.Errorf("publish checkpoint: %w", err)
	}
	if m.Size == 0 {
		return stored{}, errors.New("publish checkpoint: the checkpoint is empty")
	}
	size := m.Size
	mb, err := json.Marshal(m)
	if sealed != nil {
		size = sealed.n
		mb, err = json.Marshal(sealedManifest{Manifest: m, Plain: plainFile{Size: sealed.n, SHA256: sealed.plainSHA256(), TileSize: tile}})
		mb = job.Key.seal(sealManifest, mb)
	}
	if err != nil {
		return stored{}, fmt.Errorf("publish checkpoint: %w", err)
	}
	if len(mb) > uploader.MaxTileSize {
		return stored{}, fmt.Errorf("publish checkpoint: manifest of %d bytes over one tile (%d)", len(mb), uploader.MaxTileSize)
	}
	mm, _, err := p.Store.AddFile(ctx, job.Workload, bytes.NewReader(mb), len(mb))
	if err != nil {
		return stored{}, fmt.Errorf("publish checkpoint: store manifest: %w", err)
	}
	manifest := mm.SHA256 // one tile: the blob's hash
	shas := []string{manifest}
	for _, t := range m.Tiles {
		shas = append(shas, t.SHA256)
	}
	return stored{m: m, size: size, info: info, manifest: manifest, mb: mb, shas: shas}, nil
}

// upload uploads the workload's pending blobs to job.Servers and returns
// the servers (as uploader.ServerKey) that hold every one of shas: at
// least k of them, or an error.
func (p *Publisher) upload(ctx context.Context, job PublishJob, k int, shas []string) ([]string, error) {
	up, err := p.Uploader(job.Servers, k)
	if err != nil {
		return nil, fmt.Errorf("publish checkpoint: %w", err)
	}
	_, upErr := up.UploadPending(ctx, uploader.Request{Workload: job.Workload})
	var holding []string
	for _, srv := range job.Servers {
		n, err := p.Store.Placed(ctx, job.Workload, shas, []string{srv})
		if err != nil {
			return nil, fmt.Errorf("publish checkpoint: %w", err)
		}
		if n == 1 {
			holding = append(holding, uploader.ServerKey(srv))
		}
	}
	if len(holding) < k {
		return nil, fmt.Errorf("publish checkpoint: every blob on %d of %d servers, need %d (upload: %v)", len(holding), len(job.Servers), k, upErr)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("publish checkpoint: %w", context.Cause(ctx))
	}
	return holding, nil
}

// announce signs the checkpoint's record, next after the workload's last
// one (prev), and publishes it on Quorum relays, only while Holds says
// this provider holds the workload at job.Epoch; it remembers the record
// as the workload's last.
func (p *Publisher) announce(ctx context.Context, job PublishJob, st stored, holding []string) (pub, prev Published, err error) {
	m, size, info, manifest, mb, shas := st.m, st.size, st.info, st.manifest, st.mb, st.shas
	// One publish of a workload at a time (lock): the last record read
	// here is still the last when this one is stored.
	p.mu.Lock()
	prev, had := p.last[job.Workload]
	p.mu.Unlock()
	rec := heartbeat.CheckpointRecord{
		WorkloadID: job.Workload, Epoch: job.Epoch, Seq: 1, Manifest: manifest, ManifestSize: int64(len(mb)),
		Size: m.Size, SHA256: m.SHA256, Servers: holding, GrantAt: job.GrantAt, Parent: job.Parent, Final: job.Final,
		StateURI: uploader.BlossomURI(manifest, "json", holding, p.Keys.PublicKey(), int64(len(mb))),
	}
	created := p.now().Truncate(time.Second)
	if had {
		rec.Parent = prev.EventID
		if prev.Epoch == job.Epoch {
			rec.Seq = prev.Seq + 1
			// Relays keep the newest record of an epoch: created_at rises.
			// Never date a record after the clock: wait for its second;
			// but a planned move's final record may be a second ahead
			// rather than hold the handover up.
			ahead := time.Duration(0)
			if job.Final {
				ahead = time.Second
			}
			if created, err = p.recordTime(ctx, prev.CreatedAt.Add(time.Second), ahead); err != nil {
				return Published{}, Published{}, fmt.Errorf("publish checkpoint: %w", err)
			}
		}
	}
	rec.TakenAt = info.ModTime
	if rec.TakenAt.After(created.Add(time.Second-time.Millisecond)) || rec.TakenAt.Before(time.UnixMilli(1)) {
		rec.TakenAt = created
	}
	if !p.Holds(job.Workload, job.Epoch) {
		return Published{}, Published{}, fmt.Errorf("publish checkpoint of %s epoch %d: %w", job.Workload, job.Epoch, ErrNotHolder)
	}
	ev, err := heartbeat.BuildCheckpointRecord(p.Keys, rec, created)
	if err != nil {
		return Published{}, Published{}, fmt.Errorf("publish checkpoint: %w", err)
	}
	res := p.Relays.PublishQuorum(ctx, ev, p.Quorum)
	if len(res.Accepted) < p.Quorum {
		return Published{}, Published{}, fmt.Errorf("publish checkpoint record %s: accepted by %d relays, need %d", ev.ID, len(res.Accepted), p.Quorum)
	}
	pub = Published{
		Workload: job.Workload, Epoch: job.Epoch, Seq: rec.Seq, EventID: ev.ID, CreatedAt: created,
		StateURI: rec.StateURI, Manifest: manifest, Size: size, TakenAt: rec.TakenAt, Servers: holding,
		Relays: res.Accepted, File: info.ID, Blobs: shas, GrantAt: job.GrantAt,
	}
	p.mu.Lock()
	if p.last == nil {
		p.last = map[string]Published{}
	}
	p.last[job.Workload] = pub
	p.mu.Unlock()
	return pub, prev, nil
}

// maxRecordWait bounds how long a publish waits for the clock to reach
// the second its record must be dated (after its previous record's). The
// publishes of a workload are paced a second apart, so the wait is rare
// and shorter than a second; longer means the clock was set back, and the
// record is then dated ahead of it rather than held up.
const maxRecordWait = 2 * time.Second

// recordTime returns the created_at of a record that must be dated at or
// after notBefore: the clock's second, once the clock reached notBefore
// (waiting for it up to maxRecordWait), else notBefore; a record may be
// dated up to ahead after the clock without waiting.
func (p *Publisher) recordTime(ctx context.Context, notBefore time.Time, ahead time.Duration) (time.Time, error) {
	now := p.now()
	if wait := notBefore.Sub(now); wait > ahead {
		if wait > maxRecordWait {
			p.logger().Warn("checkpoint record dated ahead of the clock: the previous record is later than the clock allows (was the clock set back?)",
				"ahead", wait.Round(time.Millisecond))
			return notBefore, nil
		}
		if err := p.sleep(ctx, wait); err != nil {
			return time.Time{}, err
		}
		now = p.now()
	}
	return maxTime(now.Truncate(time.Second), notBefore), nil
}

func (p *Publisher) sleep(ctx context.Context, d time.Duration) error {
	if p.Sleep != nil {
		return p.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
