package agent

import (
	"context"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/internal/relaytest"
	"provideragent/lease"
)

// TestStoredHeartbeatsReadBackAfterReconnect: a heartbeat the holder
// published while the standby was cut off from every relay reaches the
// standby once it reconnects, because stored heartbeats are re-read one
// stale window back on every (re)subscription. With a live-only heartbeat
// subscription the standby would never see it and could count the holder's
// silence towards a takeover.
func TestStoredHeartbeatsReadBackAfterReconnect(t *testing.T) {
	t.Parallel()
	rs, urls := relaytest.StartN(t, 3)
	lcfg := lease.DemoConfig(urls)
	proxies, dial := cutProxies(t, rs, urls, 3)
	holderKey := nostr.GeneratePrivateKey()
	holder, err := identity.NewKeys(holderKey)
	if err != nil {
		t.Fatal(err)
	}
	standby := startAgent(t, agentOpts{name: "standby", lcfg: lcfg, dial: dial})
	standby.a.Track(context.Background(), warmSpec("w1", holder.PublicKey(), standby.pub, urls))
	standby.waitState("w1", lease.StateStandby, 1, 10*time.Second)
	waitFor(t, 10*time.Second, "standby connected", func() bool { return eoseCount(standby.a.pool) == 3 })

	holderQuorum := func() float64 {
		return testutil.ToFloat64(standby.a.obs.met.quorum.WithLabelValues(holder.PublicKey()))
	}
	for _, p := range proxies {
		p.Cut()
	}
	waitFor(t, 10*time.Second, "standby disconnected", func() bool { return eoseCount(standby.a.pool) == 0 })

	ev, err := heartbeat.BuildHeartbeat(holder, heartbeat.HeartbeatParams{
		At: time.Now(), Workloads: []heartbeat.WorkloadEpoch{{ID: "w1", Epoch: 1}},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		r.Inject(*ev, true) // stored; nobody of ours is subscribed to see it live
	}
	for _, p := range proxies {
		if err := p.Restore(); err != nil {
			t.Fatal(err)
		}
	}
	// The holder's one heartbeat, stored on all 3 relays, gives it quorum
	// in the standby's eyes only if the standby read it back.
	waitFor(t, 15*time.Second, "holder's stored heartbeat read back after reconnect (holder quorum)", func() bool {
		return holderQuorum() == 1
	})
}
