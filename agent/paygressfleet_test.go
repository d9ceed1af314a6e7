package agent

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/internal/relaytest"
	"provideragent/lease"
)

// paygressAnnouncements runs Paygress v1's own announcement query
// (subscriber/query.rs query_standby_promotion_announcements: kind 38386,
// the peers as authors, #d = paygress:promoted:v1:<workload>) on every relay
// and returns what a Paygress standby would find, by event id. Any event it
// finds reads to Paygress as "a peer already promoted".
func paygressAnnouncements(t *testing.T, urls []string, workload string, peers []string) map[string]*nostr.Event {
	t.Helper()
	found := map[string]*nostr.Event{}
	for _, u := range urls {
		c := relaytest.Dial(t, u)
		c.Send([]any{"REQ", "pg", nostr.Filter{Kinds: []int{heartbeat.KindPromotion}, Authors: peers,
			Tags: nostr.TagMap{"d": []string{"paygress:promoted:v1:" + workload}}}})
		for {
			env, err := c.Read(5 * time.Second)
			if err != nil {
				t.Fatalf("Paygress query on %s: %v", u, err)
			}
			if ev, ok := env.(*nostr.EventEnvelope); ok {
				e := ev.Event
				found[e.ID] = &e
				continue
			}
			if _, ok := env.(*nostr.EOSEEnvelope); ok {
				break
			}
		}
		c.Close()
	}
	return found
}

// TestPaygressStandbySeesOnlyTheWinner: a Paygress v1 standby
// watching an agent primary runs its announcement query throughout a real
// failover in which our standby's first claim fails (cut off from two of
// the three relays, its claim reaches fewer than M) and is withdrawn: the
// query finds nothing while the claim is made and withdrawn, and exactly
// one announcement, from the winner at epoch 2, once the failover is done.
func TestPaygressStandbySeesOnlyTheWinner(t *testing.T) {
	t.Parallel()
	rs, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	primaryCut, primaryDial := cutProxies(t, rs, urls, 2)
	standbyCut, standbyDial := cutProxies(t, rs, urls, 2)
	primary := startAgent(t, agentOpts{name: "primary", lcfg: lcfg, dial: primaryDial})
	standby := startAgent(t, agentOpts{name: "standby", lcfg: lcfg, dial: standbyDial})
	spec := warmSpec("w1", primary.pub, standby.pub, urls)
	primary.a.Track(t.Context(), spec)
	standby.a.Track(t.Context(), spec)
	primary.waitState("w1", lease.StateLive, 1, 15*time.Second)
	primary.waitListedOnQuorum("w1", 10*time.Second)
	peers := []string{primary.pub, standby.pub}

	for _, p := range standbyCut {
		p.Cut()
	}
	for _, p := range primaryCut {
		p.Cut() // the primary evicts itself and revokes through the third relay
	}
	waitFor(t, 40*time.Second, "our standby's claim reached too few relays and was withdrawn", func() bool {
		_, ok := standby.log.find(func(e Event) bool { return e.Kind == "claim" && strings.Contains(e.Detail, "withdrawn") })
		return ok
	})
	time.Sleep(lcfg.RelayDelay) // let the withdrawn marker reach the relay
	if got := paygressAnnouncements(t, urls, "w1", peers); len(got) != 0 {
		t.Fatalf("Paygress's announcement query finds %d events while our claim is made and withdrawn, want none: %v", len(got), got)
	}
	for _, p := range standbyCut {
		if err := p.Restore(); err != nil {
			t.Fatal(err)
		}
	}
	standby.waitState("w1", lease.StateLive, 2, 30*time.Second)
	var got map[string]*nostr.Event
	waitFor(t, 10*time.Second, "the winner's announcement on the relays", func() bool {
		got = paygressAnnouncements(t, urls, "w1", peers)
		return len(got) > 0
	})
	if len(got) != 1 {
		t.Fatalf("Paygress's announcement query finds %d events after the failover, want exactly one", len(got))
	}
	for _, ev := range got {
		var c struct {
			WorkloadID     string `json:"workload_id"`
			NewPrimaryNpub string `json:"new_primary_npub"`
			Epoch          uint64 `json:"epoch"`
		}
		if err := json.Unmarshal([]byte(ev.Content), &c); err != nil {
			t.Fatal(err)
		}
		if ev.PubKey != standby.pub || c.NewPrimaryNpub != standby.pub || c.WorkloadID != "w1" || c.Epoch != 2 {
			t.Fatalf("announcement by %s: %+v, want the winner %s at epoch 2", ev.PubKey, c, standby.pub)
		}
	}
}
