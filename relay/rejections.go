package relay

import (
	"context"
	"time"
)

// rejectionLogEvery is how often one relay may log a WARN line for the same
// class of rejection (or NOTICE); lines in between are counted and the
// count is reported with the next one.
const rejectionLogEvery = time.Minute

// Local causes of outcomes the relay did not explain, as reason labels.
const (
	causeNotConnected   = "not_connected"
	causeConnectionLost = "connection_lost"
	causeNoOK           = "no_ok"
	causeTooLarge       = "too_large"
	causeEncode         = "encode"
	causePoolClosed     = "pool_closed"
	causeNone           = "none"
	causeOther          = "other"
)

// ReasonLabels are every value of relay_publish_total's reason label: the
// relay's prefix class, "none" (no reason given), "other" (a reason without
// a known prefix) or the local cause of an outcome the relay did not
// explain.
var ReasonLabels = []string{
	PrefixDuplicate, PrefixPoW, PrefixBlocked, PrefixRateLimited, PrefixInvalid, PrefixError,
	PrefixAuthRequired, PrefixRestricted, PrefixMute, PrefixUnsupported, PrefixReplaced, PrefixDeleted,
	causeNone, causeOther, causeNotConnected, causeConnectionLost, causeNoOK, causeTooLarge, causeEncode, causePoolClosed,
}

// ReasonLabel is o's value of relay_publish_total's bounded reason label
// (one of ReasonLabels), for metrics of the caller's own.
func (o RelayOutcome) ReasonLabel() string { return o.reasonLabel() }

// reasonLabel is o's value of relay_publish_total's bounded reason label.
func (o RelayOutcome) reasonLabel() string {
	switch {
	case o.Prefix != "":
		return o.Prefix
	case o.cause != "":
		return o.cause
	case o.Reason == "":
		return causeNone
	}
	return causeOther
}

// isRejection reports whether o is the relay refusing the event (as opposed
// to accepting it, muting an ephemeral event nobody listens to, or saying
// nothing at all).
func (o RelayOutcome) isRejection() bool {
	switch o.Outcome {
	case OutcomeRejected, OutcomeRateLimited:
		return true
	case OutcomeTimedOut:
		return o.Notice != ""
	}
	return false
}

// noteOutcome records one publish outcome of an event of the given kind:
// a rejection becomes the relay's LastRejection and a WARN line (at most one
// per class per rejectionLogEvery); an acceptance ends a publish backoff.
func (s *supervisor) noteOutcome(kind int, id string, o RelayOutcome) {
	if o.Outcome == OutcomeAccepted {
		s.mu.Lock()
		s.pubAttempt, s.pubHoldUntil, s.pubHoldReason = 0, time.Time{}, ""
		s.st.PublishBackoffUntil = time.Time{}
		s.mu.Unlock()
		return
	}
	if !o.isRejection() {
		return
	}
	now := s.p.opts.Now()
	reason := o.Reason
	if o.Notice != "" {
		reason = o.Notice
	}
	class := o.reasonLabel()
	s.mu.Lock()
	s.st.LastRejection = Rejection{At: now, Kind: kind, EventID: id, Outcome: o.Outcome, Reason: reason, Prefix: o.Prefix}
	write, suppressed := s.allowLogLocked("reject:"+class, now)
	s.mu.Unlock()
	if !write {
		return
	}
	args := []any{"kind", kind, "event", id, "outcome", o.Outcome, "class", class, "reason", reason}
	if suppressed > 0 {
		args = append(args, "similar_since_last_warning", suppressed)
	}
	switch o.Outcome {
	case OutcomeTimedOut:
		s.log.Warn("relay sent no OK for our event and a NOTICE, its probable reason", args...)
	case OutcomeRateLimited:
		s.log.Warn("our event not sent: the relay asked us to slow down", args...)
	default:
		s.log.Warn("relay rejected our event", args...)
	}
}

// allowLogLocked reports whether a line of this key may be written now,
// and how many were suppressed since the last one (s.mu held).
func (s *supervisor) allowLogLocked(key string, now time.Time) (bool, int) {
	if s.rejectLog == nil {
		s.rejectLog = make(map[string]*logWindow)
	}
	w := s.rejectLog[key]
	if w == nil {
		w = &logWindow{}
		s.rejectLog[key] = w
	}
	if !w.last.IsZero() && now.Sub(w.last) < rejectionLogEvery {
		w.suppressed++
		return false, 0
	}
	n := w.suppressed
	w.last, w.suppressed = now, 0
	return true, n
}

// logNotice logs a relay NOTICE: at WARN when it was attached to waiting
// publishes (its words explain their missing OK; noteOutcome reports those
// that time out), at INFO otherwise; rate-limited per class like rejections.
func (s *supervisor) logNotice(text string, attached int) {
	class := reasonPrefix(text)
	if class == "" {
		class = causeOther
	}
	s.mu.Lock()
	write, suppressed := s.allowLogLocked("notice:"+class, s.p.opts.Now())
	s.mu.Unlock()
	if !write {
		return
	}
	args := []any{"notice", text, "class", class}
	if suppressed > 0 {
		args = append(args, "similar_since_last_line", suppressed)
	}
	if attached > 0 {
		s.log.Warn("relay NOTICE while our publishes awaited their OK", append(args, "publishes_waiting", attached)...)
		return
	}
	s.log.Info("relay NOTICE", args...)
}

// rateLimited starts (or lengthens) the publish backoff after an OK
// "rate-limited:" and returns when publishes may resume.
func (s *supervisor) rateLimited(reason string) time.Time {
	backoff := s.p.cfg.Backoff()
	now := s.p.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	until := now.Add(backoff.Delay(s.pubAttempt, s.p.opts.Rand()))
	s.pubAttempt++
	if until.After(s.pubHoldUntil) {
		s.pubHoldUntil = until
	}
	s.pubHoldReason = reason
	s.st.PublishBackoffUntil = s.pubHoldUntil
	return s.pubHoldUntil
}

// waitPublishBackoff waits out a publish backoff if ctx's deadline allows
// it. It returns false, with the relay's rate-limited reason, when the
// deadline comes first (the event is then not sent to this relay).
func (s *supervisor) waitPublishBackoff(ctx context.Context) (bool, string) {
	s.mu.Lock()
	until, reason := s.pubHoldUntil, s.pubHoldReason
	s.mu.Unlock()
	wait := until.Sub(s.p.opts.Now())
	if wait <= 0 {
		return true, ""
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
		return false, reason
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true, ""
	case <-ctx.Done():
		return false, reason
	}
}
