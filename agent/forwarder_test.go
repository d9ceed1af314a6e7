package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/courier"
	"provideragent/driver"
	"provideragent/heartbeat"
	"provideragent/internal/relaytest"
	"provideragent/relay"
)

// gate is a FenceGate the test flips: as the agent's driver.Shell once
// started, it releases every event that is not a revocation, and a
// revocation once fenced.
type gate struct {
	mu     sync.Mutex
	fenced bool
}

func (g *gate) Release(revokes string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return revokes == "" || g.fenced
}

func (g *gate) FenceRecheck() time.Duration { return driver.DefaultFenceRecheck }

func (g *gate) set(v bool) { g.mu.Lock(); g.fenced = v; g.mu.Unlock() }

func forwarderPool(t *testing.T, rs ...*relaytest.Relay) *relayPool {
	t.Helper()
	cfg := relay.DefaultConfig()
	for _, r := range rs {
		cfg.URLs = append(cfg.URLs, r.URL())
	}
	p, err := newRelayPool(cfg, relay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.p.Close() })
	waitFor(t, 10*time.Second, "relays connected", func() bool {
		for _, s := range p.Status() {
			if !s.Connected {
				return false
			}
		}
		return true
	})
	return p
}

func delivery(t *testing.T, ev *nostr.Event) courier.Delivery {
	t.Helper()
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return courier.Delivery{Bundle: b}
}

// TestNostrForwarder checks the outbox's Nostr forwarder over real relays:
// acknowledged only when at least Quorum relays answered OK true, a bad
// bundle is a client error, a revocation whose workload is not fenced is
// deferred without publishing, and a relay that never answers does not hold
// the delivery once the quorum accepted.
func TestNostrForwarder(t *testing.T) {
	t.Parallel()
	good1, good2 := relaytest.Start(t), relaytest.Start(t)
	rejecting, holding := relaytest.Start(t, "--reject-writes"), relaytest.Start(t, "--hold-ok")
	primary, standby := newTestKeys(t), newTestKeys(t)
	revocation := func() *nostr.Event {
		ev, err := heartbeat.BuildRevocation(primary, heartbeat.RevocationParams{WorkloadID: "w1",
			Standbys: []string{standby.PublicKey()}, Successor: standby.PublicKey(), Reason: "fenced", At: time.Now(), Epoch: 1, QuorumAt: time.Now().Add(-time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	ctx := context.Background()

	t.Run("quorum of OK true", func(t *testing.T) {
		f := &NostrForwarder{Pool: forwarderPool(t, good1, good2, rejecting), Quorum: 2}
		var acked bool
		f.OnAck = func(*nostr.Event, relay.PublishResult) { acked = true }
		if err := f.Forward(ctx, delivery(t, revocation())); err != nil || !acked {
			t.Fatalf("Forward(2 of 3 accept, quorum 2) = %v (acked %v), want nil and acknowledged", err, acked)
		}
		f.Quorum = 3
		err := f.Forward(ctx, delivery(t, revocation()))
		if class, _ := courier.Classify(err); class != courier.ClassTransport || !errors.Is(err, ErrNoQuorum) {
			t.Fatalf("Forward(2 of 3 accept, quorum 3) = %v (class %s), want a transport error wrapping ErrNoQuorum", err, class)
		}
	})

	t.Run("bad bundle is a client error", func(t *testing.T) {
		f := &NostrForwarder{Pool: forwarderPool(t, good1), Quorum: 1}
		forged := revocation()
		forged.Content += " "
		// An event whose id matches its content, with the signature of
		// another event: only the signature check refuses it.
		resigned, other := revocation(), revocation()
		other.Content += " "
		if err := primary.Sign(other); err != nil {
			t.Fatal(err)
		}
		resigned.Sig = other.Sig
		for name, d := range map[string]courier.Delivery{
			"not json": {Bundle: []byte("{")}, "bad signature": delivery(t, forged),
			"valid id, another event's signature": delivery(t, resigned),
		} {
			if class, _ := courier.Classify(f.Forward(ctx, d)); class != courier.ClassClient {
				t.Errorf("Forward(%s) class = %s, want %s", name, class, courier.ClassClient)
			}
		}
	})

	t.Run("a checked event changed since is checked again", func(t *testing.T) {
		f := &NostrForwarder{Pool: forwarderPool(t, good1), Quorum: 1}
		ev := revocation()
		if err := f.Forward(ctx, delivery(t, ev)); err != nil {
			t.Fatalf("Forward(genuine) = %v", err)
		}
		changed := *ev
		changed.Content += " "
		var published bool
		f.OnAttempt = func(*nostr.Event, relay.PublishResult) { published = true }
		if class, _ := courier.Classify(f.Forward(ctx, delivery(t, &changed))); class != courier.ClassClient || published {
			t.Fatalf("Forward(the same id and signature, changed content) class = %s, published %v; want %s, never published", class, published, courier.ClassClient)
		}
	})

	t.Run("only revocations wait for the fence", func(t *testing.T) {
		f := &NostrForwarder{Pool: forwarderPool(t, good1), Quorum: 1, Gate: &gate{}}
		for name, tags := range map[string]nostr.Tags{"with a workload tag": {{"workload", "w1"}}, "without one": nil} {
			ev := &nostr.Event{Kind: 1, CreatedAt: nostr.Now(), Tags: tags, Content: name}
			if err := primary.Sign(ev); err != nil {
				t.Fatal(err)
			}
			if err := f.Forward(ctx, delivery(t, ev)); err != nil {
				t.Fatalf("Forward(another kind %s, workload not fenced) = %v, want nil", name, err)
			}
		}
	})

	t.Run("revocation waits for the fence without holding a worker", func(t *testing.T) {
		g := &gate{}
		f := &NostrForwarder{Pool: forwarderPool(t, good1, good2), Quorum: 2, Gate: g}
		ev := revocation()
		before := good1.Stats().Events
		err := f.Forward(ctx, delivery(t, ev))
		if class, after := courier.Classify(err); class != courier.ClassDeferred || after <= 0 || !errors.Is(err, ErrNotFenced) {
			t.Fatalf("Forward(unfenced revocation) = %v (class %s, after %v), want deferred wrapping ErrNotFenced", err, class, after)
		}
		if got := good1.Stats().Events; got != before {
			t.Fatalf("relay stored %d events after a deferred revocation, want %d (nothing published)", got, before)
		}
		g.set(true)
		if err := f.Forward(ctx, delivery(t, ev)); err != nil {
			t.Fatalf("Forward(fenced revocation) = %v, want nil", err)
		}
	})

	t.Run("with quorum connected, a slow relay's OK counts", func(t *testing.T) {
		// Exactly M relays connected is not cut off: the attempt waits
		// its whole timeout, not the cut-off one, for the slow relay.
		slow := relaytest.Start(t, "--write-delay", (3 * cutOffTimeout).String())
		f := &NostrForwarder{Pool: forwarderPool(t, good1, slow), Quorum: 2, Timeout: time.Minute}
		if err := f.Forward(ctx, delivery(t, revocation())); err != nil {
			t.Fatalf("Forward(2 of 2 connected, one answers after %v) = %v, want nil", 3*cutOffTimeout, err)
		}
	})

	t.Run("a silent relay does not hold the delivery", func(t *testing.T) {
		f := &NostrForwarder{Pool: forwarderPool(t, good1, good2, holding), Quorum: 2, Timeout: time.Minute}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := f.Forward(dctx, delivery(t, revocation())); err != nil || dctx.Err() != nil {
			t.Fatalf("Forward(2 accept, 1 never answers) = %v (ctx %v), want nil before the deadline", err, dctx.Err())
		}
	})
}

// TestNostrForwarderRemembersVerifiedSignatures: the forwarder's cache of
// checked events answers yes only for an id with the very signature that
// was checked, keeps at least verifiedIDsHalf of the latest ids, and
// forgets the oldest as it fills.
func TestNostrForwarderRemembersVerifiedSignatures(t *testing.T) {
	var v verifiedIDs
	ev := func(i int, sig string) *nostr.Event {
		return &nostr.Event{ID: fmt.Sprintf("%064x", i), Sig: sig}
	}
	v.add(ev(0, "good"))
	if !v.ok(ev(0, "good")) || v.ok(ev(0, "forged")) || v.ok(ev(1, "good")) {
		t.Fatalf("after checking event 0: ok(0, its signature) %v, ok(0, another) %v, ok(1) %v; want true, false, false",
			v.ok(ev(0, "good")), v.ok(ev(0, "forged")), v.ok(ev(1, "good")))
	}
	for i := 1; i < verifiedIDsHalf+1; i++ { // event 0 moves to the older half
		v.add(ev(i, "good"))
	}
	if !v.ok(ev(0, "good")) || v.ok(ev(0, "forged")) {
		t.Fatalf("event 0 in the older half: ok(its signature) %v, ok(another) %v; want true, false", v.ok(ev(0, "good")), v.ok(ev(0, "forged")))
	}
	for i := 1; i <= verifiedIDsHalf; i++ {
		if !v.ok(ev(i, "good")) {
			t.Fatalf("event %d of the latest %d forgotten", i, verifiedIDsHalf)
		}
	}
	for i := verifiedIDsHalf + 1; i < 2*verifiedIDsHalf+1; i++ {
		v.add(ev(i, "good"))
	}
	if v.ok(ev(0, "good")) {
		t.Fatal("event 0 still remembered after two halves of newer events")
	}
}
