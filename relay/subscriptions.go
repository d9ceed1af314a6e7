package relay

// The session's subscriptions: sending the REQs of every interest,
// catching up page by page past a relay's limit, EOSE, CLOSED and the
// retries of closed subscriptions.

import (
	"context"
	"strings"
	"time"

	"github.com/nbd-wtf/go-nostr"
)

// caughtUp marks sub as having delivered every stored event (its EOSE,
// and every page), so live events of Options.Known may skip parsing.
func (ss *session) caughtUp(ctx context.Context, sub *mainSub) error {
	sub.eose = true
	ss.setLive(sub.id, true)
	if err := ss.retire(false); err != nil {
		return err
	}
	return ss.maybeEOSE(ctx)
}

// retire closes the REQs that subscribeAll replaced, once every REQ of the
// subscription caught up (or at once with now: the relay's budget wants
// the room, and then the stream may have a gap, which the caller reports).
func (ss *session) retire(now bool) error {
	if len(ss.retiring) == 0 {
		return nil
	}
	if !now {
		for _, sub := range ss.subs {
			if sub.state != subPermanent && !sub.eose {
				return nil
			}
		}
	}
	for _, sub := range ss.retiring {
		delete(ss.byID, sub.id)
		ss.setLive(sub.id, false)
		if sub.state == subActive {
			if err := ss.c.write(nostr.CloseEnvelope(sub.id)); err != nil {
				return err
			}
		}
	}
	ss.retiring = nil
	return nil
}

// nextPage starts the catch-up page of the first queued sub, unless one is
// in flight. A sub whose REQ was sent again since it queued is skipped.
func (ss *session) nextPage(ctx context.Context) error {
	for ss.page == nil && len(ss.pageQueue) > 0 {
		sub := ss.pageQueue[0]
		ss.pageQueue = ss.pageQueue[1:]
		if ss.byID[sub.id] != sub || sub.state != subActive || !sub.gotEOSE || sub.eose {
			continue
		}
		pages, _ := nextPages(sub.sent, sub.pageable, sub.counts, sub.oldest)
		if len(pages) == 0 {
			if err := ss.caughtUp(ctx, sub); err != nil {
				return err
			}
			continue
		}
		return ss.sendPage(sub, pages)
	}
	return nil
}

func (ss *session) sendPage(parent *mainSub, filters nostr.Filters) error {
	pg := &pageSub{id: ss.c.nextID("pa-page-"), parent: parent, sent: filters,
		counts: make([]int, len(filters)), oldest: make([]nostr.Timestamp, len(filters))}
	ss.page = pg
	ss.s.p.m.pages.WithLabelValues(ss.s.url).Inc()
	return ss.c.write(nostr.ReqEnvelope{SubscriptionID: pg.id, Filters: filters})
}

// pageDone ends the page in flight (complete: its EOSE came): the next page
// of the same sub if some filter returned its limit again, else the sub is
// caught up; then the next queued sub pages.
func (ss *session) pageDone(ctx context.Context, complete bool) error {
	pg := ss.page
	if pg != nil {
		ss.page = nil
		if complete {
			if err := ss.c.write(nostr.CloseEnvelope(pg.id)); err != nil {
				return err
			}
		}
		parent := pg.parent
		if ss.byID[parent.id] == parent && parent.state == subActive {
			pages, stuck := nextPages(pg.sent, allTrue(len(pg.sent)), pg.counts, pg.oldest)
			ss.noteStuck(stuck)
			if complete && len(pages) > 0 {
				return ss.sendPage(parent, pages)
			}
			if err := ss.caughtUp(ctx, parent); err != nil {
				return err
			}
		}
	}
	return ss.nextPage(ctx)
}

func (ss *session) noteStuck(n int) {
	if n > 0 {
		ss.s.log.Warn("relay returned its limit of stored events within one second: older ones of that second cannot be paged", "filters", n)
	}
}

func (ss *session) maybeEOSE(ctx context.Context) error {
	live := 0
	for _, sub := range ss.subs {
		if sub.state == subPermanent {
			continue
		}
		live++
		if !sub.eose {
			return nil
		}
	}
	if live == 0 || ss.eoseReported {
		return nil
	}
	ss.eoseReported = true
	ss.s.mu.Lock()
	ss.s.st.EOSESeen = true
	ss.s.st.ClosedPermanently = false
	ss.s.st.ClosedReason = ""
	ss.s.closedWarned = ""
	ss.s.mu.Unlock()
	if !ss.s.p.deliver(ctx, Received{Relay: ss.s.url, At: ss.s.p.opts.Now(), EOSE: true}) {
		return ctx.Err()
	}
	return nil
}

// subscribeAll brings the connection's REQs in line with the pool's
// interests: REQs whose filters did not change stay as they are, new ones
// are sent (before the old ones are closed when the relay's subscription
// budget allows both at once, so nothing stored in between is missed), and
// the others are closed.
func (ss *session) subscribeAll() error {
	planned, choices := plan(ss.s.p.currentInterests(), ss.s.limits(), ss.s.p.cfg)
	old := make(map[string]*mainSub, len(ss.subs))
	for _, sub := range ss.subs {
		if _, dup := old[sub.key]; !dup {
			old[sub.key] = sub
		} else {
			old[sub.key+"\x00"+sub.id] = sub
		}
	}
	var next, fresh []*mainSub
	for _, pr := range planned {
		if sub, ok := old[pr.key]; ok {
			delete(old, pr.key)
			next = append(next, sub)
			continue
		}
		sub := &mainSub{base: pr.base, key: pr.key}
		next = append(next, sub)
		fresh = append(fresh, sub)
	}
	ss.subs = next
	for _, sub := range old {
		ss.retiring = append(ss.retiring, sub)
	}
	// The replaced REQs stay open until the new ones caught up (retire),
	// when the relay's budget has room for both; otherwise they close
	// first, and the stream has a gap.
	if len(next)+len(ss.retiring) > ss.s.p.cfg.mainBudget(ss.s.limits()) {
		if err := ss.gap(ss.c.ctx); err != nil {
			return err
		}
		if err := ss.retire(true); err != nil {
			return err
		}
	}
	if len(fresh) > 0 {
		ss.eoseReported = false
	}
	for _, sub := range fresh {
		if err := ss.send(sub); err != nil {
			return err
		}
	}
	if len(fresh) == 0 {
		if err := ss.retire(false); err != nil {
			return err
		}
	}
	ss.s.mu.Lock()
	ss.s.st.REQs = len(next)
	ss.s.st.Choices = choices
	ss.s.mu.Unlock()
	for _, c := range choices {
		if !c.Fits {
			ss.s.log.Warn("relay limits leave too few subscriptions: part of an interest is not subscribed",
				"interest", c.Interest, "reqs", c.REQs)
		}
	}
	if len(ss.subs) == 0 {
		return nil
	}
	return ss.maybeEOSE(ss.c.ctx)
}

// send (re)sends sub's REQ under a fresh id, with since from the cursor and
// a limit on every filter without one (so that a relay's cut is seen and
// paged through).
func (ss *session) send(sub *mainSub) error {
	if sub.id != "" {
		// Sent again (after a CLOSED, or a REQ that raced the AUTH):
		// events between the two REQs may be missing.
		if err := ss.gap(ss.c.ctx); err != nil {
			return err
		}
		delete(ss.byID, sub.id)
		ss.setLive(sub.id, false)
		if ss.page != nil && ss.page.parent == sub {
			_ = ss.c.write(nostr.CloseEnvelope(ss.page.id))
			ss.page = nil
		}
	}
	sub.id = ss.c.nextID("pa-sub-")
	ss.byID[sub.id] = sub
	sub.eose, sub.gotEOSE = false, false
	ss.eoseReported = false
	sub.state = subActive
	sub.sentAuthed = ss.c.isAuthed()
	sub.sentAt = ss.s.p.opts.Now()
	l := ss.s.limits()
	fs, pageable := withLimits(withSince(sub.base, ss.s.p.opts.sinceOf()), l, ss.s.p.cfg.pageLimit(l))
	sub.pageable = pageable
	sub.sent = fs
	sub.counts = make([]int, len(fs))
	sub.oldest = make([]nostr.Timestamp, len(fs))
	return ss.c.write(nostr.ReqEnvelope{SubscriptionID: sub.id, Filters: fs})
}

func (ss *session) handleClosed(sub *mainSub, reason string) error {
	// The relay ended one REQ: its live events stop until it is sent
	// again (a gap whatever comes next).
	if err := ss.gap(ss.c.ctx); err != nil {
		return err
	}
	prefix := reasonPrefix(reason)
	permanent := permanentClosed(prefix)
	if prefix == PrefixAuthRequired {
		switch {
		case sub.sentAuthed || ss.s.p.opts.SecretKey == "" || ss.c.authFailed:
			permanent = true
			// The AUTH may have failed before this CLOSED came: name it.
			if why := ss.c.authFailure(); why != "" && !strings.Contains(reason, "AUTH failed") {
				reason += " (AUTH failed: " + why + ")"
			}
		case ss.c.isAuthed():
			// The REQ raced the AUTH: send it again now.
			ss.s.p.m.closed.WithLabelValues(ss.s.url, "false").Inc()
			return ss.send(sub)
		default:
			sub.state = subWaitAuth
			ss.s.p.m.closed.WithLabelValues(ss.s.url, "false").Inc()
			return nil
		}
	}
	if permanent {
		sub.state = subPermanent
		ss.s.p.m.closed.WithLabelValues(ss.s.url, "true").Inc()
		ss.s.mu.Lock()
		ss.s.st.ClosedPermanently = true
		ss.s.st.ClosedReason = reason
		ss.s.st.LastError = "subscription closed: " + reason
		// One WARN per class until an EOSE clears it, however often the
		// connection comes back to the same refusal.
		repeat := ss.s.closedWarned == prefix
		ss.s.closedWarned = prefix
		ss.s.mu.Unlock()
		if repeat {
			ss.s.log.Info("relay closed the subscription permanently again", "reason", reason, "class", prefix)
		} else {
			ss.s.log.Warn("relay closed the subscription permanently: no events from it until it is reconnected", "reason", reason, "class", prefix)
		}
		return nil
	}
	ss.s.p.m.closed.WithLabelValues(ss.s.url, "false").Inc()
	if ss.s.p.opts.Now().Sub(sub.sentAt) >= ss.s.p.cfg.StableAfter {
		// The REQ served for a while: a fresh CLOSED starts a fresh backoff.
		sub.attempt = 0
	}
	backoff := ss.s.p.cfg.Backoff()
	delay := backoff.Delay(sub.attempt, ss.s.p.opts.Rand())
	sub.attempt++
	sub.state = subRetry
	sub.retryAt = time.Now().Add(delay)
	ss.s.log.Info("relay closed the subscription, resubscribing", "reason", reason, "in", delay)
	ss.armRetry()
	return nil
}

func (ss *session) armRetry() {
	var next time.Time
	for _, sub := range ss.subs {
		if sub.state == subRetry && (next.IsZero() || sub.retryAt.Before(next)) {
			next = sub.retryAt
		}
	}
	if ss.retry != nil {
		ss.retry.Stop()
		ss.retry = nil
	}
	if !next.IsZero() {
		ss.retry = time.NewTimer(time.Until(next))
	}
}

func (ss *session) retryDue() error {
	now := time.Now()
	for _, sub := range ss.subs {
		if sub.state == subRetry && !sub.retryAt.After(now) {
			if err := ss.send(sub); err != nil {
				return err
			}
		}
	}
	ss.armRetry()
	return nil
}
