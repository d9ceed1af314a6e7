package agent

// This provider's heartbeats: one beat per interval, sharded to fit every
// relay, published to all of them.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"provideragent/heartbeat"
	"provideragent/relay"
)

// heartbeatLoop publishes our heartbeats every interval: one beat of
// heartbeat.BuildBeat, the held list dealt over shard events that fit every
// relay (beatBudget), the stored events and the ephemeral copy of the first,
// handed to every relay's beat sender (beatRelay).
func (a *Agent) heartbeatLoop(ctx context.Context) error {
	t := time.NewTicker(a.cfg.Lease.HeartbeatInterval)
	defer t.Stop()
	ttl := a.cfg.HeartbeatTTL
	if ttl == 0 {
		ttl = heartbeat.MinHeartbeatTTL(a.cfg.Lease.Stale, a.cfg.Lease.MaxSkew)
	}
	// The first beat waits (up to one interval) for a relay connection.
	for i := 0; i < 20 && ctx.Err() == nil; i++ {
		if up := a.connected(); up > 0 {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(a.cfg.Lease.HeartbeatInterval / 20):
		}
	}
	relays, wait := a.startBeatRelays(ctx)
	defer wait()
	for {
		now := a.now()
		held := a.ckpt.withCheckpointMarks(a.heldList())
		maxEvent, maxContent := a.beatBudget()
		beat, err := heartbeat.BuildBeat(a.me.keys, heartbeat.HeartbeatParams{
			At: now, Workloads: held, TTL: ttl, MaxEventBytes: maxEvent, MaxContentBytes: maxContent,
		})
		ticked := false
		if err != nil {
			a.logger.Error("build heartbeat", "err", err)
		} else {
			a.beat.own.add(beat)
			a.beat.own.prune(now.Add(-a.cfg.Lease.Stale - a.cfg.Lease.MaxSkew))
			a.obs.met.beatBytes.Set(float64(beat.MaxSize()))
			a.obs.met.beatEvents.Set(float64(len(beat.Stored) + 1))
			tally := a.sendBeat(relays, a.beatFrames(beat))
			// Until every relay answered or the next beat is due.
			select {
			case <-ctx.Done():
				return nil
			case <-tally.done:
			case <-t.C:
				ticked = true
			}
			if a.me.onEvent != nil {
				listing := fmt.Sprintf("%d workloads in %d events", len(held), len(beat.Stored)+1)
				if len(held) <= 20 {
					ids := make([]string, len(held))
					for i, h := range held {
						ids[i] = fmt.Sprintf("%s@%d", h.ID, h.Epoch)
					}
					listing = "[" + strings.Join(ids, " ") + "]"
				}
				a.emit("heartbeat", "", "heartbeat published, accepted by %d of %d relays, listing %s", tally.accepted.Load(), a.cfg.Lease.N, listing)
			}
		}
		if !ticked {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}
}

// beatPublishes bounds the events of one beat in flight to one relay.
const beatPublishes = 8

// beatRelay publishes our beats to one relay, one beat at a time, so that
// a slow or unreachable relay neither delays the beats of the others nor
// gets a new beat piled on the one it is still answering: a beat built
// meanwhile waits, and a newer beat replaces a waiting one (the relay would
// keep only the newest of each of our heartbeat events anyway), counted in
// agent_heartbeats_superseded_total.
type beatRelay struct {
	url  string
	next chan beatJob // the waiting beat: at most one
}

// beatJob is one beat for one relay (every event of it, encoded once for
// all relays) and the tally of its beat.
type beatJob struct {
	frames []relay.Frame
	tally  *beatTally
}

// beatTally counts the relays that took every event of one beat; done is
// closed once every relay has answered it or had it superseded.
type beatTally struct {
	accepted atomic.Int32
	left     atomic.Int32
	done     chan struct{}
}

func (t *beatTally) finish(accepted bool) {
	if accepted {
		t.accepted.Add(1)
	}
	if t.left.Add(-1) == 0 {
		close(t.done)
	}
}

// startBeatRelays starts one beat sender per relay of the pool; they stop
// when ctx ends, and wait returns once they have.
func (a *Agent) startBeatRelays(ctx context.Context) (relays []*beatRelay, wait func()) {
	var wg sync.WaitGroup
	for _, st := range a.pool.Status() {
		r := &beatRelay{url: st.URL, next: make(chan beatJob, 1)}
		a.obs.met.beatSuperseded.WithLabelValues(r.url) // exported from the start, at 0
		relays = append(relays, r)
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case job := <-r.next:
					job.tally.finish(a.publishBeatTo(ctx, r.url, job.frames))
				}
			}
		})
	}
	return relays, wg.Wait
}

// beatFrames encodes every event of beat (an event that cannot be encoded
// is logged and left out: the beat is then incomplete on every relay).
func (a *Agent) beatFrames(beat heartbeat.Beat) []relay.Frame {
	evs := beat.Events()
	frames := make([]relay.Frame, 0, len(evs))
	for _, ev := range evs {
		f, err := relay.NewFrame(ev)
		if err != nil {
			a.logger.Error("heartbeat event left out", "err", err)
			continue
		}
		frames = append(frames, f)
	}
	return frames
}

// sendBeat hands a beat's frames to every relay's sender (heartbeat
// goroutine only: the one that fills the senders' next).
func (a *Agent) sendBeat(relays []*beatRelay, frames []relay.Frame) *beatTally {
	tally := &beatTally{done: make(chan struct{})}
	tally.left.Store(int32(len(relays)))
	if len(relays) == 0 {
		close(tally.done)
	}
	for _, r := range relays {
		select {
		case old := <-r.next:
			old.tally.finish(false)
			a.obs.met.beatSuperseded.WithLabelValues(r.url).Inc()
		default:
		}
		r.next <- beatJob{frames: frames, tally: tally}
	}
	return tally
}

// publishBeatTo publishes every event of a beat to one relay, at most
// beatPublishes at once, within publish_timeout; it reports whether the
// relay accepted all of them.
func (a *Agent) publishBeatTo(ctx context.Context, url string, frames []relay.Frame) bool {
	pctx, cancel := context.WithTimeout(ctx, a.cfg.PublishTimeout)
	defer cancel()
	start := time.Now()
	defer func() { a.obs.met.beatSeconds.Observe(time.Since(start).Seconds()) }()
	var refused atomic.Bool
	sem := make(chan struct{}, beatPublishes)
	var wg sync.WaitGroup
	for _, f := range frames {
		select {
		case sem <- struct{}{}:
		case <-pctx.Done():
		}
		if pctx.Err() != nil {
			refused.Store(true)
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if o := a.pool.PublishTo(pctx, url, f); o.Outcome != relay.OutcomeAccepted {
				refused.Store(true)
			}
		})
	}
	wg.Wait()
	return !refused.Load()
}

// eventFrameOverhead is what an EVENT frame adds to its event's JSON:
// ["EVENT", and the closing bracket.
const eventFrameOverhead = len(`["EVENT",]`)

// beatTags is the most tags an event of a beat carries.
const beatTags = 5

// beatBudget is BeatBudget over every relay's NIP-11 limits. A relay whose
// max_event_tags is below a beat's tags cannot take our heartbeats at all:
// that is logged.
func (a *Agent) beatBudget() (event, content int) {
	var limits []relay.Limits
	for _, r := range a.pool.Status() {
		l := r.Limits
		if l == nil {
			continue
		}
		limits = append(limits, *l)
		if l.MaxEventTags > 0 && l.MaxEventTags < beatTags && a.beat.tagsWarned.CompareAndSwap(false, true) {
			a.logger.Warn("relay takes fewer tags per event than a heartbeat has: it will refuse our heartbeats",
				"relay", r.URL, "max_event_tags", l.MaxEventTags, "heartbeat_tags", beatTags)
		}
	}
	return BeatBudget(limits)
}
