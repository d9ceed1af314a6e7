package checkpoint

import (
	"context"
	"errors"
	"sync"
	"time"

	"provideragent/uploader"
)

// BlobDeleter deletes a blob this provider stored from one Blossom server
// (BUD-12; uploader.Deleter). An error wrapping uploader.ErrDeleteRefused
// is final; any other is retried at the next publish.
type BlobDeleter interface {
	Delete(ctx context.Context, server, sha string) error
}

var _ BlobDeleter = uploader.Deleter{}

// keptCheckpoints is how many of a workload's newest acknowledged
// checkpoints keep their blobs on the servers: the newest, which a
// restore takes, and the one before, which a revocation built while the
// newest was being announced may still name.
const keptCheckpoints = 2

// Bounds of deleting superseded blobs: requests at once, and copies whose
// delete failed that are remembered for the next publish.
const (
	deleteConcurrency = 8
	maxUndeleted      = 4096
)

// superseded is what the Publisher remembers to delete superseded blobs:
// per workload, this run's acknowledged checkpoints of its epoch (oldest
// first), the blobs of the checkpoint that epoch was restored from, and
// the copies whose delete failed.
type superseded struct {
	hist      map[string][]Published
	named     map[string]map[uint64]time.Time // by workload: when a heartbeat last named each seq (of hist's epoch)
	protected map[string]protectedBlobs
	undeleted map[string][]uploader.Placement
	locks     map[string]chan struct{}
}

type protectedBlobs struct {
	epoch uint64
	blobs map[string]bool
}

// Protect keeps the blobs of the checkpoint workload's epoch was restored
// from (its manifest and tiles) on the servers: the revocation that handed
// the workload over names it, and the epoch's own first checkpoint, the
// same state sealed again, may share its blobs.
func (p *Publisher) Protect(workload string, epoch uint64, blobs []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sup.protected == nil {
		p.sup.protected = map[string]protectedBlobs{}
	}
	set := make(map[string]bool, len(blobs))
	for _, b := range blobs {
		set[b] = true
	}
	p.sup.protected[workload] = protectedBlobs{epoch: epoch, blobs: set}
}

// Named is Last, for a heartbeat that names the checkpoint as its
// holder's newest (the evidence a standby's required restore never goes
// behind): the checkpoint's blobs stay on the servers for NamedFor after
// this, even once superseded, so that a standby holding that heartbeat
// can still fetch what it names.
func (p *Publisher) Named(workload string) (Published, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, ok := p.last[workload]
	if ok && p.NamedFor > 0 {
		if p.sup.named == nil {
			p.sup.named = map[string]map[uint64]time.Time{}
		}
		m := p.sup.named[workload]
		if m == nil {
			m = map[uint64]time.Time{}
			p.sup.named[workload] = m
		}
		m[l.Seq] = p.now()
	}
	return l, ok
}

// Forget drops what the Publisher remembers of workload's checkpoints
// beyond the last one (the workload ended here).
func (p *Publisher) Forget(workload string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.sup.hist, workload)
	delete(p.sup.named, workload)
	delete(p.sup.protected, workload)
	delete(p.sup.undeleted, workload)
}

// lock serialises the publishes of workload (with their deletes): a
// planned move's final publish never overlaps one the checkpoint loop
// still finishes, so a blob a publish in flight needs again is never
// deleted under it.
func (p *Publisher) lock(ctx context.Context, workload string) (func(), error) {
	p.mu.Lock()
	if p.sup.locks == nil {
		p.sup.locks = map[string]chan struct{}{}
	}
	ch := p.sup.locks[workload]
	if ch == nil {
		ch = make(chan struct{}, 1)
		p.sup.locks[workload] = ch
	}
	p.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// deleteSuperseded records pub, acknowledged, among the workload's
// checkpoints and deletes from the servers the blobs of those it
// superseded (all but the keptCheckpoints newest and those a heartbeat
// named within NamedFor) that no kept checkpoint uses and the epoch was
// not restored from, on every server they were
// placed on, while this provider still holds the workload at pub's epoch
// (a fenced holder's revocation may name any of them). Copies whose
// delete failed are tried again at the next publish. It returns how many
// copies were deleted and how many failed, and the blobs kept.
func (p *Publisher) deleteSuperseded(ctx context.Context, job PublishJob, pub Published) (deleted, failed int, kept []string) {
	w := pub.Workload
	p.mu.Lock()
	if p.sup.hist == nil {
		p.sup.hist, p.sup.undeleted = map[string][]Published{}, map[string][]uploader.Placement{}
	}
	h := p.sup.hist[w]
	if len(h) > 0 && h[0].Epoch != pub.Epoch {
		h = nil // another epoch: its checkpoints are not this one's to supersede
		delete(p.sup.named, w)
	}
	h = append(h, pub)
	var old, stay []Published
	now := p.now()
	for i, c := range h {
		at, named := p.sup.named[w][c.Seq]
		switch {
		case i >= len(h)-keptCheckpoints:
			stay = append(stay, c)
		case named && now.Sub(at) < p.NamedFor:
			stay = append(stay, c) // a heartbeat named it lately
		default:
			old = append(old, c)
			delete(p.sup.named[w], c.Seq)
		}
	}
	h = stay
	p.sup.hist[w] = h
	keep := map[string]bool{}
	for _, c := range h {
		for _, b := range c.Blobs {
			keep[b] = true
		}
	}
	if pr, ok := p.sup.protected[w]; ok && pr.epoch == pub.Epoch {
		for b := range pr.blobs {
			keep[b] = true
		}
	}
	retry := p.sup.undeleted[w]
	delete(p.sup.undeleted, w)
	p.mu.Unlock()
	for b := range keep {
		kept = append(kept, b)
	}
	if p.Deleter == nil || (len(old) == 0 && len(retry) == 0) {
		return 0, 0, kept
	}
	gone := map[string]bool{}
	for _, c := range old {
		for _, b := range c.Blobs {
			if !keep[b] {
				gone[b] = true
			}
		}
	}
	var targets []uploader.Placement
	seen := map[uploader.Placement]bool{}
	add := func(pl uploader.Placement) {
		k := uploader.Placement{SHA256: pl.SHA256, Server: pl.Server}
		if !keep[pl.SHA256] && !seen[k] {
			seen[k] = true
			targets = append(targets, k)
		}
	}
	for _, pl := range retry {
		add(pl)
	}
	if len(gone) > 0 {
		placed, err := p.Store.Placements(ctx, w)
		if err != nil {
			p.logger().Warn("superseded checkpoint blobs not deleted: their placements", "workload", w, "err", err)
		}
		for _, pl := range placed {
			if gone[pl.SHA256] {
				add(pl)
			}
		}
	}
	if len(targets) == 0 || job.Final || !p.Holds(w, pub.Epoch) {
		p.remember(w, targets) // a final publish hands over at once; a fenced one deletes nothing
		return 0, 0, kept
	}
	var mu sync.Mutex
	var again []uploader.Placement
	sem := make(chan struct{}, deleteConcurrency)
	var wg sync.WaitGroup
	for _, t := range targets {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := p.Deleter.Delete(ctx, t.Server, t.SHA256)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				deleted++
			case errors.Is(err, uploader.ErrDeleteRefused):
				failed++
				p.logger().Warn("superseded checkpoint blob not deleted: the server refused", "workload", w, "server", t.Server, "blob", t.SHA256, "err", err)
			default:
				failed++
				again = append(again, t)
				p.logger().Debug("superseded checkpoint blob not deleted, retried at the next publish", "workload", w, "server", t.Server, "blob", t.SHA256, "err", err)
			}
		}()
	}
	wg.Wait()
	p.remember(w, again)
	return deleted, failed, kept
}

// remember keeps copies to delete at the workload's next publish (the
// oldest dropped beyond maxUndeleted: they stay on their servers).
func (p *Publisher) remember(workload string, copies []uploader.Placement) {
	if len(copies) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	u := append(p.sup.undeleted[workload], copies...)
	if len(u) > maxUndeleted {
		u = u[len(u)-maxUndeleted:]
	}
	p.sup.undeleted[workload] = u
}
