package agent

import (
	"sync"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/internal/fifo"
	"provideragent/lease"
)

// ownBeats remembers the heartbeat events this agent published in the last
// stale window, by id, with what the machine needs of them. Their copies
// coming back from the relays (the proof of this provider's own quorum, one
// per shard, relay and beat: at 100,000 workloads about 100 events of 60
// KiB from each relay every interval) are then fed without being parsed,
// verified or decoded: the machine reads nothing of its own heartbeats but
// the relay, created_at and shard. A relay that answers a known id with
// other content could as well have served the real event, which it has.
type ownBeats struct {
	mu    sync.RWMutex
	byID  map[string]ownBeat
	order fifo.Queue[ownEntry] // oldest first, for pruning
}

type ownBeat struct {
	created       time.Time
	shard, shards int
}

type ownEntry struct {
	id      string
	created time.Time
}

func newOwnBeats() *ownBeats { return &ownBeats{byID: map[string]ownBeat{}} }

// add records every event of a beat.
func (o *ownBeats) add(b heartbeat.Beat) {
	o.mu.Lock()
	defer o.mu.Unlock()
	shards := len(b.Stored)
	for i, ev := range b.Stored {
		o.put(ev, i, shards)
	}
	if b.Ephemeral != nil {
		o.put(b.Ephemeral, 0, shards)
	}
}

func (o *ownBeats) put(ev *nostr.Event, shard, shards int) {
	created := time.Unix(int64(ev.CreatedAt), 0).UTC()
	o.byID[ev.ID] = ownBeat{created: created, shard: shard, shards: shards}
	o.order.Push(ownEntry{id: ev.ID, created: created})
}

// known reports whether id is one of our recent heartbeat events
// (relay.Options.Known).
func (o *ownBeats) known(id string) bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	_, ok := o.byID[id]
	return ok
}

// input is the machine input for relay's copy of our event id, received at
// now; ok is false for an id we do not know.
func (o *ownBeats) input(self, id, relay string, now time.Time) (lease.Heartbeat, bool) {
	o.mu.RLock()
	b, ok := o.byID[id]
	o.mu.RUnlock()
	if !ok {
		return lease.Heartbeat{}, false
	}
	return lease.Heartbeat{
		Provider: self, Relay: relay, EventID: id, CreatedAt: b.created, ReceivedAt: now,
		Listed: true, Shard: b.shard, Shards: b.shards,
	}, true
}

// prune forgets events created before cutoff (they can no longer count).
func (o *ownBeats) prune(cutoff time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for e, ok := o.order.Front(); ok && e.created.Before(cutoff); e, ok = o.order.Front() {
		delete(o.byID, e.id)
		o.order.Pop()
	}
}
