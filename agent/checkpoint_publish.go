package agent

// Publishing a durable workload's new checkpoints: its run's directory is
// watched from its start to its stop, and each new checkpoint is uploaded
// to the lease's servers and announced on the relays, one publish per
// workload at a time.

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"provideragent/backend"
	"provideragent/checkpoint"
	"provideragent/lease"
	"provideragent/uploader"
)

// leaseUploader is the uploader of a lease's server set with K, built
// once per set; secretKey authorizes its uploads.
func (d *durables) leaseUploader(servers []string, k int, secretKey string) (up uploader.Uploader, err error) {
	key := strconv.Itoa(k) + " " + strings.Join(servers, " ")
	d.books.with(func(b *durableBooks) {
		if up = b.uploaders[key]; up != nil {
			return
		}
		cfg := d.deps.Uploader
		cfg.Servers, cfg.MinReplicas = slices.Clone(servers), k
		if up, err = uploader.BuildUploader(cfg, uploader.Deps{Store: d.deps.Store, SecretKey: secretKey, Logger: d.env.logger, Metrics: d.deps.Metrics}); err == nil {
			b.uploaders[key] = up
		}
	})
	return up, err
}

// watch starts looking for new checkpoints of durable workload w started
// at epoch (machine goroutine, at its StartWorkload).
func (d *durables) watch(w lease.WorkloadSnapshot, epoch uint64) {
	if d.watcher == nil || w.Spec.Checkpoint == nil {
		return
	}
	id := w.Spec.ID
	cp, ok := d.env.backend.(backend.Checkpointer)
	if !ok {
		return
	}
	dir, err := cp.CheckpointDir(id, epoch)
	if err != nil {
		d.env.logger.Error("checkpoint directory", "workload", id, "epoch", epoch, "err", err)
		return
	}
	key, err := d.checkpointKey(w.Spec)
	if err != nil {
		// Never in plaintext what the grant says to seal.
		d.env.logger.Error("checkpoints not published: the grant's checkpoint key cannot be opened here", "workload", id, "epoch", epoch, "err", err)
		d.env.emit("checkpoint", id, "checkpoints of epoch %d not published: %v", epoch, err)
		return
	}
	p := w.Spec.Checkpoint
	job := checkpoint.PublishJob{
		Workload: id, Epoch: epoch, Dir: checkpoint.Dir{Path: dir.Path, UID: dir.UID, GID: dir.GID},
		Servers: p.Servers, MinServers: p.MinServers, GrantAt: w.Spec.CreatedAt, Key: key,
	}
	if len(job.Servers) == 0 {
		job.Servers, job.MinServers = d.deps.Servers, 0
	}
	d.exportServers(job.Servers)
	d.books.with(func(b *durableBooks) {
		if par := b.parents[id]; par.epoch == epoch && par.grant == w.Spec.CreatedAt.Unix() {
			job.Parent = par.uri
		}
		b.watched[id] = job
		b.watchedAt[id] = d.env.now()
		b.durable[id] = true
	})
	// The file already there (restored, or the newest local checkpoint of
	// a restarted run) is published too: the epoch's first record names
	// the state it started from.
	d.watcher.Watch(id, epoch, dir.Path, checkpoint.FileID{})
}

// unwatch stops publishing the workload's checkpoints and cancels a
// publish in flight (a stop never waits for one).
func (d *durables) unwatch(id string) {
	if d.watcher == nil {
		return
	}
	d.watcher.Unwatch(id)
	d.books.with(func(b *durableBooks) {
		delete(b.watched, id)
		delete(b.watchedAt, id)
		if cancel := b.busy[id]; cancel != nil {
			cancel()
		}
	})
}

// run polls the watched checkpoint directories and publishes
// each new checkpoint, paced (checkpoint.Pacer): one publish per workload
// at a time, starts at least a second apart, and of the checkpoints
// written meanwhile only the newest, until ctx ends.
func (d *durables) run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.watcher.Run(ctx)
	}()
	pacer := checkpoint.NewPacer(checkpoint.DefaultPublishEvery)
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	finished := make(chan string, 64)
	for {
		select {
		case <-ctx.Done():
			return nil
		case id := <-finished:
			d.books.with(func(b *durableBooks) { delete(b.busy, id) })
			pacer.Done(id)
		case <-d.watcher.Ready():
			for _, c := range d.watcher.Take() {
				pacer.Offer(c)
			}
		case <-wake.C:
		}
		now := d.env.now()
		for _, c := range pacer.Due(now) {
			if !d.startPublish(ctx, &wg, c, finished) {
				pacer.Done(c.Workload)
			}
		}
		wake.Stop()
		if at := pacer.Wake(); !at.IsZero() {
			wake.Reset(max(at.Sub(now), time.Millisecond))
		}
	}
}

// startPublish starts publishing the workload's current checkpoint; false
// when it is no longer watched at c's epoch (nothing started).
func (d *durables) startPublish(ctx context.Context, wg *sync.WaitGroup, c checkpoint.Change, finished chan<- string) bool {
	var job checkpoint.PublishJob
	var pctx context.Context
	var cancel context.CancelFunc
	d.books.with(func(b *durableBooks) {
		j, ok := b.watched[c.Workload]
		if !ok || j.Epoch != c.Epoch {
			return
		}
		job = j
		pctx, cancel = context.WithTimeout(ctx, d.deps.PublishTimeout)
		b.busy[c.Workload] = cancel
	})
	if cancel == nil {
		return false
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			cancel()
			select {
			case finished <- c.Workload:
			case <-ctx.Done():
			}
		}()
		d.publish(pctx, job)
	}()
	return true
}

// publish publishes the workload's current checkpoint.
func (d *durables) publish(ctx context.Context, job checkpoint.PublishJob) {
	start := time.Now()
	pub, err := d.publisher.Publish(ctx, job)
	log := d.env.logger.With("workload", job.Workload, "epoch", job.Epoch, "took", time.Since(start).Round(time.Millisecond))
	switch {
	case err == nil:
		d.published(ctx, pub)
		log.Info("checkpoint published", "seq", pub.Seq, "bytes", pub.Size, "record", pub.EventID,
			"servers", len(pub.Servers), "relays", len(pub.Relays), "state_uri", pub.StateURI)
		d.env.emit("checkpoint", job.Workload, "checkpoint epoch %d seq %d published (%d bytes on %d servers, record on %d relays)",
			job.Epoch, pub.Seq, pub.Size, len(pub.Servers), len(pub.Relays))
	case errors.Is(err, checkpoint.ErrNotHolder), errors.Is(err, context.Canceled):
		d.env.met.ckptPublished.WithLabelValues("abandoned").Inc()
		log.Info("checkpoint not published: no longer held here at its epoch", "err", err)
	default:
		d.env.met.ckptPublished.WithLabelValues("failed").Inc()
		log.Warn("checkpoint not published", "err", err)
	}
}
