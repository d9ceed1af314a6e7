package heartbeat

import (
	"slices"
	"time"

	"github.com/nbd-wtf/go-nostr"
)

// FilterParams say what a provider subscribes to. Keys are lower-case hex.
type FilterParams struct {
	// Self is this provider (lease grants naming it are fetched).
	Self string
	// Providers are the providers of the tracked workloads (self included):
	// their heartbeats and revocations are fetched.
	Providers []string
	// Workloads are the tracked workload ids: their promotion claims and
	// announcements are fetched by d tag (Paygress queries announcements
	// the same way).
	Workloads []string
	// Issuers, when set, restrict lease grants to these authors.
	Issuers []string
	// Since is the subscription cursor; zero means no lower bound. Heartbeat
	// filters never reach back further than heartbeatWindow before now.
	Since time.Time
	// HeartbeatWindow bounds how far back heartbeats are asked for (the
	// lease's Stale): older ones would not count. Zero means Since alone.
	HeartbeatWindow time.Duration
	// Now is the local time the filters are built at.
	Now time.Time
}

// Filters returns the NIP-01 filters of the protocol for p: heartbeats (both
// kinds) and revocations by the providers, promotion claims of the workloads
// (by d tag, since relays index only single-letter tags), and lease grants
// naming Self. Empty lists leave their filter out.
func Filters(p FilterParams) nostr.Filters {
	var since *nostr.Timestamp
	if !p.Since.IsZero() {
		ts := nostr.Timestamp(p.Since.Unix())
		since = &ts
	}
	hbSince := since
	if p.HeartbeatWindow > 0 && !p.Now.IsZero() {
		ts := nostr.Timestamp(p.Now.Add(-p.HeartbeatWindow).Unix())
		if hbSince == nil || *hbSince < ts {
			hbSince = &ts
		}
	}
	var fs nostr.Filters
	if len(p.Providers) > 0 {
		providers := slices.Clone(p.Providers)
		fs = append(fs,
			nostr.Filter{Kinds: []int{KindHeartbeat, KindHeartbeatEphemeral}, Authors: providers, Since: hbSince},
			nostr.Filter{Kinds: []int{KindRevocation}, Authors: slices.Clone(providers), Since: since},
		)
	}
	if len(p.Workloads) > 0 {
		ds := make([]string, 0, 2*len(p.Workloads))
		for _, w := range p.Workloads {
			ds = append(ds, ClaimDTag(w), PromotionDTag(w))
		}
		fs = append(fs, nostr.Filter{Kinds: []int{KindPromotion}, Tags: nostr.TagMap{"d": ds}, Since: since})
	}
	if p.Self != "" {
		f := nostr.Filter{Kinds: []int{KindLeaseGrant}, Tags: nostr.TagMap{"p": {p.Self}}, Since: since}
		if len(p.Issuers) > 0 {
			f.Authors = slices.Clone(p.Issuers)
		}
		fs = append(fs, f)
	}
	return fs
}
