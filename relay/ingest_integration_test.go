package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/internal/relaytest"
	"provideragent/relay"
)

type noLeases struct{}

func (noLeases) CurrentPrimary(string) (string, bool) { return "", false }
func (noLeases) IsMember(string, string) bool         { return false }
func (noLeases) AllowedIssuer(string) bool            { return false }

// Events received from a relay that serves forged, future-dated, stale and
// replayed copies go through heartbeat's ingest: only the real, fresh
// heartbeat is ever accepted, from every relay (the forged copy that reuses
// its id and arrives first does not poison it).
func TestPoolThroughHeartbeatIngest(t *testing.T) {
	providerSK := authorKey
	keys, err := identity.NewKeys(providerSK)
	if err != nil {
		t.Fatal(err)
	}
	in, err := heartbeat.NewIngestor(heartbeat.DefaultConfig(), noLeases{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rs := []*relaytest.Relay{
		relaytest.Start(t),
		relaytest.Start(t),
		relaytest.Start(t, "--forged", "--future", "1h", "--stale-shift", "1h", "--inject-key", providerSK,
			"--serve-stale", "--replay", "100ms"),
	}
	urls := []string{rs[0].URL(), rs[1].URL(), rs[2].URL()}
	h := newPool(t, fastConfig(urls...), relay.Options{
		Filters: []nostr.Filter{{Kinds: []int{heartbeat.KindHeartbeat}, Authors: []string{keys.PublicKey()}}},
	})
	h.waitEOSE(urls...)

	now := time.Now()
	stale, err := heartbeat.BuildHeartbeat(keys, heartbeat.HeartbeatParams{At: now.Add(-10 * time.Minute), TTL: time.Hour}, false)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := heartbeat.BuildHeartbeat(keys, heartbeat.HeartbeatParams{At: now, TTL: time.Hour}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []*nostr.Event{stale, fresh} {
		if res := h.pool.Publish(context.Background(), *ev); res.AcceptedCount() != 3 {
			t.Fatalf("Publish() = %+v, want 3 accepted", res)
		}
	}

	acceptedOn := map[string]bool{}
	reasons := map[heartbeat.RejectReason]bool{}
	want := []heartbeat.RejectReason{heartbeat.ReasonBadID, heartbeat.ReasonBadSig, heartbeat.ReasonFuture, heartbeat.ReasonStale}
	done := func() bool {
		if len(acceptedOn) < 3 {
			return false
		}
		for _, r := range want {
			if !reasons[r] {
				return false
			}
		}
		return true
	}
	deadline := time.After(wait)
	for !done() {
		select {
		case r := <-h.pool.Received():
			if r.EOSE || r.Gap {
				continue
			}
			got, err := in.Ingest(context.Background(), time.Now(), r.Event)
			if err != nil {
				reasons[heartbeat.ReasonOf(err)] = true
				continue
			}
			if got.Event.ID != fresh.ID || got.Heartbeat == nil {
				t.Fatalf("Ingest(%s from %s) accepted %+v, want only the fresh heartbeat", r.Event.ID, r.Relay, r.Event)
			}
			acceptedOn[r.Relay] = true
		case <-deadline:
			t.Fatalf("after %v: accepted on %v, reasons %v; want all 3 relays and %v", wait, acceptedOn, reasons, want)
		}
	}
}
