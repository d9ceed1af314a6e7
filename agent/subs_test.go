package agent

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/internal/relaytest"
	"provideragent/lease"
)

// The agent subscribes only to what its leases need, over
// real relays: a heartbeat of a provider no lease names, a revocation
// addressed to another provider, a grant naming this one from an issuer it
// does not trust and a claim for a workload it does not track never reach
// its ingest (no signature check, no rejection), while the heartbeat of the
// standby its lease names does.
func TestOtherProvidersTrafficNeverReachesTheAgent(t *testing.T) {
	t.Parallel()
	_, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	lcfg.TakeoverAfter = 10 * time.Minute
	trusted := newTestKeys(t)
	ta := startAgent(t, agentOpts{name: "narrow", lcfg: lcfg, issuers: []string{trusted.PublicKey()}})
	standby, foreign, untrusted := newTestKeys(t), newTestKeys(t), newTestKeys(t)
	ctx := context.Background()
	ta.a.Track(ctx, warmSpec("w1", ta.pub, standby.PublicKey(), urls))
	ta.waitState("w1", lease.StateLive, 1, 15*time.Second)
	time.Sleep(3 * subsEvery) // the subscription, updated at most every subsEvery, names w1's standby

	pub := clientPool(t, urls)
	publish := func(what string, ev *nostr.Event, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("build %s: %v", what, err)
		}
		if res := pub.Publish(ctx, *ev); res.AcceptedCount() != len(urls) {
			t.Fatalf("publish %s: %s", what, res.Refusals())
		}
	}
	beat := func(k *identity.Keys) (*nostr.Event, error) {
		ev, _, err := heartbeat.BuildHeartbeats(k, heartbeat.HeartbeatParams{At: time.Now(), Workloads: []heartbeat.WorkloadEpoch{}})
		return ev, err
	}
	now := time.Now()
	checks := func() float64 { return counterSum(t, ta.reg, "heartbeat_signature_checks_total") }
	before := checks()
	rejected := func() float64 { return counterSum(t, ta.reg, "heartbeat_events_rejected_total") }
	rejectedBefore := rejected()
	ev, err := beat(foreign)
	publish("a heartbeat of a provider no lease names", ev, err)
	ev, err = heartbeat.BuildRevocation(standby, heartbeat.RevocationParams{WorkloadID: "w1", Epoch: 1, Standbys: []string{foreign.PublicKey()}, Reason: "test", At: now})
	publish("a revocation addressed to another provider", ev, err)
	ev, err = heartbeat.BuildLeaseGrant(untrusted, heartbeat.LeaseGrantParams{
		WorkloadID: "w2", Primary: ta.pub, Relays: urls, Quorum: 2, Replication: lease.ReplicationNone,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever}, Command: []string{"true"}, At: now,
	})
	publish("a grant from an issuer not trusted", ev, err)
	ev, err = heartbeat.BuildPromotion(standby, heartbeat.PromotionParams{WorkloadID: "not-tracked", At: now, Epoch: 2})
	publish("a claim for a workload not tracked", ev, err)
	// The control, published last: each relay sends the agent what it
	// matches in order, so an event above that matched would be checked
	// before the control's copy from the same relay, and the others' copies
	// within the wait after it.
	ev, err = beat(standby)
	publish("the standby's heartbeat", ev, err)
	waitFor(t, 10*time.Second, "the standby's heartbeat checked", func() bool { return checks() > before })
	time.Sleep(500 * time.Millisecond)
	if got := checks() - before; got != 1 {
		t.Fatalf("signature checks after the four foreign events and the control = %v, want 1 (the control only)", got)
	}
	if got := rejected() - rejectedBefore; got != 0 {
		t.Fatalf("events the ingest rejected (before any signature check) = %v, want 0: none of the four reached it", got)
	}
}

// Claims are subscribed to by workload while the workloads fit in
// claimDFilters filters, by the providers named beyond that (relays that
// match filters by scanning them pay for every d tag on every event), and
// by kind last.
func TestClaimsByAuthorBeyondEightFilters(t *testing.T) {
	byAuthor := []nostr.Filter{{Kinds: []int{heartbeat.KindPromotion}, Authors: []string{"p1", "p2"}}}
	for _, tc := range []struct {
		workloads  int
		authorWins bool
	}{{1, false}, {claimDFilters * claimWorkloads, false}, {claimDFilters*claimWorkloads + 1, true}, {100000, true}} {
		c := chunker{size: claimWorkloads}
		want := map[string]bool{}
		for i := range tc.workloads {
			want[fmt.Sprintf("w%d", i)] = true
		}
		c.sync(want)
		var byD []nostr.Filter
		for _, ch := range c.chunks {
			byD = append(byD, heartbeat.ClaimsFilter(ch))
		}
		alts := claimAlternatives(byD, byAuthor)
		first := "by workload"
		if len(alts[0]) == 1 && len(alts[0][0].Authors) == 2 {
			first = "by author"
		}
		if want := map[bool]string{false: "by workload", true: "by author"}[tc.authorWins]; first != want {
			t.Errorf("%d workloads (%d filters by workload): first alternative %s, want %s", tc.workloads, len(byD), first, want)
		}
		if len(alts) != 3 || len(alts[2]) != 1 || len(alts[2][0].Authors) != 0 || len(alts[2][0].Tags) != 0 {
			t.Errorf("%d workloads: last alternative %v, want claims by kind alone", tc.workloads, alts[len(alts)-1])
		}
	}
}

// With no provider named but this one, claims are never asked for by
// author (an empty author list would ask for everyone's).
func TestNoClaimsByAuthorForOurselvesAlone(t *testing.T) {
	byD := make([]nostr.Filter, claimDFilters+1)
	for i := range byD {
		byD[i] = heartbeat.ClaimsFilter([]string{fmt.Sprintf("w%d", i)})
	}
	for _, alt := range claimAlternatives(byD, nil) {
		for _, f := range alt {
			if len(f.Authors) > 0 || (len(f.Tags) == 0 && len(alt) != 1) {
				t.Fatalf("alternative %v: want claims by workload, then by kind alone", alt)
			}
		}
	}
	if alts := claimAlternatives(byD, nil); len(alts) != 2 || len(alts[0]) != len(byD) {
		t.Fatalf("alternatives %v: want by workload first, by kind second", alts)
	}
}

// Claims by author leave this provider out: its own claims would only come
// back to be dropped.
func TestOwnClaimsNotAskedFor(t *testing.T) {
	a := &Agent{}
	a.me.self = "self"
	s := subscriptions{workloads: chunker{size: claimWorkloads}, providers: chunker{size: filterValues}}
	ws := map[string]bool{}
	for i := range claimDFilters*claimWorkloads + 1 {
		ws[fmt.Sprintf("w%d", i)] = true
	}
	s.workloads.sync(ws)
	s.providers.sync(map[string]bool{"self": true, "standby": true})
	for _, it := range s.interests(a) {
		if it.Name != "claims" {
			continue
		}
		first := it.Alternatives[0]
		if len(first) != 1 || !slices.Equal(first[0].Authors, []string{"standby"}) {
			t.Fatalf("claims asked for by %v first, want by the standby alone", first)
		}
		return
	}
	t.Fatal("no claims interest")
}
