package checkpoint

import (
	"context"
	"sync"
	"time"
)

// DefaultPollInterval is how often a Watcher looks at each directory.
const DefaultPollInterval = 250 * time.Millisecond

// Change is a new version of a workload's checkpoint.
type Change struct {
	Workload string
	Epoch    uint64
	Dir      string
	Info     Info
}

// Watcher notices new checkpoints by polling: one stat of FileName per
// watched workload per interval, reporting a version whose FileID differs
// from the last one seen. Polling, not inotify: the exact-name rule makes
// a poll one system call; it works on every file system a checkpoint
// directory may live on (bind mounts, overlay, network file systems, where
// inotify may report nothing) with no watch limits or queue overflows to
// recover from; it costs up to one interval of recovery point. Writes in
// place (the same inode) are never reported: the contract is to rename.
//
// Reports are coalesced: a workload has at most one pending Change, the
// newest; Ready signals that Take has something.
type Watcher struct {
	every time.Duration

	mu      sync.Mutex
	watched map[string]*watched
	pending map[string]Change
	ready   chan struct{}
}

type watched struct {
	epoch uint64
	dir   string
	last  FileID
}

// NewWatcher polls every interval (DefaultPollInterval when <= 0).
func NewWatcher(every time.Duration) *Watcher {
	if every <= 0 {
		every = DefaultPollInterval
	}
	return &Watcher{every: every, watched: map[string]*watched{}, pending: map[string]Change{}, ready: make(chan struct{}, 1)}
}

// Watch starts (or moves) watching workload's checkpoint at epoch in dir;
// known is the version already handled there (a restored checkpoint, or
// the zero FileID), which is not reported.
func (w *Watcher) Watch(workload string, epoch uint64, dir string, known FileID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.watched[workload] = &watched{epoch: epoch, dir: dir, last: known}
	delete(w.pending, workload)
}

// Unwatch stops watching workload and drops its pending Change.
func (w *Watcher) Unwatch(workload string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.watched, workload)
	delete(w.pending, workload)
}

// Ready is signalled when Take has something.
func (w *Watcher) Ready() <-chan struct{} { return w.ready }

// Take returns the pending Changes and clears them.
func (w *Watcher) Take() []Change {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Change, 0, len(w.pending))
	for _, c := range w.pending {
		out = append(out, c)
	}
	clear(w.pending)
	return out
}

// Poll looks at every watched directory once.
func (w *Watcher) Poll() {
	w.mu.Lock()
	dirs := make(map[string]watched, len(w.watched))
	for id, x := range w.watched {
		dirs[id] = *x
	}
	w.mu.Unlock()
	found := false
	for id, x := range dirs {
		info, err := Stat(x.dir)
		if err != nil || info.ID == x.last {
			continue // none yet, or the version already seen
		}
		w.mu.Lock()
		if cur := w.watched[id]; cur != nil && cur.epoch == x.epoch && cur.dir == x.dir {
			cur.last = info.ID
			w.pending[id] = Change{Workload: id, Epoch: x.epoch, Dir: x.dir, Info: info}
			found = true
		}
		w.mu.Unlock()
	}
	if found {
		select {
		case w.ready <- struct{}{}:
		default:
		}
	}
}

// Run polls until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Poll()
		}
	}
}
