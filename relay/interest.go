package relay

import (
	"crypto/sha256"

	"github.com/nbd-wtf/go-nostr"
)

// Interest is one part of the pool's subscription, given as alternatives
// from the narrowest to the coarsest. On every relay the pool subscribes,
// interest by interest in order, the first alternative whose REQs fit what
// the relay still allows (its max_subscriptions less the query slots, REQ
// frames within its max_message_length, at most max_filters filters per
// REQ), and the last alternative when none fits. So a relay with tight
// limits gets a coarser filter instead of REQs it would refuse or, like
// @nostr-relay/core past 20 subscriptions, silently drop.
type Interest struct {
	// Name labels the interest in logs and Status.
	Name string
	// Alternatives are filter sets, narrowest first. Each filter's tag
	// values and items must already fit the relays (at most 256 values per
	// tag, items of at most 255 bytes): the pool packs filters into REQs,
	// it never splits one.
	Alternatives [][]nostr.Filter

	// encoded holds each alternative's filters as JSON, made once when
	// the pool takes the interests (cloneInterests) for the plans of every
	// relay: at 100,000 workloads encoding them per relay and per use was
	// a fifth of the agent's CPU.
	encoded [][][]byte
}

// filterJSON returns the JSON of alternative j's filter i (encoded when
// cloneInterests did not).
func (it *Interest) filterJSON(j, i int) []byte {
	if j < len(it.encoded) && i < len(it.encoded[j]) {
		return it.encoded[j][i]
	}
	return encodeFilter(it.Alternatives[j][i])
}

// encodeFilter is f's JSON (nil when it cannot be encoded), by go-nostr's
// encoder called directly (json.Marshal scans its output once more).
func encodeFilter(f nostr.Filter) []byte {
	b, err := f.MarshalJSON()
	if err != nil {
		return nil
	}
	return b
}

// Choice is the alternative an interest got on one relay.
type Choice struct {
	Interest    string
	Alternative int // index into Interest.Alternatives
	REQs        int
	// Fits is false when even the last alternative needed more REQs than
	// the relay allowed: only the first ones were sent.
	Fits bool
}

func cloneInterests(in []Interest) []Interest {
	out := make([]Interest, len(in))
	for i, it := range in {
		out[i] = Interest{Name: it.Name, Alternatives: make([][]nostr.Filter, len(it.Alternatives)),
			encoded: make([][][]byte, len(it.Alternatives))}
		for j, alt := range it.Alternatives {
			out[i].Alternatives[j] = cloneFilters(alt)
			enc := make([][]byte, len(alt))
			for k, f := range alt {
				enc[k] = encodeFilter(f)
			}
			out[i].encoded[j] = enc
		}
	}
	return out
}

// reqFrameOverhead bounds what a REQ frame adds to its filters'
// JSON: ["REQ","pa-sub-<n>", and the closing bracket.
const reqFrameOverhead = 48

// filterSlack bounds what since, until and limit add to a filter when it is
// sent (they are applied per (re)subscription, after packing).
const filterSlack = 64

// filterSize is the size of a filter whose JSON is j as packed, with room
// for since, until and limit.
func filterSize(j []byte) int {
	if j == nil {
		return 1 << 20
	}
	return len(j) + filterSlack
}

// reqGroup is one REQ's filters and their JSON.
type reqGroup struct {
	filters nostr.Filters
	json    [][]byte
}

// packFilters groups alternative j of it, in order, into REQs of at most
// maxFilters filters (0: no limit) whose frames stay within frame bytes (a
// filter bigger than frame alone is a REQ of its own).
func packFilters(it *Interest, j, maxFilters, frame int) []reqGroup {
	var groups []reqGroup
	var cur reqGroup
	size := reqFrameOverhead
	for i, f := range it.Alternatives[j] {
		fj := it.filterJSON(j, i)
		n := filterSize(fj) + 1
		if len(cur.filters) > 0 && ((maxFilters > 0 && len(cur.filters) >= maxFilters) || size+n > frame) {
			groups = append(groups, cur)
			cur, size = reqGroup{}, reqFrameOverhead
		}
		cur.filters = append(cur.filters, f)
		cur.json = append(cur.json, fj)
		size += n
	}
	if len(cur.filters) > 0 {
		groups = append(groups, cur)
	}
	return groups
}

// packPlain is packFilters for filters used once (a query's).
func packPlain(fs []nostr.Filter, maxFilters, frame int) []nostr.Filters {
	it := Interest{Alternatives: [][]nostr.Filter{fs}}
	var out []nostr.Filters
	for _, g := range packFilters(&it, 0, maxFilters, frame) {
		out = append(out, g.filters)
	}
	return out
}

// plannedREQ is one REQ of a plan: its filters (without since) and a key
// that identifies them, so that a new plan keeps the REQs it shares with
// the old one.
type plannedREQ struct {
	base nostr.Filters
	key  string
}

// plan chooses an alternative per interest for a relay with limits l and
// packs them into REQs: at most budget REQs (when the last alternative of
// an interest does not fit, its first REQs are kept and Fits says so).
func plan(interests []Interest, l Limits, cfg Config) ([]plannedREQ, []Choice) {
	budget := cfg.mainBudget(l)
	frame := cfg.frameBudget(l)
	var out []plannedREQ
	var choices []Choice
	used := 0
	for k := range interests {
		it := &interests[k]
		if len(it.Alternatives) == 0 {
			continue
		}
		var groups []reqGroup
		choice := Choice{Interest: it.Name, Fits: true}
		for j := range it.Alternatives {
			groups = packFilters(it, j, l.MaxFilters, frame)
			choice.Alternative = j
			if used+len(groups) <= budget {
				break
			}
		}
		if over := used + len(groups) - budget; over > 0 {
			choice.Fits = false
			groups = groups[:max(len(groups)-over, 0)]
		}
		choice.REQs = len(groups)
		used += len(groups)
		choices = append(choices, choice)
		for _, g := range groups {
			out = append(out, plannedREQ{base: g.filters, key: filtersKey(g.json)})
		}
	}
	return out, choices
}

// filtersKey identifies a REQ by its filters' JSON (without since, which
// is applied when it is sent): their SHA-256, not the JSON itself, which a
// subscription narrowed to thousands of workloads held once per REQ and
// relay for as long as the connection lasted (3.4 MB at 10,000 workloads).
func filtersKey(js [][]byte) string {
	h := sha256.New()
	for _, j := range js {
		h.Write(j)
		h.Write([]byte{'\n'})
	}
	return string(h.Sum(nil))
}

// mainBudget is how many REQs the subscription may keep open on a relay
// with limits l: its max_subscriptions (AssumedMaxSubscriptions when it
// advertises none) less the query slots and one catch-up page.
func (c Config) mainBudget(l Limits) int {
	maxSubs := l.MaxSubscriptions
	if maxSubs <= 0 {
		maxSubs = c.AssumedMaxSubscriptions
	}
	return max(maxSubs-c.QuerySlots-1, 1)
}

// frameBudget is the largest REQ frame sent to a relay with limits l.
func (c Config) frameBudget(l Limits) int {
	if l.MaxMessageLength > 0 {
		return max(l.MaxMessageLength-512, 1024)
	}
	return c.AssumedMaxMessageLength
}

// pageLimit is the limit put on filters that have none, so that a relay's
// cut (strfry returns at most 500 per filter, @nostr-relay/core 100 unless
// asked for more) is seen and the rest read page by page.
func (c Config) pageLimit(l Limits) int {
	if l.MaxLimit > 0 {
		return l.MaxLimit
	}
	return c.PageLimit
}

// nextPages returns the catch-up pages due after a REQ's stored events:
// for every pageable filter that returned its limit, the same filter until
// the oldest created_at it returned (inclusive: events sharing that second
// may have been cut). A filter whose page made no progress (more than limit
// events in one second) is left, and reported in stuck. Pageable filters
// are those whose limit the pool set or a relay's max_limit cut (a limit
// the caller chose and the relay honoured is not paged).
func nextPages(sent nostr.Filters, pageable []bool, counts []int, oldest []nostr.Timestamp) (pages nostr.Filters, stuck int) {
	for i, f := range sent {
		if !pageable[i] || f.LimitZero || f.Limit <= 0 || counts[i] < f.Limit {
			continue
		}
		if f.Until != nil && *f.Until <= oldest[i] {
			stuck++
			continue
		}
		p := f.Clone()
		u := oldest[i]
		p.Until = &u
		pages = append(pages, p)
	}
	return pages, stuck
}

// withLimits gives every filter without a limit the pool's page limit,
// clamps the others to the relay's max_limit, and says which are pageable
// (see nextPages).
func withLimits(fs nostr.Filters, l Limits, pageLimit int) (out nostr.Filters, pageable []bool) {
	out = make(nostr.Filters, len(fs))
	pageable = make([]bool, len(fs))
	for i, f := range fs {
		switch {
		case f.LimitZero:
		case f.Limit == 0:
			f.Limit, pageable[i] = pageLimit, true
		case l.MaxLimit > 0 && f.Limit > l.MaxLimit:
			f.Limit, pageable[i] = l.MaxLimit, true
		}
		out[i] = f
	}
	return out, pageable
}

func allTrue(n int) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = true
	}
	return out
}

// countStored counts a stored event towards every filter of sent it
// matches (for nextPages).
func countStored(sent nostr.Filters, counts []int, oldest []nostr.Timestamp, ev *nostr.Event) {
	for i := range sent {
		if sent[i].Matches(ev) {
			counts[i]++
			if counts[i] == 1 || ev.CreatedAt < oldest[i] {
				oldest[i] = ev.CreatedAt
			}
		}
	}
}

// interestsOf turns plain filters (Options.Filters, SetFilters) into one
// interest (not a copy: the pool takes it through cloneInterests).
func interestsOf(fs []nostr.Filter) []Interest {
	if len(fs) == 0 {
		return nil
	}
	return []Interest{{Name: "filters", Alternatives: [][]nostr.Filter{fs}}}
}
