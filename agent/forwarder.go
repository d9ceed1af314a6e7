package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/courier"
	"provideragent/heartbeat"
)

// ErrNoQuorum is returned (wrapped in a courier transport error) when fewer
// than M relays accepted an event.
var ErrNoQuorum = errors.New("fewer than quorum relays accepted")

// FenceGate tells the forwarder whether a workload's process is stopped here,
// with no start or stop still queued for it (rule 7: the revocation leaves
// only after the fence).
type FenceGate interface {
	Fenced(workload string) bool
}

// NostrForwarder is the courier Forwarder for Nostr events: a bundle is one
// signed event as JSON, published to every relay of the pool; it is
// acknowledged when at least Quorum relays answered OK true. Events that
// revoke a workload wait for the FenceGate first.
type NostrForwarder struct {
	Pool    RelayPool
	Quorum  int
	Timeout time.Duration // per publish; default 10 s
	Gate    FenceGate     // nil: no fence check
	// OnAck is called after an event reached quorum (timeline, metrics).
	OnAck func(ev *nostr.Event, res PublishResult)
	// OnAttempt is called after every publish attempt, successful or not.
	OnAttempt func(ev *nostr.Event, res PublishResult)
}

var _ courier.Forwarder = (*NostrForwarder)(nil)

// Forward publishes the event in d.Bundle.
func (f *NostrForwarder) Forward(ctx context.Context, d courier.Delivery) error {
	var ev nostr.Event
	if err := json.Unmarshal(d.Bundle, &ev); err != nil {
		return courier.ClientError(fmt.Errorf("nostr forwarder: bundle is not an event: %w", err))
	}
	if ok, err := ev.CheckSignature(); !ok || err != nil {
		return courier.ClientError(fmt.Errorf("nostr forwarder: bundle event %s has a bad signature", ev.ID))
	}
	if f.Gate != nil {
		if w := ev.Tags.GetFirst([]string{"workload", ""}); w != nil && len(*w) > 1 && isRevocation(ev.Kind) {
			if err := f.waitFenced(ctx, (*w)[1]); err != nil {
				return courier.TransportError(err)
			}
		}
	}
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	res := f.Pool.Publish(pctx, &ev)
	cancel()
	if f.OnAttempt != nil {
		f.OnAttempt(&ev, res)
	}
	if len(res.Accepted) < f.Quorum {
		return courier.TransportError(fmt.Errorf("publish kind %d %s: %d of quorum %d accepted (rejected %v, timed out %v): %w",
			ev.Kind, ev.ID, len(res.Accepted), f.Quorum, res.Rejected, res.TimedOut, ErrNoQuorum))
	}
	if f.OnAck != nil {
		f.OnAck(&ev, res)
	}
	return nil
}

func isRevocation(kind int) bool { return kind == heartbeat.KindRevocation }

func (f *NostrForwarder) waitFenced(ctx context.Context, workload string) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !f.Gate.Fenced(workload) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("revocation of %s waits for the fence: %w", workload, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
