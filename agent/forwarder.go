package agent

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/courier"
	"provideragent/heartbeat"
	"provideragent/relay"
)

// ErrNoQuorum is returned (wrapped in a courier transport error) when fewer
// than M relays accepted an event.
var ErrNoQuorum = errors.New("fewer than quorum relays accepted")

// ErrNotFenced is the cause of a revocation deferred because its workload is
// still running or has a start or stop queued here.
var ErrNotFenced = errors.New("workload not fenced yet")

// FenceGate tells the forwarder whether an event may leave: a revocation
// only once its workload's process is stopped here, with no start or stop
// still queued for it (rule 7). The agent's is its driver.Shell.
type FenceGate interface {
	// Release reports whether an event may be sent now; revokes is the
	// workload a revocation revokes, "" for any other event.
	Release(revokes string) bool
	// FenceRecheck is how soon an event Release held back is due again.
	FenceRecheck() time.Duration
}

// NostrForwarder is the courier Forwarder for Nostr events: a bundle is one
// signed event as JSON, published to every relay of the pool; it is
// acknowledged when at least Quorum relays answered OK true. A revocation
// whose workload is not fenced yet is deferred (courier.Deferred: due again
// shortly, no attempt counted), so it never holds a delivery worker.
type NostrForwarder struct {
	Pool    RelayPool
	Quorum  int
	Timeout time.Duration // per publish; default 10 s
	Gate    FenceGate     // nil: no fence check
	// OnAck is called after an event reached quorum (timeline, metrics).
	OnAck func(ev *nostr.Event, res relay.PublishResult)
	// OnAttempt is called after every publish attempt, successful or not.
	OnAttempt func(ev *nostr.Event, res relay.PublishResult)

	verified verifiedIDs // bundles whose signature was checked (retries skip it)
}

// verifiedIDs remembers the events whose signature checked out (by a
// hash of id and signature: the id commits to the content), so that the
// retries of an undeliverable event (thousands of revocations of a
// provider cut off from its relays) do not check it again each time. It
// holds up to twice verifiedIDsHalf events, 32 bytes each plus the map's
// own: a mass eviction of 100,000 workloads queues 100,000 revocations,
// and with room for 16,384 every delivery attempt checked its event again
// (a fifth of the agent's CPU in BenchmarkAgentScale's retake).
type verifiedIDs struct {
	mu   sync.Mutex
	seen map[[32]byte]struct{}
	old  map[[32]byte]struct{}
}

const verifiedIDsHalf = 1 << 17

func verifiedKey(ev *nostr.Event) [32]byte {
	return sha256.Sum256([]byte(ev.ID + "\x00" + ev.Sig))
}

func (v *verifiedIDs) ok(ev *nostr.Event) bool {
	k := verifiedKey(ev)
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, found := v.seen[k]; found {
		return true
	}
	_, found := v.old[k]
	return found
}

func (v *verifiedIDs) add(ev *nostr.Event) {
	k := verifiedKey(ev)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.seen == nil || len(v.seen) >= verifiedIDsHalf {
		v.old, v.seen = v.seen, make(map[[32]byte]struct{})
	}
	v.seen[k] = struct{}{}
}

var _ courier.Forwarder = (*NostrForwarder)(nil)

// Destination is courier.DestinationNostr: the outbox hands this forwarder
// only Nostr receipts (the agent queues them so), never a bundle meant for
// an HTTP endpoint.
func (f *NostrForwarder) Destination() courier.Destination { return courier.DestinationNostr }

// Forward publishes the event in d.Bundle.
func (f *NostrForwarder) Forward(ctx context.Context, d courier.Delivery) error {
	var ev nostr.Event
	if err := json.Unmarshal(d.Bundle, &ev); err != nil {
		return courier.ClientError(fmt.Errorf("nostr forwarder: bundle is not an event: %w", err))
	}
	if !f.verified.ok(&ev) || !ev.CheckID() {
		if ok, err := ev.CheckSignature(); !ok || err != nil {
			return courier.ClientError(fmt.Errorf("nostr forwarder: bundle event %s has a bad signature", ev.ID))
		}
		f.verified.add(&ev)
	}
	if f.Gate != nil {
		if w := revokes(&ev); !f.Gate.Release(w) {
			return courier.Deferred(fmt.Errorf("kind %d event of workload %q waits for the fence: %w", ev.Kind, w, ErrNotFenced), f.Gate.FenceRecheck())
		}
	}
	timeout := f.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if up := f.Pool.Connected(); up < f.Quorum {
		// Cut off from the quorum: this attempt cannot be acknowledged, but
		// it reaches the relays still connected (a standby reads the
		// revocation there) without holding a delivery worker for the
		// whole timeout, so thousands of revocations of a mass eviction
		// all leave at once; the courier retries each for the quorum.
		timeout = min(timeout, cutOffTimeout)
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	res := f.Pool.PublishQuorum(pctx, &ev, f.Quorum)
	cancel()
	if f.OnAttempt != nil {
		f.OnAttempt(&ev, res)
	}
	if len(res.Accepted) < f.Quorum {
		return courier.TransportError(fmt.Errorf("publish kind %d %s: %d of quorum %d accepted (%s): %w",
			ev.Kind, ev.ID, len(res.Accepted), f.Quorum, res.Refusals(), ErrNoQuorum))
	}
	if f.OnAck != nil {
		f.OnAck(&ev, res)
	}
	return nil
}

// revokes is the workload a revocation revokes (its workload tag), "" for
// any other event.
func revokes(ev *nostr.Event) string {
	if ev.Kind != heartbeat.KindRevocation {
		return ""
	}
	// GetFirst with a two-element prefix returns only tags of two or more.
	if w := ev.Tags.GetFirst([]string{"workload", ""}); w != nil {
		return (*w)[1]
	}
	return ""
}

// cutOffTimeout bounds a publish attempt while fewer than quorum relays are
// connected.
const cutOffTimeout = 500 * time.Millisecond
