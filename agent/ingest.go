package agent

// Ingest: relay events routed by kind, checked by heartbeat's Ingestor and
// turned into machine inputs.

import (
	"context"
	"fmt"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/agentdb"
	"provideragent/driver"
	"provideragent/heartbeat"
	"provideragent/internal/fifo"
	"provideragent/lease"
	"provideragent/relay"
)

// routeQueueBytes bounds the events routeLoop holds for ingest (their
// content and tags); beyond it the relays' reads wait.
const routeQueueBytes = 32 << 20

// routeLoop takes what the relay layer delivers: copies of our own
// heartbeat events (ownbeats.go) go to the machine at once, counted from
// when they arrived; everything else is queued for the ingest goroutines,
// up to routeQueueBytes, so that the relays' reads (and with them our own
// heartbeats and the OKs of our publishes) never wait behind events being
// verified.
func (a *Agent) routeLoop(ctx context.Context) error {
	var queue fifo.Queue[arrival]
	var bytes int
	for {
		in := a.in.received
		if bytes >= routeQueueBytes {
			in = nil // full: let the relays wait
		}
		var out chan<- arrival
		next, ok := queue.Front()
		if ok {
			out = a.in.raw
		}
		select {
		case <-ctx.Done():
			return nil
		case re := <-in:
			switch {
			case re.Gap:
				a.in.arrivals.mark(arrivalMark{Mark: driver.Mark{Kind: driver.MarkGap, Relay: re.Relay}})
				continue
			case re.EOSE:
				a.in.arrivals.mark(arrivalMark{Mark: driver.Mark{Kind: driver.MarkSynced, Relay: re.Relay}})
				continue
			case re.Event == nil:
				// One pruned meanwhile is too old to count. It counts for
				// quorum at once; what it shows of the relay's stream
				// waits for the events that came before it (arrivals).
				if hb, ok := a.beat.own.input(a.me.self, re.ID, re.Relay, arrivedAt(re, a.now())); ok {
					hb.Unordered = true
					a.in.arrivals.mark(arrivalMark{Mark: driver.Mark{Kind: driver.MarkOwnBeat, Relay: re.Relay, Created: hb.CreatedAt, Received: hb.ReceivedAt}})
					select {
					case a.in.beats <- input{hb: &hb}:
					case <-ctx.Done():
						return nil
					}
				}
				continue
			}
			queue.Push(arrival{re: re, seq: a.in.arrivals.event()})
			bytes += eventBytes(re.Event)
			a.in.routed.Store(int64(queue.Len()))
		case out <- next:
			queue.Pop()
			bytes -= eventBytes(next.re.Event)
			a.in.routed.Store(int64(queue.Len()))
		}
	}
}

// arrival is one event routeLoop queued for ingest, with its arrival
// number (arrivals).
type arrival struct {
	re  relay.Received
	seq uint64
}

// arrivedAt is when re came from its relay (a heartbeat counts from its
// arrival, not from the ingest backlog): its receive time, or now when it
// has none or one in the future.
func arrivedAt(re relay.Received, now time.Time) time.Time {
	if !re.At.IsZero() && re.At.Before(now) {
		return re.At
	}
	return now
}

// eventBytes approximates the memory an event holds.
func eventBytes(ev *nostr.Event) int {
	n := 512 + len(ev.Content)
	for _, t := range ev.Tags {
		for _, v := range t {
			n += len(v) + 16
		}
	}
	return n
}

// ingestLoop verifies and decodes relay events and feeds machine inputs.
func (a *Agent) ingestLoop(ctx context.Context) error {
	for {
		var ar arrival
		select {
		case <-ctx.Done():
			return nil
		case ar = <-a.in.raw:
		}
		re := ar.re
		now := a.now()
		// The event holds the cursor back from before it is verified (so a
		// later event finished meanwhile cannot carry the cursor past it),
		// but moves it only once it passed every check: signature, signer
		// rules, and created_at at most max_skew ahead (the ingestor's).
		// A rejected event - a forgery, a stranger's, one dated 2100 - is
		// dropped without moving it. Its token is finished by the machine
		// loop once the input's step is persisted.
		var tok agentdb.Token
		tracked := !heartbeat.IsHeartbeatKind(re.Event.Kind)
		if tracked {
			tok = a.data.cursor.Reserve(int64(re.Event.CreatedAt))
		}
		in, ok := a.decode(ctx, now, re)
		if !ok {
			if tracked {
				a.data.cursor.Done(tok)
			}
			a.in.arrivals.Done(ar.seq)
			continue
		}
		in.arrival = ar.seq
		if tracked {
			a.data.cursor.Accept(tok)
		}
		in.cursorTok, in.hasTok = tok, tracked
		ch := a.in.inputs
		if in.hb != nil {
			ch = a.in.beats // heartbeats never wait behind bulk inputs
		}
		select {
		case ch <- in:
		case <-ctx.Done():
			return nil
		}
	}
}

func (a *Agent) decode(ctx context.Context, now time.Time, re relay.Received) (input, bool) {
	if hb, ok := a.beat.own.input(a.me.self, re.Event.ID, re.Relay, arrivedAt(re, now)); ok {
		// One of our own heartbeat events, parsed by a relay layer that
		// could not skip it: nothing to verify or decode (ownbeats.go).
		return input{hb: &hb}, true
	}
	if re.Event.PubKey == a.me.self && (re.Event.Kind == heartbeat.KindRevocation || re.Event.Kind == heartbeat.KindPromotion) {
		// Our own revocations, claims and announcements coming back: the
		// machine ignores its own (lease: ObserveRevocation, ObserveClaim),
		// so they are not worth a signature check. A forgery in our name
		// is dropped the same way.
		return input{}, false
	}
	if a.ownGrant(re.Event) {
		// A grant we published ourselves (ingestlog.go): not a rejection.
		return input{}, false
	}
	got, err := a.inbound.ingestor.Ingest(ctx, now, re.Event)
	if err != nil {
		reason := string(heartbeat.ReasonOf(err))
		a.obs.met.eventsRejected.WithLabelValues(reason).Inc()
		a.logRejected(re, now, err)
		return input{}, false
	}
	switch {
	case got.Heartbeat != nil:
		// Expiry (NIP-40), age and skew were enforced by the ingestor.
		a.obs.met.eventsAccepted.WithLabelValues("heartbeat").Inc()
		hb := heartbeat.HeartbeatInput(got.Heartbeat, re.Relay, arrivedAt(re, now))
		return input{hb: &hb}, true
	case got.Duplicate:
		return input{}, false
	case got.Revocation != nil:
		// Converted in feed: a Paygress revocation takes the machine's epoch.
		a.obs.met.eventsAccepted.WithLabelValues("revocation").Inc()
		return input{rev: got.Revocation}, true
	case got.Promotion != nil:
		p := got.Promotion
		a.obs.met.eventsAccepted.WithLabelValues("promotion").Inc()
		if p.Signer != a.me.self {
			epoch := fmt.Sprint(p.Epoch)
			if !p.HasEpoch {
				epoch = "(none: Paygress announcement)"
			}
			a.emit("received", p.WorkloadID, "promotion claim (%s) for epoch %s from %s", p.Status, epoch, short(p.Signer))
		}
		return input{claims: []relayClaim{{p: p, relay: re.Relay}}}, true
	case got.LeaseGrant != nil:
		a.obs.met.eventsAccepted.WithLabelValues("lease_grant").Inc()
		spec := a.specFromGrant(got.LeaseGrant)
		return input{grant: &spec}, true
	}
	return input{}, false
}

// specFromGrant is the lease spec of a grant from the relays. An on-failure
// restart policy without a count gets Config.RestartMaxAttempts.
func (a *Agent) specFromGrant(g *heartbeat.LeaseGrant) lease.Spec {
	s := heartbeat.SpecOf(g)
	if s.RestartPolicy.Policy == lease.RestartOnFailure && s.RestartPolicy.MaxAttempts == 0 {
		s.RestartPolicy.MaxAttempts = a.cfg.RestartMaxAttempts
	}
	return s
}
