package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/relay"
)

// RelayPool is what the agent needs of the relay layer: supervised
// connections that deliver events, publish with real OK tracking, one-shot
// queries, and per-relay state. relayPool implements it on relay;
// tests may substitute their own.
type RelayPool interface {
	// Run connects to every relay, keeps the subscription alive and sends
	// every received event, EOSE and Gap marker (relay.Received) to out
	// until ctx ends; it returns after closing every socket.
	Run(ctx context.Context, out chan<- relay.Received) error
	// Publish sends ev to every connected relay and waits for their OKs
	// until ctx ends.
	Publish(ctx context.Context, ev *nostr.Event) relay.PublishResult
	// PublishQuorum is Publish that stops waiting once need relays
	// accepted (the outbox needs only M).
	PublishQuorum(ctx context.Context, ev *nostr.Event, need int) relay.PublishResult
	// PublishTo is Publish of an encoded event on the one relay url (as
	// Status names it).
	PublishTo(ctx context.Context, url string, f relay.Frame) relay.RelayOutcome
	// Query runs a one-shot REQ on every connected relay and returns what
	// each relay served before its EOSE (or ctx's end), and how many relays
	// answered with EOSE.
	Query(ctx context.Context, f nostr.Filter) ([]relay.Received, int)
	// QueryFilters is Query for several filters read together (packed
	// into few REQs per relay, paged through relay limits); a relay counts
	// when it answered all of them.
	QueryFilters(ctx context.Context, fs []nostr.Filter) ([]relay.Received, int)
	// SetInterests replaces the subscription (relay.Interest): the
	// agent narrows it to its leases as they come and go.
	SetInterests(in []relay.Interest)
	// Status reports each relay connection.
	Status() []RelayStatus
	// Connected is how many relays have an open connection now.
	Connected() int
}

// relayPool is relay's Pool (supervised websockets with pings,
// NIP-11 limits, NIP-42 AUTH, OK-tracked publish) as a RelayPool: it speaks
// the relay layer's own Received and PublishResult, and turns its Status
// into the /status view (RelayStatus).
type relayPool struct {
	p *relay.Pool

	mu sync.Mutex
	// passed holds the relays whose EOSE marker Run has passed, for
	// Status's EOSE (relay sets its own EOSESeen before the marker, and
	// the events ahead of it, reach Run). It is not reset on a reconnect.
	// The machine orders the markers with the events itself (arrivals,
	// applyMarks) and reads none of this.
	passed map[string]bool
}

var _ RelayPool = (*relayPool)(nil)

// NewRelayPool starts relay supervisors for the given config and
// options and returns them as a RelayPool (the courier's --relays
// forwarder uses it). Run forwards their events and closes the pool when
// its context ends.
func NewRelayPool(cfg relay.Config, opts relay.Options) (RelayPool, error) {
	return newRelayPool(cfg, opts)
}

func newRelayPool(cfg relay.Config, opts relay.Options) (*relayPool, error) {
	p, err := relay.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("relay pool: %w", err)
	}
	return &relayPool{p: p, passed: map[string]bool{}}, nil
}

func (r *relayPool) Run(ctx context.Context, out chan<- relay.Received) error {
	defer r.p.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case rec, ok := <-r.p.Received():
			if !ok {
				return nil
			}
			if rec.EOSE {
				r.mu.Lock()
				r.passed[rec.Relay] = true
				r.mu.Unlock()
			}
			if rec.Event == nil && rec.ID == "" && !rec.EOSE && !rec.Gap {
				continue
			}
			select {
			case out <- rec:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

func (r *relayPool) Publish(ctx context.Context, ev *nostr.Event) relay.PublishResult {
	return r.p.Publish(ctx, *ev)
}

func (r *relayPool) PublishTo(ctx context.Context, url string, f relay.Frame) relay.RelayOutcome {
	return r.p.PublishTo(ctx, url, f)
}

// PublishQuorum returns once need relays accepted (need <= 0: wait for all);
// relays not waited for appear in no list.
func (r *relayPool) PublishQuorum(ctx context.Context, ev *nostr.Event, need int) relay.PublishResult {
	return r.p.PublishQuorum(ctx, *ev, need)
}

// Connected is relay's count of open connections,
// without building every relay's status.
func (r *relayPool) Connected() int { return r.p.Connected() }

func (r *relayPool) Query(ctx context.Context, f nostr.Filter) ([]relay.Received, int) {
	return r.QueryFilters(ctx, []nostr.Filter{f})
}

// RelayRejection is one refusal of an event we published: the relay's OK
// false (other than mute:), a publish held back by its rate-limited:, or a
// NOTICE it sent while the publish awaited an OK that never came.
type RelayRejection struct {
	At      time.Time `json:"at"`
	Kind    int       `json:"kind"`
	EventID string    `json:"event_id"`
	// Outcome is relay's: rejected, rate_limited or timed_out.
	Outcome string `json:"outcome"`
	// Reason is the relay's words.
	Reason string `json:"reason"`
}

func (r *relayPool) Status() []RelayStatus {
	st := r.p.Status()
	out := make([]RelayStatus, len(st))
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, s := range st {
		out[i] = RelayStatus{
			URL: s.URL, Connected: s.Connected, EOSE: s.EOSESeen && r.passed[s.URL], Reconnects: s.Reconnects,
			LastMessage: s.LastMessageAt, LastError: s.LastError, PublishBackoffUntil: s.PublishBackoffUntil,
			REQs: s.REQs, Interests: s.Choices,
		}
		if s.Limits != (relay.Limits{}) {
			l := s.Limits
			out[i].Limits = &l
		}
		if s.ClosedPermanently {
			out[i].LastError = "subscription closed: " + s.ClosedReason
		}
		if lr := s.LastRejection; !lr.At.IsZero() {
			out[i].LastRejection = &RelayRejection{At: lr.At, Kind: lr.Kind, EventID: lr.EventID, Outcome: string(lr.Outcome), Reason: lr.Reason}
		}
	}
	return out
}

// SetInterests replaces the subscription.
func (r *relayPool) SetInterests(in []relay.Interest) { r.p.SetInterests(in) }

// QueryFilters runs one query of several filters on every relay: events of
// all relays, and how many relays answered it completely.
func (r *relayPool) QueryFilters(ctx context.Context, fs []nostr.Filter) ([]relay.Received, int) {
	var out []relay.Received
	n := 0
	for _, q := range r.p.QueryFilters(ctx, fs) {
		if q.Complete() {
			n++
		}
		for i := range q.Events {
			out = append(out, relay.Received{Relay: q.Relay, Event: &q.Events[i]})
		}
	}
	return out, n
}
