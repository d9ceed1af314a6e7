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
	"provideragent/uploader"
)

// leaseUploader is the uploader of a lease's server set with K, built
// once per set.
func (a *Agent) leaseUploader(servers []string, k int) (uploader.Uploader, error) {
	key := strconv.Itoa(k) + " " + strings.Join(servers, " ")
	a.ckpt.mu.Lock()
	defer a.ckpt.mu.Unlock()
	if up := a.ckpt.uploaders[key]; up != nil {
		return up, nil
	}
	cfg := a.ckpt.deps.Uploader
	cfg.Servers, cfg.MinReplicas = slices.Clone(servers), k
	up, err := uploader.BuildUploader(cfg, uploader.Deps{Store: a.ckpt.deps.Store, SecretKey: a.cfg.SecretKey, Logger: a.logger, Metrics: a.ckpt.deps.Metrics})
	if err != nil {
		return nil, err
	}
	a.ckpt.uploaders[key] = up
	return up, nil
}

// watchCheckpoints starts looking for new checkpoints of a durable
// workload started at epoch (machine goroutine, at its StartWorkload).
func (a *Agent) watchCheckpoints(id string, epoch uint64) {
	if a.ckpt.watcher == nil {
		return
	}
	w, ok := a.machine().Workload(id)
	if !ok || w.Spec.Checkpoint == nil {
		return
	}
	cp, ok := a.work.backend.(backend.Checkpointer)
	if !ok {
		return
	}
	dir, err := cp.CheckpointDir(id, epoch)
	if err != nil {
		a.logger.Error("checkpoint directory", "workload", id, "epoch", epoch, "err", err)
		return
	}
	key, err := a.checkpointKey(w.Spec)
	if err != nil {
		// Never in plaintext what the grant says to seal.
		a.logger.Error("checkpoints not published: the grant's checkpoint key cannot be opened here", "workload", id, "epoch", epoch, "err", err)
		a.emit("checkpoint", id, "checkpoints of epoch %d not published: %v", epoch, err)
		return
	}
	p := w.Spec.Checkpoint
	job := checkpoint.PublishJob{
		Workload: id, Epoch: epoch, Dir: checkpoint.Dir{Path: dir.Path, UID: dir.UID, GID: dir.GID},
		Servers: p.Servers, MinServers: p.MinServers, GrantAt: w.Spec.CreatedAt, Key: key,
	}
	if len(job.Servers) == 0 {
		job.Servers, job.MinServers = a.ckpt.deps.Servers, 0
	}
	a.exportServers(job.Servers)
	a.ckpt.mu.Lock()
	if par := a.ckpt.parents[id]; par.epoch == epoch && par.grant == w.Spec.CreatedAt.Unix() {
		job.Parent = par.uri
	}
	a.ckpt.watched[id] = job
	a.ckpt.watchedAt[id] = a.now()
	a.ckpt.durable[id] = true
	a.ckpt.mu.Unlock()
	// The file already there (restored, or the newest local checkpoint of
	// a restarted run) is published too: the epoch's first record names
	// the state it started from.
	a.ckpt.watcher.Watch(id, epoch, dir.Path, checkpoint.FileID{})
}

// unwatchCheckpoints stops publishing the workload's checkpoints and
// cancels a publish in flight (a stop never waits for one).
func (a *Agent) unwatchCheckpoints(id string) {
	if a.ckpt.watcher == nil {
		return
	}
	a.ckpt.watcher.Unwatch(id)
	a.ckpt.mu.Lock()
	delete(a.ckpt.watched, id)
	delete(a.ckpt.watchedAt, id)
	if cancel := a.ckpt.busy[id]; cancel != nil {
		cancel()
	}
	a.ckpt.mu.Unlock()
}

// checkpointLoop polls the watched checkpoint directories and publishes
// each new checkpoint, paced (checkpoint.Pacer): one publish per workload
// at a time, starts at least a second apart, and of the checkpoints
// written meanwhile only the newest, until ctx ends.
func (a *Agent) checkpointLoop(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.ckpt.watcher.Run(ctx)
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
			a.ckpt.mu.Lock()
			delete(a.ckpt.busy, id)
			a.ckpt.mu.Unlock()
			pacer.Done(id)
		case <-a.ckpt.watcher.Ready():
			for _, c := range a.ckpt.watcher.Take() {
				pacer.Offer(c)
			}
		case <-wake.C:
		}
		now := a.now()
		for _, c := range pacer.Due(now) {
			if !a.startPublish(ctx, &wg, c, finished) {
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
func (a *Agent) startPublish(ctx context.Context, wg *sync.WaitGroup, c checkpoint.Change, finished chan<- string) bool {
	a.ckpt.mu.Lock()
	job, ok := a.ckpt.watched[c.Workload]
	if !ok || job.Epoch != c.Epoch {
		a.ckpt.mu.Unlock()
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, a.ckpt.deps.PublishTimeout)
	a.ckpt.busy[c.Workload] = cancel
	a.ckpt.mu.Unlock()
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
		a.publishCheckpoint(pctx, job)
	}()
	return true
}

// publishCheckpoint publishes the workload's current checkpoint.
func (a *Agent) publishCheckpoint(ctx context.Context, job checkpoint.PublishJob) {
	start := time.Now()
	pub, err := a.ckpt.publisher.Publish(ctx, job)
	log := a.logger.With("workload", job.Workload, "epoch", job.Epoch, "took", time.Since(start).Round(time.Millisecond))
	switch {
	case err == nil:
		a.published(ctx, pub)
		log.Info("checkpoint published", "seq", pub.Seq, "bytes", pub.Size, "record", pub.EventID,
			"servers", len(pub.Servers), "relays", len(pub.Relays), "state_uri", pub.StateURI)
		a.emit("checkpoint", job.Workload, "checkpoint epoch %d seq %d published (%d bytes on %d servers, record on %d relays)",
			job.Epoch, pub.Seq, pub.Size, len(pub.Servers), len(pub.Relays))
	case errors.Is(err, checkpoint.ErrNotHolder), errors.Is(err, context.Canceled):
		a.obs.met.ckptPublished.WithLabelValues("abandoned").Inc()
		log.Info("checkpoint not published: no longer held here at its epoch", "err", err)
	default:
		a.obs.met.ckptPublished.WithLabelValues("failed").Inc()
		log.Warn("checkpoint not published", "err", err)
	}
}
