package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// answered in time). Never counted as accepted. A NOTICE the relay sent
	// meanwhile is kept in Notice as the probable reason.
	OutcomeTimedOut Outcome = "timed_out"
	// OutcomeRateLimited: not sent, because the relay answered an earlier
	// publish with "rate-limited:" and its backoff outlasts the deadline.
	// Reason holds the relay's words.
	OutcomeRateLimited Outcome = "rate_limited"
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
	// Prefix is the class of the relay's words (ParseReason: "blocked",
	// "rate-limited", also found after strfry's "ERROR: " wrapper), if any;
	// for a timeout with a Notice, the Notice's class.
	Prefix string
	// Notice is a NOTICE the relay sent while this publish awaited its OK
	// (the probable reason an OK never came: @nostr-relay/core answers an
	// invalid EVENT with a NOTICE only). Outcome stays timed_out.
	Notice string
	// cause is the local cause of an outcome the relay did not explain
	// (relay_publish_total's reason label).
	cause string
}

// PublishResult lists every relay's outcome for one event.
type PublishResult struct {
	EventID  string
	Accepted []string
	// Rejected lists OK false answers (other than mute:) and publishes held
	// back by a relay's rate-limited: backoff (OutcomeRateLimited).
	Rejected []RelayOutcome
	Muted    []RelayOutcome
	TimedOut []RelayOutcome
	Failed   []RelayOutcome
	// All lists every relay in configuration order.
	All []RelayOutcome
}

// AcceptedCount is the number of relays whose OK true arrived.
func (r PublishResult) AcceptedCount() int { return len(r.Accepted) }

// Refusals says, for an error message, which relays did not accept and
// why: "rejected wss://a (blocked: no), timed out wss://b" ("none" when
// every relay accepted or was not awaited).
func (r PublishResult) Refusals() string {
	var parts []string
	for _, group := range []struct {
		name string
		os   []RelayOutcome
	}{{"rejected", r.Rejected}, {"muted", r.Muted}, {"timed out", r.TimedOut}, {"failed", r.Failed}} {
		for _, o := range group.os {
			s := group.name + " " + o.Relay
			if why := cmp.Or(o.Reason, o.Notice); why != "" {
				s += " (" + why + ")"
			}
			parts = append(parts, s)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Publish sends ev to every relay and waits, until ctx's deadline (or
// Config.PublishTimeout when ctx has none), for each relay's OK. A relay
// that is disconnected is waited for; if its connection drops before the
// OK, the event is sent again on the next connection within the deadline
// (same id, so idempotent). An "auth-required:" OK is retried once after
// AUTH succeeds. A "rate-limited:" OK backs off that relay's publishes
// (Backoff from BackoffInitial, reset by its next OK true): this event is
// sent again after the backoff if the deadline allows, and later events
// wait for it. Every rejection is logged at WARN (at most once a minute per
// relay and class), counted in relay_publish_total{relay,outcome,reason}
// and kept as the relay's Status.LastRejection. ev must already be signed;
// Publish does not verify it.
func (p *Pool) Publish(ctx context.Context, ev nostr.Event) PublishResult {
	return p.PublishQuorum(ctx, ev, 0)
}

// PublishQuorum is Publish that returns as soon as need relays answered OK
// true (need <= 0: wait for every relay). The relays it stopped waiting for
// are reported as OutcomeNotAwaited; their sends are not withdrawn. A
// caller that only needs M acceptances (the outbox) thus does not wait out
// the deadline on a relay that is down.
func (p *Pool) PublishQuorum(ctx context.Context, ev nostr.Event, need int) PublishResult {
	ctx, cancel := p.publishDeadline(ctx)
	defer cancel()
	res := PublishResult{EventID: ev.ID, All: make([]RelayOutcome, len(p.sups))}
	frame, err := encodeEvent(ev)
	if err != nil {
		for i, s := range p.sups {
			res.All[i] = RelayOutcome{Relay: s.url, Outcome: OutcomeFailed, Reason: "encode event: " + err.Error(), cause: causeEncode}
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
				s.noteOutcome(ev.Kind, ev.ID, o)
				res.All[i] = o
			}()
		}
		wg.Wait()
	}
	for _, o := range res.All {
		if o.Outcome == OutcomeNotAwaited {
			continue
		}
		p.count(o)
		switch o.Outcome {
		case OutcomeAccepted:
			res.Accepted = append(res.Accepted, o.Relay)
		case OutcomeRejected, OutcomeRateLimited:
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

// Frame is a signed event with its EVENT frame, encoded once for
// publishing it to several relays one by one (PublishTo).
type Frame struct {
	Event *nostr.Event
	b     []byte
}

// NewFrame encodes ev's EVENT frame.
func NewFrame(ev *nostr.Event) (Frame, error) {
	b, err := encodeEvent(*ev)
	if err != nil {
		return Frame{}, fmt.Errorf("encode event %s: %w", ev.ID, err)
	}
	return Frame{Event: ev, b: b}, nil
}

// PublishTo is Publish of f on one relay of the pool (url as URLs gives
// it): its outcome, retried, logged and counted as Publish does. A caller
// that keeps a pipeline per relay (the agent's heartbeats) uses it so that
// a slow relay delays no other. An url the pool does not have fails (and
// is not counted).
func (p *Pool) PublishTo(ctx context.Context, url string, f Frame) RelayOutcome {
	i := slices.IndexFunc(p.sups, func(s *supervisor) bool { return s.url == url })
	if i < 0 {
		return RelayOutcome{Relay: url, Outcome: OutcomeFailed, Reason: "not a relay of this pool"}
	}
	s := p.sups[i]
	ctx, cancel := p.publishDeadline(ctx)
	defer cancel()
	o := s.publish(ctx, f.Event.ID, f.b)
	s.noteOutcome(f.Event.Kind, f.Event.ID, o)
	p.count(o)
	return o
}

// publishDeadline is ctx, with Config.PublishTimeout when it has no
// deadline.
func (p *Pool) publishDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, p.cfg.PublishTimeout)
}

// encodeEvent is ev's EVENT frame (go-nostr's encoder, called directly:
// through json.Marshal every frame was scanned and compacted once more,
// half the cost of publishing a large event).
func encodeEvent(ev nostr.Event) ([]byte, error) {
	return nostr.EventEnvelope{Event: ev}.MarshalJSON()
}

// count adds o to relay_publish_total.
func (p *Pool) count(o RelayOutcome) {
	p.m.publish.WithLabelValues(o.Relay, string(o.Outcome), o.reasonLabel()).Inc()
}

func (s *supervisor) publish(ctx context.Context, id string, frame []byte) RelayOutcome {
	out := RelayOutcome{Relay: s.url}
	if l := s.limits(); l.MaxMessageLength > 0 && len(frame) > l.MaxMessageLength {
		out.Outcome = OutcomeFailed
		out.Reason = fmt.Sprintf("event frame of %d bytes exceeds the relay's max_message_length %d", len(frame), l.MaxMessageLength)
		out.cause = causeTooLarge
		return out
	}
	cause, class := ErrNotConnected.Error(), causeNotConnected
	triedAuth := false
	var w *okWaiter
	var wc *conn
	notice := func() string {
		if w == nil {
			return ""
		}
		return wc.noticeOf(w)
	}
	for {
		if ok, reason := s.waitPublishBackoff(ctx); !ok {
			if n := notice(); n != "" {
				return timedOut(out, cause, class, n)
			}
			out.Outcome, out.Reason, out.Prefix = OutcomeRateLimited, reason, PrefixRateLimited
			return out
		}
		c, err := s.waitConn(ctx)
		if err != nil {
			return timedOut(out, cause, class, notice())
		}
		w, wc = c.addPending(id), c
		if err := c.writeRaw(frame); err != nil {
			c.removePending(id, w)
			cause, class = fmt.Sprintf("%v: %v", ErrConnectionLost, err), causeConnectionLost
			if !waitClosed(ctx, c) {
				return timedOut(out, cause, class, notice())
			}
			continue
		}
		select {
		case ok := <-w.ch:
			r := ParseReason(ok.Reason)
			out.Reason, out.Prefix = ok.Reason, r.Prefix
			switch {
			case ok.OK:
				out.Outcome = OutcomeAccepted
				return out
			case r.Prefix == PrefixMute:
				out.Outcome = OutcomeMuted
				return out
			case r.Prefix == PrefixRateLimited:
				// Back off this relay; send again once it has passed, if the
				// deadline allows (waitPublishBackoff above decides).
				until := s.rateLimited(ok.Reason)
				if dl, has := ctx.Deadline(); has && until.Before(dl) {
					cause, class = "rate-limited, retried: "+ok.Reason, PrefixRateLimited
					continue
				}
			case r.Prefix == PrefixAuthRequired && s.p.opts.SecretKey != "" && !triedAuth:
				triedAuth = true
				cause, class = "auth-required: "+ok.Reason, PrefixAuthRequired
				select {
				case <-c.authed:
					continue
				case <-c.closed:
					continue
				case <-c.authBad:
					out.Reason = ok.Reason + " (our AUTH was refused)"
				case <-ctx.Done():
					return timedOut(out, cause, class, notice())
				}
			}
			out.Outcome = OutcomeRejected
			return out
		case <-c.closed:
			c.removePending(id, w)
			cause, class = ErrConnectionLost.Error()+" before OK", causeConnectionLost
		case <-ctx.Done():
			c.removePending(id, w)
			if class == causeNotConnected {
				cause, class = "no OK before the deadline", causeNoOK
			}
			return timedOut(out, cause, class, notice())
		}
	}
}

// timedOut makes out a timeout with the local cause; a NOTICE the relay
// sent meanwhile becomes its probable reason (Notice, Prefix, Reason).
func timedOut(out RelayOutcome, cause, class, notice string) RelayOutcome {
	out.Outcome = OutcomeTimedOut
	out.Reason = cause
	out.Prefix = ""
	out.cause = class
	if notice != "" {
		out.Notice = notice
		out.Prefix = reasonPrefix(notice)
		out.Reason = cause + "; relay NOTICE (probable reason): " + notice
	}
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

// uncachedUntil is how far ahead uncached puts a query's until.
const uncachedUntil = 365 * 24 * time.Hour

// uncached gives a filter without until one a year ahead, plus up to a day
// at random, so that no two queries send the same filter: @nostr-relay/core
// answers a filter it saw in the last second (its default
// filterResultCacheTtl) from that earlier result, which a claim read must
// never get (it would miss a claim stored since). Events dated a year ahead
// are refused by the ingest anyway.
func uncached(f nostr.Filter, now time.Time, r float64) nostr.Filter {
	if f.Until != nil {
		return f
	}
	f = f.Clone()
	u := nostr.Timestamp(now.Add(uncachedUntil).Unix() + int64(r*86400))
	f.Until = &u
	return f
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

// Query reads the stored events matching filter from every relay; see
// QueryFilters.
func (p *Pool) Query(ctx context.Context, filter nostr.Filter) []QueryResult {
	return p.QueryFilters(ctx, []nostr.Filter{filter})
}

// QueryFilters reads the stored events matching any of filters from every
// relay, concurrently, and returns one result per relay in configuration
// order. On each relay the filters are packed into as few REQs as its
// limits allow (max_filters, max_message_length), read one after the other
// within one of Config.QuerySlots query slots, and a filter that returned
// the relay's limit of events is read again page by page (until the oldest
// event returned) until it returns fewer: so a relay's cut never hides
// events. A relay counts as complete (EOSE) only when every REQ and page
// reached its EOSE. A relay that is disconnected, or whose connection drops
// mid-query, is waited for and read again from scratch on its next
// connection until ctx ends.
func (p *Pool) QueryFilters(ctx context.Context, filters []nostr.Filter) []QueryResult {
	out := make([]QueryResult, len(p.sups))
	var wg sync.WaitGroup
	for i, s := range p.sups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = s.query(ctx, filters)
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

func (s *supervisor) query(ctx context.Context, filters []nostr.Filter) QueryResult {
	triedAuth := false
	var lost error // the last connection loss, reported if no later connection answers
	for {
		c, err := s.waitConn(ctx)
		if err != nil {
			if lost != nil {
				err = fmt.Errorf("%w (earlier: %v)", err, lost)
			}
			return QueryResult{Relay: s.url, Err: err}
		}
		release, err := c.acquireQuery(ctx, s.p.cfg.QuerySlots)
		if errors.Is(err, ErrConnectionLost) {
			lost = err
			continue
		}
		if err != nil {
			return QueryResult{Relay: s.url, Err: err}
		}
		res, err := s.queryOn(ctx, c, filters)
		release()
		switch {
		case errors.Is(err, ErrConnectionLost) && ctx.Err() == nil:
			lost = err
			if !waitClosed(ctx, c) {
				return QueryResult{Relay: s.url, Err: lost}
			}
			continue // read everything again on the next connection
		case err != nil:
			res.Err = err
		}
		if reasonPrefix(res.ClosedReason) == PrefixAuthRequired && s.p.opts.SecretKey != "" && !triedAuth {
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

// queryOn runs a query on connection c: its filters packed into REQs, each
// read to EOSE and paged through. ErrConnectionLost: the connection dropped.
func (s *supervisor) queryOn(ctx context.Context, c *conn, filters []nostr.Filter) (QueryResult, error) {
	res := QueryResult{Relay: s.url}
	l := s.limits()
	fs := make(nostr.Filters, len(filters))
	for i, f := range filters {
		fs[i] = uncached(f, s.p.opts.Now(), s.p.opts.Rand())
	}
	fs, pageable := withLimits(fs, l, s.p.cfg.pageLimit(l))
	// Pack the pageable filters apart from the others, so a page never
	// repeats a filter the caller limited.
	var paged, unpaged nostr.Filters
	for i, f := range fs {
		if pageable[i] {
			paged = append(paged, f)
		} else {
			unpaged = append(unpaged, f)
		}
	}
	type group struct {
		fs       nostr.Filters
		pageable bool
	}
	var groups []group
	for _, g := range packPlain(paged, l.MaxFilters, s.p.cfg.frameBudget(l)) {
		groups = append(groups, group{g, true})
	}
	for _, g := range packPlain(unpaged, l.MaxFilters, s.p.cfg.frameBudget(l)) {
		groups = append(groups, group{g, false})
	}
	seen := map[string]bool{}
	for _, g := range groups {
		for pending := g.fs; len(pending) > 0; {
			evs, eose, reason, err := s.runREQ(ctx, c, pending)
			if err != nil {
				return res, err
			}
			if !eose {
				res.ClosedReason = reason
				return res, nil
			}
			counts, oldest := make([]int, len(pending)), make([]nostr.Timestamp, len(pending))
			for i := range evs {
				countStored(pending, counts, oldest, &evs[i])
				if !seen[evs[i].ID] {
					seen[evs[i].ID] = true
					res.Events = append(res.Events, evs[i])
				}
			}
			if !g.pageable {
				break
			}
			var stuck int
			pending, stuck = nextPages(pending, allTrue(len(pending)), counts, oldest)
			if stuck > 0 {
				s.log.Warn("relay returned its limit of stored events within one second: a query cannot page further", "filters", stuck)
			}
			if len(pending) > 0 {
				s.p.m.pages.WithLabelValues(s.url).Inc()
			}
		}
	}
	res.EOSE = true
	return res, nil
}

// runREQ sends one REQ and collects its events until EOSE, CLOSED (reason),
// the connection's end (ErrConnectionLost) or ctx's end.
func (s *supervisor) runREQ(ctx context.Context, c *conn, filters nostr.Filters) (evs []nostr.Event, eose bool, reason string, err error) {
	id := c.nextID("pa-query-")
	q := &querySink{done: make(chan struct{})}
	c.mu.Lock()
	c.queries[id] = q
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.queries, id)
		c.mu.Unlock()
	}()
	if err := c.write(nostr.ReqEnvelope{SubscriptionID: id, Filters: filters}); err != nil {
		return nil, false, "", ErrConnectionLost
	}
	select {
	case <-q.done:
	case <-c.closed:
	case <-ctx.Done():
	}
	q.finish(false, "") // no-op when the relay already ended it
	q.mu.Lock()
	evs, eose, reason = q.events, q.eose, q.reason
	q.mu.Unlock()
	if eose {
		_ = c.write(nostr.CloseEnvelope(id))
		return evs, true, "", nil
	}
	if reason != "" {
		return evs, false, reason, nil
	}
	select {
	case <-c.closed:
		return nil, false, "", ErrConnectionLost
	default:
		_ = c.write(nostr.CloseEnvelope(id))
		return nil, false, "", ctx.Err()
	}
}

// acquireQuery takes one of the connection's query slots, waiting until
// one is free or ctx ends; release gives it back.
func (c *conn) acquireQuery(ctx context.Context, slots int) (release func(), err error) {
	c.mu.Lock()
	if c.qslots == nil {
		c.qslots = make(chan struct{}, slots)
	}
	ch := c.qslots
	c.mu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: waiting for a query slot: %w", ErrSubscriptionLimit, ctx.Err())
	case <-c.closed:
		return nil, ErrConnectionLost
	}
}
