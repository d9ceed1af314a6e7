package agent

import (
	"slices"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/relay"
)

// Subscription shape. The agent asks the relays only for
// what its leases need, so that other providers' traffic costs it nothing:
//
//   - heartbeats (kinds 38384, 38389 stored, 20384 live) by the providers
//     its tracked leases name, this provider included;
//   - revocations (38385) addressed to this provider (#p);
//   - lease grants (38388) naming this provider (#p) from trusted issuers
//     only (none when no issuer is trusted: grants then come from the
//     local operator alone);
//   - claims and announcements (38386) of the tracked workloads, by #d,
//     or by the providers named once the workloads need more than
//     claimDFilters filters (claimAlternatives).
//
// Lists are chunked to what every relay takes: at most 256 values per tag
// or author filter (@nostr-relay/core's limit), items of at most 255 bytes
// (lease.MaxIDBytes keeps d tags within). relay packs the filters
// into REQs per relay (max_filters, frame size, max_subscriptions less
// query slots) and falls back, per interest, to a coarser alternative
// where the narrow one needs more REQs than the relay allows: claims by
// the providers named instead of by workload, then by kind alone; the
// ingest checks every event anyway.
const (
	// filterValues is the most values one filter carries per list.
	filterValues = 256
	// claimWorkloads is how many workloads one claim filter covers (two d
	// tags each: the claim's and the Paygress announcement's).
	claimWorkloads = filterValues / 2
	// subsEvery bounds how often the subscription is recomputed while
	// leases come and go.
	subsEvery = time.Second
)

// subscriptions holds the tracked workloads and providers in stable chunks:
// an item keeps its chunk while it stays, new items fill the last chunk,
// so a lease coming or going changes one filter and relay re-sends
// only the REQ that holds it.
type subscriptions struct {
	workloads chunker // tracked workloads that are not terminal
	providers chunker // the providers their leases name, and this one
	dirty     bool    // the tracked set may have changed since the last update
	lastSet   time.Time
}

// chunker keeps a set of strings in chunks of at most size, in insertion
// order.
type chunker struct {
	size   int
	chunks [][]string
	where  map[string]int
}

// sync makes the chunks hold exactly want; it reports whether anything
// changed.
func (c *chunker) sync(want map[string]bool) bool {
	if c.where == nil {
		c.where = map[string]int{}
	}
	changed := false
	gone := map[int]bool{}
	for item, i := range c.where {
		if !want[item] {
			delete(c.where, item)
			gone[i] = true
		}
	}
	if len(gone) > 0 {
		changed = true
		kept := c.chunks[:0]
		for i, ch := range c.chunks {
			if gone[i] {
				ch = slices.DeleteFunc(slices.Clone(ch), func(s string) bool { _, ok := c.where[s]; return !ok })
			}
			if len(ch) > 0 {
				kept = append(kept, ch)
			}
		}
		c.chunks = kept
		for i, ch := range c.chunks {
			for _, s := range ch {
				c.where[s] = i
			}
		}
	}
	var added []string
	for item := range want {
		if _, ok := c.where[item]; !ok {
			added = append(added, item)
		}
	}
	slices.Sort(added) // deterministic filters for the same set
	for _, item := range added {
		changed = true
		last := len(c.chunks) - 1
		if last < 0 || len(c.chunks[last]) >= c.size {
			c.chunks = append(c.chunks, nil)
			last++
		} else {
			c.chunks[last] = slices.Clone(c.chunks[last]) // filters handed out keep theirs
		}
		c.chunks[last] = append(c.chunks[last], item)
		c.where[item] = last
	}
	return changed
}

// refresh recomputes the tracked sets from the lease table (machine
// goroutine, or New); it reports whether they changed.
func (s *subscriptions) refresh(a *Agent) bool {
	if s.workloads.size == 0 {
		s.workloads.size, s.providers.size = claimWorkloads, filterValues
	}
	ws, ps := a.inbound.policy.tracked()
	ps[a.me.self] = true
	w := s.workloads.sync(ws)
	p := s.providers.sync(ps)
	s.dirty = false
	return w || p
}

// interests is the subscription for the current sets (see the comment at
// the top of this file).
func (s *subscriptions) interests(a *Agent) []relay.Interest {
	var narrowHB []nostr.Filter
	for _, ch := range s.providers.chunks {
		narrowHB = append(narrowHB,
			nostr.Filter{Kinds: []int{heartbeat.KindHeartbeat, heartbeat.KindHeartbeatShard}, Authors: ch},
			nostr.Filter{Kinds: []int{heartbeat.KindHeartbeatEphemeral}, Authors: ch, LimitZero: true},
		)
	}
	coarseHB := []nostr.Filter{
		{Kinds: []int{heartbeat.KindHeartbeat, heartbeat.KindHeartbeatShard}},
		{Kinds: []int{heartbeat.KindHeartbeatEphemeral}, LimitZero: true},
	}
	out := []relay.Interest{
		{Name: "heartbeats", Alternatives: [][]nostr.Filter{narrowHB, coarseHB}},
		{Name: "revocations", Alternatives: [][]nostr.Filter{{{Kinds: []int{heartbeat.KindRevocation}, Tags: nostr.TagMap{"p": {a.me.self}}}}}},
	}
	if issuers := a.cfg.TrustedIssuers; len(issuers) > 0 {
		var grants []nostr.Filter
		for ch := range slices.Chunk(slices.Clone(issuers), filterValues) {
			grants = append(grants, nostr.Filter{Kinds: []int{heartbeat.KindLeaseGrant}, Authors: ch, Tags: nostr.TagMap{"p": {a.me.self}}})
		}
		out = append(out, relay.Interest{Name: "grants", Alternatives: [][]nostr.Filter{grants}})
	}
	if len(s.workloads.chunks) > 0 {
		var byD, byAuthor []nostr.Filter
		for _, ch := range s.workloads.chunks {
			byD = append(byD, heartbeat.ClaimsFilter(ch))
		}
		for _, ch := range s.providers.chunks {
			// Our own claims come back only to be dropped (decode): not
			// asked for (a mass retake's 100,000 claims, each sent back by
			// every relay and paged through at every reconnection).
			if ch = slices.DeleteFunc(slices.Clone(ch), func(p string) bool { return p == a.me.self }); len(ch) > 0 {
				byAuthor = append(byAuthor, nostr.Filter{Kinds: []int{heartbeat.KindPromotion}, Authors: ch})
			}
		}
		out = append(out, relay.Interest{Name: "claims", Alternatives: claimAlternatives(byD, byAuthor)})
	}
	return out
}

// claimDFilters is the most claim filters by workload (claimWorkloads each)
// the agent subscribes with before it prefers claims by author. A relay
// matches every event it stores against every open filter, and khatru (as
// go-nostr's Filter.Matches) does so by scanning each filter's lists: the
// 782 filters of 100,000 workloads cost it 200,000 string comparisons for
// each claim and a kind check of each filter for every other event, which
// made three khatru-based relays the bottleneck of BenchmarkAgentScale's
// retake on two cores. Claims by the providers the leases name are a
// superset of what the lease machine reads (it ignores claims by anyone
// else, and the ingest drops claims for workloads not tracked), in one
// filter per 256 providers; this provider is left out (its own claims are
// dropped as they arrive).
const claimDFilters = 8

// claimAlternatives orders the claims subscription's alternatives, most
// preferred first (relay takes the first that fits the relay's limits):
// by workload while they fit in claimDFilters filters, else by author
// first; by kind alone last.
func claimAlternatives(byD, byAuthor []nostr.Filter) [][]nostr.Filter {
	byKind := []nostr.Filter{{Kinds: []int{heartbeat.KindPromotion}}}
	switch {
	case len(byAuthor) == 0: // no provider but this one: nothing to ask by author
		return [][]nostr.Filter{byD, byKind}
	case len(byD) > claimDFilters && len(byAuthor) < len(byD):
		return [][]nostr.Filter{byAuthor, byD, byKind}
	}
	return [][]nostr.Filter{byD, byAuthor, byKind}
}

// updateSubs sends the subscription again when the tracked sets changed,
// at most every subsEvery (machine goroutine, on ticks).
func (a *Agent) updateSubs(now time.Time) {
	if !a.m.subs.dirty || now.Sub(a.m.subs.lastSet) < subsEvery {
		return
	}
	a.m.subs.lastSet = now
	if !a.m.subs.refresh(a) {
		return
	}
	a.pool.SetInterests(a.m.subs.interests(a))
	a.logger.Debug("subscription updated", "workloads", len(a.m.subs.workloads.where), "providers", len(a.m.subs.providers.where))
}

// sinceFor is the since of each subscription filter at a (re)subscription:
// now minus stale for stored heartbeats (older ones can no longer count),
// none for ephemeral ones (live only), the cursor for everything else.
//
// The stored-heartbeat catch-up matters for safety, not only for speed: a
// standby whose connection to a relay drops for less than a heartbeat
// interval keeps its own unbroken run of heartbeats there (its publishes are
// re-sent on the next connection) but would otherwise never see the holder's
// heartbeats stored during the outage, and could count the holder's silence
// on that relay towards a takeover. relay reads the catch-up page by
// page when a relay cuts it at its limit.
func (a *Agent) sinceFor(f nostr.Filter) nostr.Timestamp {
	switch {
	case slices.Contains(f.Kinds, heartbeat.KindHeartbeat):
		return nostr.Timestamp(a.now().Add(-a.cfg.Lease.Stale).Unix())
	case slices.Contains(f.Kinds, heartbeat.KindHeartbeatEphemeral):
		return 0
	}
	return a.since()
}
