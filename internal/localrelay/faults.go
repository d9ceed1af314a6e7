package localrelay

// The faults a relay injects on request (Options): refusing the
// unauthenticated, holding writes, closing subscriptions, sending variant
// copies of events and replaying old ones.

import (
	"context"
	"slices"
	"time"

	"github.com/fiatjaf/khatru"
	"github.com/nbd-wtf/go-nostr"
)

func (r *Relay) rejectUnauthed(ctx context.Context) (bool, string) {
	authed := khatru.GetAuthed(ctx)
	if authed == "" {
		return true, "auth-required: authenticate with NIP-42 first"
	}
	if len(r.opts.AuthAllow) > 0 && !slices.Contains(r.opts.AuthAllow, authed) {
		return true, "restricted: this pubkey is not allowed here"
	}
	return false, ""
}

func (r *Relay) holdWrite(ctx context.Context, _ *nostr.Event) (bool, string) {
	r.mu.Lock()
	r.held++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.held--
		r.mu.Unlock()
	}()
	ws := khatru.GetConnection(ctx)
	var wsDone <-chan struct{}
	if ws != nil {
		wsDone = ws.Context.Done()
	}
	if r.opts.HoldOK {
		select {
		case <-wsDone:
		case <-r.ctx.Done():
		}
		return true, "error: connection closed before the write was answered"
	}
	t := time.NewTimer(r.opts.WriteDelay)
	defer t.Stop()
	select {
	case <-t.C:
		return false, ""
	case <-wsDone:
	case <-r.ctx.Done():
	}
	return true, "error: connection closed before the write was answered"
}

// delayQuery holds a REQ's filter that asks for one of QueryDelayKinds
// (any, when none are named) for QueryDelay before the relay queries its
// store: khatru handles each message in a goroutine of its own, so only
// this REQ's answer waits.
func (r *Relay) delayQuery(ctx context.Context, f nostr.Filter) (bool, string) {
	if len(r.opts.QueryDelayKinds) > 0 && !slices.ContainsFunc(f.Kinds, func(k int) bool { return slices.Contains(r.opts.QueryDelayKinds, k) }) {
		return false, ""
	}
	ws := khatru.GetConnection(ctx)
	var wsDone <-chan struct{}
	if ws != nil {
		wsDone = ws.Context.Done()
	}
	t := time.NewTimer(r.opts.QueryDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wsDone:
	case <-r.ctx.Done():
	}
	return false, ""
}

// closedFault ends subscriptions with the configured CLOSED reason. khatru
// calls it once per filter; a subscription is counted once.
func (r *Relay) closedFault(ctx context.Context, _ nostr.Filter) (bool, string) {
	ws := khatru.GetConnection(ctx)
	id := khatru.GetSubscriptionID(ctx)
	k := subKey{ws: ws, id: id}
	r.mu.Lock()
	if _, seen := r.subs[k]; seen {
		hit := r.subs[k]
		r.mu.Unlock()
		if hit && r.opts.ClosedAfter == 0 {
			return true, r.opts.ClosedReason
		}
		return false, ""
	}
	hit := r.opts.ClosedTimes == 0 || r.closed < r.opts.ClosedTimes
	r.subs[k] = hit
	if hit {
		r.closed++
	}
	r.mu.Unlock()
	if !hit {
		return false, ""
	}
	if r.opts.ClosedAfter == 0 {
		return true, r.opts.ClosedReason
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTimer(r.opts.ClosedAfter)
		defer t.Stop()
		select {
		case <-t.C:
			_ = ws.WriteJSON(nostr.ClosedEnvelope{SubscriptionID: id, Reason: r.opts.ClosedReason})
		case <-ws.Context.Done():
		case <-r.ctx.Done():
		}
	}()
	return false, ""
}

// variants returns the fault copies of ev, in the order they are sent.
func (r *Relay) variants(ev *nostr.Event) []*nostr.Event {
	var out []*nostr.Event
	if r.opts.Forge {
		// The forgery is an extra tag, so the copy still decodes and only
		// the id or signature check can refuse it.
		idMismatch := cloneEvent(ev)
		idMismatch.Tags = append(idMismatch.Tags, nostr.Tag{"forged", "1"})
		out = append(out, idMismatch)

		badSig := cloneEvent(ev)
		badSig.Tags = append(badSig.Tags, nostr.Tag{"forged", "1"})
		badSig.ID = badSig.GetID()
		out = append(out, badSig)
	}
	for _, shift := range []time.Duration{r.opts.FutureShift, -r.opts.PastShift} {
		if shift == 0 {
			continue
		}
		c := cloneEvent(ev)
		c.CreatedAt = nostr.Timestamp(int64(c.CreatedAt) + int64(shift/time.Second))
		if r.opts.InjectKey != "" {
			if err := c.Sign(r.opts.InjectKey); err != nil {
				r.logger.Warn("sign shifted copy", "err", err)
				continue
			}
		} else {
			c.ID = c.GetID()
		}
		out = append(out, c)
	}
	return out
}

func cloneEvent(ev *nostr.Event) *nostr.Event {
	c := *ev
	c.Tags = make(nostr.Tags, len(ev.Tags))
	for i, t := range ev.Tags {
		c.Tags[i] = slices.Clone(t)
	}
	return &c
}

func (r *Relay) replayLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.opts.ReplayEvery)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
			r.replay()
		}
	}
}
