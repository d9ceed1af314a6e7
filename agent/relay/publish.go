package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nbd-wtf/go-nostr"
)

// Outcome is what one relay did with a published event.
type Outcome string

const (
	// OutcomeAccepted: the relay's OK true for the event id arrived. The only
	// outcome that counts towards a quorum of acceptances.
	OutcomeAccepted Outcome = "accepted"
	// OutcomeRejected: OK false; Reason holds the relay's reason and Prefix
	// its machine-readable prefix (blocked, rate-limited, invalid, ...).
	OutcomeRejected Outcome = "rejected"
	// OutcomeMuted: OK false "mute: no one was listening" for an ephemeral
	// kind. The relay took the event but had no subscriber to hand it to;
	// it is neither an acceptance (nothing is stored) nor a failure of the
	// relay, so callers should not count it against the relay's health.
	OutcomeMuted Outcome = "muted"
	// OutcomeTimedOut: no OK arrived before the deadline (never connected,
	// or the connection dropped before the OK and no later connection
	// answered in time). Never counted as accepted.
	OutcomeTimedOut Outcome = "timed_out"
	// OutcomeFailed: not sent, e.g. the event exceeds the relay's NIP-11
	// max_message_length, or the pool is closed.
	OutcomeFailed Outcome = "failed"
	// OutcomeNotAwaited: PublishQuorum had its acceptances and stopped
	// waiting for this relay (the event may still reach it). Not counted
	// in relay_publish_total.
	OutcomeNotAwaited Outcome = "not_awaited"
)

// RelayOutcome is one relay's answer to a publish.
type RelayOutcome struct {
	Relay   string
	Outcome Outcome
	// Reason is the relay's OK message, or the local cause for timed_out
	// and failed.
	Reason string
	// Prefix is Reason's machine-readable prefix ("blocked"), if any.
	Prefix string
}

// PublishResult lists every relay's outcome for one event.
type PublishResult struct {
	EventID  string
	Accepted []string
	Rejected []RelayOutcome
	Muted    []RelayOutcome
	TimedOut []RelayOutcome
	Failed   []RelayOutcome
	// All lists every relay in configuration order.
	All []RelayOutcome
}

// AcceptedCount is the number of relays whose OK true arrived.
func (r PublishResult) AcceptedCount() int { return len(r.Accepted) }

// Publish sends ev to every relay and waits, until ctx's deadline (or
// Config.PublishTimeout when ctx has none), for each relay's OK. A relay
// that is disconnected is waited for; if its connection drops before the
// OK, the event is sent again on the next connection within the deadline
// (same id, so idempotent). An "auth-required:" OK is retried once after
// AUTH succeeds. ev must already be signed; Publish does not verify it.
func (p *Pool) Publish(ctx context.Context, ev nostr.Event) PublishResult {
	return p.PublishQuorum(ctx, ev, 0)
}

// PublishQuorum is Publish that returns as soon as need relays answered OK
// true (need <= 0: wait for every relay). The relays it stopped waiting for
// are reported as OutcomeNotAwaited; their sends are not withdrawn. A
// caller that only needs M acceptances (the outbox) thus does not wait out
// the deadline on a relay that is down.
func (p *Pool) PublishQuorum(ctx context.Context, ev nostr.Event, need int) PublishResult {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.PublishTimeout)
		defer cancel()
	}
	res := PublishResult{EventID: ev.ID, All: make([]RelayOutcome, len(p.sups))}
	frame, err := json.Marshal(nostr.EventEnvelope{Event: ev})
	if err != nil {
		for i, s := range p.sups {
			res.All[i] = RelayOutcome{Relay: s.url, Outcome: OutcomeFailed, Reason: "encode event: " + err.Error()}
		}
	} else {
		enough, stop := context.WithCancel(ctx)
		defer stop()
		var accepted atomic.Int32
		var wg sync.WaitGroup
		for i, s := range p.sups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				o := s.publish(enough, ev.ID, frame)
				if o.Outcome == OutcomeAccepted && need > 0 && int(accepted.Add(1)) >= need {
					stop()
				}
				if o.Outcome == OutcomeTimedOut && ctx.Err() == nil && enough.Err() != nil {
					o = RelayOutcome{Relay: s.url, Outcome: OutcomeNotAwaited, Reason: "enough relays accepted"}
				}
				res.All[i] = o
			}()
		}
		wg.Wait()
	}
	for _, o := range res.All {
		if o.Outcome == OutcomeNotAwaited {
			continue
		}
		p.m.publish.WithLabelValues(o.Relay, string(o.Outcome)).Inc()
		switch o.Outcome {
		case OutcomeAccepted:
			res.Accepted = append(res.Accepted, o.Relay)
		case OutcomeRejected:
			res.Rejected = append(res.Rejected, o)
		case OutcomeMuted:
			res.Muted = append(res.Muted, o)
		case OutcomeTimedOut:
			res.TimedOut = append(res.TimedOut, o)
		default:
			res.Failed = append(res.Failed, o)
		}
	}
	return res
}

func (s *supervisor) publish(ctx context.Context, id string, frame []byte) RelayOutcome {
	out := RelayOutcome{Relay: s.url}
	if l := s.limits(); l.MaxMessageLength > 0 && len(frame) > l.MaxMessageLength {
		out.Outcome = OutcomeFailed
		out.Reason = fmt.Sprintf("event frame of %d bytes exceeds the relay's max_message_length %d", len(frame), l.MaxMessageLength)
		return out
	}
	cause := ErrNotConnected.Error()
	triedAuth := false
	for {
		c, err := s.waitConn(ctx)
		if err != nil {
			return timedOut(out, cause)
		}
		okCh := c.addPending(id)
		if err := c.writeRaw(frame); err != nil {
			c.removePending(id, okCh)
			cause = fmt.Sprintf("%v: %v", ErrConnectionLost, err)
			if !waitClosed(ctx, c) {
				return timedOut(out, cause)
			}
			continue
		}
		select {
		case ok := <-okCh:
			out.Reason = ok.Reason
			out.Prefix = reasonPrefix(ok.Reason)
			switch {
			case ok.OK:
				out.Outcome = OutcomeAccepted
				return out
			case out.Prefix == "mute":
				out.Outcome = OutcomeMuted
				return out
			case out.Prefix == "auth-required" && s.p.opts.SecretKey != "" && !triedAuth:
				triedAuth = true
				cause = "auth-required: " + ok.Reason
				select {
				case <-c.authed:
					continue
				case <-c.closed:
					continue
				case <-ctx.Done():
					return timedOut(out, cause)
				}
			}
			out.Outcome = OutcomeRejected
			return out
		case <-c.closed:
			c.removePending(id, okCh)
			cause = ErrConnectionLost.Error() + " before OK"
		case <-ctx.Done():
			c.removePending(id, okCh)
			if cause == ErrNotConnected.Error() {
				cause = "no OK before the deadline"
			}
			return timedOut(out, cause)
		}
	}
}

func timedOut(out RelayOutcome, cause string) RelayOutcome {
	out.Outcome = OutcomeTimedOut
	out.Reason = cause
	out.Prefix = ""
	return out
}

// waitClosed waits until c is torn down; false if ctx ended first.
func waitClosed(ctx context.Context, c *conn) bool {
	select {
	case <-c.closed:
		return true
	case <-ctx.Done():
		return false
	}
}

// QueryResult is what one relay returned for a Query.
type QueryResult struct {
	Relay string
	// Events are the events received before EOSE (not verified).
	Events []nostr.Event
	// EOSE is true when the relay finished sending its stored events.
	EOSE bool
	// ClosedReason is set when the relay answered CLOSED.
	ClosedReason string
	// Err is set when the relay could not be read (ErrNotConnected,
	// ErrConnectionLost, ErrSubscriptionLimit, or the ctx's error).
	Err error
}

// Complete reports whether the relay answered fully (EOSE, no error).
func (r QueryResult) Complete() bool { return r.EOSE && r.Err == nil && r.ClosedReason == "" }

// Query reads the stored events matching filter from every relay until
// each one's EOSE (or CLOSED, error, or ctx's end), concurrently, and
// returns one result per relay in configuration order. A relay that is
// disconnected, or whose connection drops mid-query, is waited for and read
// again from scratch on its next connection until ctx ends.
func (p *Pool) Query(ctx context.Context, filter nostr.Filter) []QueryResult {
	out := make([]QueryResult, len(p.sups))
	var wg sync.WaitGroup
	for i, s := range p.sups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = s.query(ctx, filter)
		}()
	}
	wg.Wait()
	return out
}

type querySink struct {
	mu     sync.Mutex
	events []nostr.Event
	eose   bool
	reason string
	done   chan struct{}
	once   sync.Once
}

func (q *querySink) add(ev nostr.Event) {
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-q.done:
	default:
		q.events = append(q.events, ev)
	}
}

func (q *querySink) finish(eose bool, reason string) {
	q.once.Do(func() {
		q.mu.Lock()
		q.eose, q.reason = eose, reason
		q.mu.Unlock()
		close(q.done)
	})
}

func (c *conn) query(id string) *querySink {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queries[id]
}

func (s *supervisor) query(ctx context.Context, filter nostr.Filter) QueryResult {
	triedAuth := false
	var lost error // the last connection loss, reported if no later connection answers
	for {
		res := QueryResult{Relay: s.url}
		c, err := s.waitConn(ctx)
		if err != nil {
			if lost != nil {
				err = fmt.Errorf("%w (earlier: %v)", err, lost)
			}
			res.Err = err
			return res
		}
		l := s.limits()
		if l.MaxSubscriptions > 0 && 1+c.activeQueries() >= l.MaxSubscriptions {
			res.Err = fmt.Errorf("%w (max_subscriptions %d)", ErrSubscriptionLimit, l.MaxSubscriptions)
			return res
		}
		groups := prepareFilters([]nostr.Filter{filter}, nil, l)
		id := c.nextID("pa-query-")
		q := &querySink{done: make(chan struct{})}
		c.mu.Lock()
		c.queries[id] = q
		c.mu.Unlock()
		remove := func() {
			c.mu.Lock()
			delete(c.queries, id)
			c.mu.Unlock()
		}
		if err := c.write(nostr.ReqEnvelope{SubscriptionID: id, Filters: groups[0]}); err != nil {
			remove()
			lost = fmt.Errorf("%w: %w", ErrConnectionLost, err)
			if !waitClosed(ctx, c) {
				res.Err = lost
				return res
			}
			continue // on the next connection
		}
		select {
		case <-q.done:
		case <-c.closed:
		case <-ctx.Done():
		}
		remove()
		q.finish(false, "") // no-op when the relay already ended it
		q.mu.Lock()
		res.Events, res.EOSE, res.ClosedReason = q.events, q.eose, q.reason
		q.mu.Unlock()
		if !res.EOSE && res.ClosedReason == "" {
			select {
			case <-c.closed:
				if ctx.Err() == nil {
					lost = ErrConnectionLost
					continue // read everything again on the next connection
				}
				res.Err = ErrConnectionLost
			default:
				res.Err = ctx.Err()
				_ = c.write(nostr.CloseEnvelope(id))
			}
			return res
		}
		if res.EOSE {
			_ = c.write(nostr.CloseEnvelope(id))
		}
		if reasonPrefix(res.ClosedReason) == "auth-required" && s.p.opts.SecretKey != "" && !triedAuth {
			triedAuth = true
			select {
			case <-c.authed:
			case <-c.closed:
			case <-ctx.Done():
				return res
			}
			continue
		}
		return res
	}
}
