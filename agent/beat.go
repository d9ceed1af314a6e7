package agent

// This provider's heartbeats: one beat per interval, sharded to fit every
// relay, published to all of them.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"provideragent/heartbeat"
)

// heartbeatLoop publishes our heartbeats every interval: one beat of
// heartbeat.BuildBeat, the held list dealt over shard events that fit every
// relay (beatBudget), the stored events and the ephemeral copy of the first.
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
	for {
		now := a.now()
		held := a.heldList()
		maxEvent, maxContent := a.beatBudget()
		beat, err := heartbeat.BuildBeat(a.keys, heartbeat.HeartbeatParams{
			At: now, Workloads: held, TTL: ttl, MaxEventBytes: maxEvent, MaxContentBytes: maxContent,
		})
		if err != nil {
			a.logger.Error("build heartbeat", "err", err)
		} else {
			a.beat.own.add(beat)
			a.beat.own.prune(now.Add(-a.cfg.Lease.Stale - a.cfg.Lease.MaxSkew))
			a.met.beatBytes.Set(float64(beat.MaxSize()))
			a.met.beatEvents.Set(float64(len(beat.Stored) + 1))
			all := a.publishBeat(ctx, beat)
			if a.onEvent != nil {
				listing := fmt.Sprintf("%d workloads in %d events", len(held), len(beat.Stored)+1)
				if len(held) <= 20 {
					ids := make([]string, len(held))
					for i, h := range held {
						ids[i] = fmt.Sprintf("%s@%d", h.ID, h.Epoch)
					}
					listing = "[" + strings.Join(ids, " ") + "]"
				}
				a.emit("heartbeat", "", "heartbeat published, accepted by %d of %d relays, listing %s", all, a.cfg.Lease.N, listing)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// beatPublishes bounds the events of one beat published at once.
const beatPublishes = 8

// publishBeat publishes every event of a beat, at most beatPublishes at
// once, within one heartbeat interval (or PublishTimeout), and returns how
// many relays accepted all of them.
func (a *Agent) publishBeat(ctx context.Context, beat heartbeat.Beat) int {
	timeout := min(a.cfg.PublishTimeout, a.cfg.Lease.HeartbeatInterval)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	defer func() { a.met.beatSeconds.Observe(time.Since(start).Seconds()) }()
	evs := beat.Events()
	var mu sync.Mutex
	accepted := map[string]int{}
	sem := make(chan struct{}, beatPublishes)
	var wg sync.WaitGroup
	for _, ev := range evs {
		select {
		case sem <- struct{}{}:
		case <-pctx.Done():
		}
		if pctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res := a.pool.Publish(pctx, ev)
			mu.Lock()
			for _, r := range res.Accepted {
				accepted[r]++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	all := 0
	for _, n := range accepted {
		if n == len(evs) {
			all++
		}
	}
	return all
}

// eventFrameOverhead is what an EVENT frame adds to its event's JSON:
// ["EVENT", and the closing bracket.
const eventFrameOverhead = len(`["EVENT",]`)

// beatTags is the most tags an event of a beat carries.
const beatTags = 5

// beatBudget is the size bound of every event of a beat: 60 KiB
// (heartbeat.DefaultMaxEventBytes, under strfry's 65,536-byte events, which
// it does not advertise), and within every relay's NIP-11 max_message_length
// (less the frame) and max_content_length (0: none). A relay whose
// max_event_tags is below a beat's tags cannot take our heartbeats at all:
// that is logged.
func (a *Agent) beatBudget() (event, content int) {
	event = heartbeat.DefaultMaxEventBytes
	for _, r := range a.pool.Status() {
		l := r.Limits
		if l == nil {
			continue
		}
		if l.MaxMessageLength > 0 {
			event = min(event, l.MaxMessageLength-eventFrameOverhead)
		}
		if l.MaxContentLength > 0 && (content == 0 || l.MaxContentLength < content) {
			content = l.MaxContentLength
		}
		if l.MaxEventTags > 0 && l.MaxEventTags < beatTags && a.beat.tagsWarned.CompareAndSwap(false, true) {
			a.logger.Warn("relay takes fewer tags per event than a heartbeat has: it will refuse our heartbeats",
				"relay", r.URL, "max_event_tags", l.MaxEventTags, "heartbeat_tags", beatTags)
		}
	}
	return event, content
}
