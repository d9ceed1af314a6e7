package agent

// What a node can check before it joins a fleet (provider-agent doctor),
// with the formulas the running agent uses: the heartbeat budget a set of
// relays' NIP-11 limits allows, and the clock check against the relays.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/lease"
	"provideragent/relay"
)

// BeatTags is the most tags an event of a beat carries: a relay whose
// NIP-11 max_event_tags is lower refuses our heartbeats.
const BeatTags = beatTags

// BeatBudget is the size bound of every event of a beat published to
// relays with these NIP-11 limits: 60 KiB (heartbeat.DefaultMaxEventBytes,
// under strfry's 65,536-byte events, which it does not advertise), and
// within every relay's max_message_length (less the EVENT frame) and
// max_content_length (content 0: no bound but the event's).
func BeatBudget(limits []relay.Limits) (event, content int) {
	event = heartbeat.DefaultMaxEventBytes
	for _, l := range limits {
		if l.MaxMessageLength > 0 {
			event = min(event, l.MaxMessageLength-eventFrameOverhead)
		}
		if l.MaxContentLength > 0 && (content == 0 || l.MaxContentLength < content) {
			content = l.MaxContentLength
		}
	}
	return event, content
}

// BeatFit builds (with a throwaway key) the beat the agent would publish to
// relays with these limits while it holds n workloads whose ids have the
// longest allowed length (lease.MaxIDBytes), so that a fit holds for any
// ids: how many events one beat takes (its shards and the ephemeral copy)
// and the largest, or why it cannot be built at all.
func BeatFit(n int, limits []relay.Limits) (events, maxBytes int, err error) {
	keys, err := identity.NewKeys(strings.Repeat("07", 32))
	if err != nil {
		return 0, 0, err
	}
	held := make([]heartbeat.WorkloadEpoch, n)
	for i := range held {
		id := fmt.Sprintf("w%d-", i)
		id += strings.Repeat("x", lease.MaxIDBytes-len(id))
		held[i] = heartbeat.WorkloadEpoch{ID: id, Epoch: 1 << 40}
	}
	maxEvent, maxContent := BeatBudget(limits)
	beat, err := heartbeat.BuildBeat(keys, heartbeat.HeartbeatParams{
		At: time.Now(), Workloads: held, TTL: heartbeat.DefaultHeartbeatTTL,
		MaxEventBytes: maxEvent, MaxContentBytes: maxContent,
	})
	if err != nil {
		return 0, 0, err
	}
	return len(beat.Stored) + 1, beat.MaxSize(), nil
}

// ClockCheck is one comparison of this node's clock with its relays', as
// the running agent's clock check makes it every minute.
type ClockCheck struct {
	// Offset is the median of the relays' clocks minus this node's:
	// positive when this clock is slow.
	Offset time.Duration
	// Bound is max(max_skew/2, 2 s): a clock further off is suspect.
	Bound time.Duration
	// Answered is how many relays gave a reading; Need is the quorum M,
	// the fewest the agent judges by.
	Answered, Need int
	// Judged is false when fewer than Need relays answered: no verdict.
	Judged bool
	// Suspect is set when Offset is outside Bound; Why says by how much.
	Suspect bool
	Why     string
	// Errors are the relays that gave no reading, and why.
	Errors map[string]error
}

// CheckClock compares now with the HTTP Date header of every relay of
// cfg.Lease.Relays (dialled as cfg.DialAddrs says), with the running
// agent's rules: readings with a round trip over 2 s are dropped, the
// median of at least M readings is judged against max(max_skew/2, 2 s).
func CheckClock(ctx context.Context, cfg Config, now func() time.Time) ClockCheck {
	client := &http.Client{Timeout: 5 * time.Second}
	bound := max(cfg.Lease.MaxSkew/2, clockResolution)
	var relays []string
	for _, r := range cfg.Lease.Relays {
		relays = append(relays, canonicalRelay(r))
	}
	samples := sampleClocks(ctx, client, relays, normaliseKeys(cfg.DialAddrs), now)
	c := ClockCheck{Bound: bound, Need: cfg.Lease.M, Errors: map[string]error{}}
	for _, s := range samples {
		if s.err != nil {
			c.Errors[s.relay] = s.err
		} else {
			c.Answered++
		}
	}
	v, ok := judgeClock(samples, cfg.Lease.M, bound)
	c.Judged, c.Offset, c.Suspect, c.Why = ok, v.offset, v.suspect, v.why
	return c
}

// sampleClocks reads every relay's clock (dial maps a relay to the address
// dialled), one after the other.
func sampleClocks(ctx context.Context, client *http.Client, relays []string, dial map[string]string, now func() time.Time) []clockSample {
	samples := make([]clockSample, len(relays))
	for i, r := range relays {
		d := r
		if v, ok := dial[r]; ok {
			d = v
		}
		samples[i] = sampleRelayClock(ctx, client, r, d, now, 2*time.Second)
	}
	return samples
}
