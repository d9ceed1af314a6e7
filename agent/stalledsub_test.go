package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/internal/relaytest"
	"provideragent/lease"
)

// stallFor is how long the standby's paths stay stalled: longer than
// khatru's 60 s pong deadline, as in a partition trial between real hosts.
const stallFor = 75 * time.Second

// sendBuffer is the relays' kernel send buffer per client (SO_SNDBUF; Linux
// doubles it): about what a relay's kernel holds for a peer that vanished
// over a network, where loopback would let it grow to hundreds of KB.
const sendBuffer = 32 << 10

// TestVanishedStandbyDoesNotFenceThePrimary is the vanished-standby trial
// over three relays of each of the project's kinds: the standby
// is cut from all three by a silent stall (its packets vanish, nothing is
// closed) for 75 s while the primary is untouched. The relays' writes toward
// the standby fill the kernel's buffers (the proxy dials as over a real
// network path) and must then not hold up the primary's publishes: the
// primary never loses quorum, its workload never leaves Live and never
// stops, the standby never takes over, and after the stall the standby
// stands by again.
func TestVanishedStandbyDoesNotFenceThePrimary(t *testing.T) {
	t.Parallel()
	for _, kind := range []relaytest.Kind{relaytest.Khatru, relaytest.StrfryEmulated} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			vanishedStandby(t, kind)
		})
	}
}

func vanishedStandby(t *testing.T, kind relaytest.Kind) {
	rs := make([]*relaytest.Relay, 3)
	urls := make([]string, 3)
	proxies := make([]*relaytest.StallProxy, 3)
	dial := map[string]string{}
	for i := range rs {
		rs[i] = relaytest.StartKind(t, kind, relaytest.KindOptions{SendBuffer: sendBuffer})
		urls[i] = rs[i].URL()
		proxies[i] = relaytest.NewStallProxy(t, rs[i].Addr())
		dial[urls[i]] = proxies[i].URL()
	}
	lcfg := lease.DemoConfig(urls)
	// The standby subscribes first, so that in khatru's fan-out (its
	// listeners in subscription order) the standby's listeners come before
	// the primary's: with khatru's own blocking writes the primary's
	// heartbeats then stop coming back once the standby's buffer is full
	// (it loses quorum about 5 s later, as in the partition trial); with
	// the primary's first it would be spared by luck.
	standby := startAgent(t, agentOpts{name: "standby", lcfg: lcfg, dial: dial})
	waitFor(t, 20*time.Second, "the standby synced with 3 relays", func() bool { return eoseCount(standby.a.pool) == 3 })
	primary := startAgent(t, agentOpts{name: "primary", lcfg: lcfg})
	defer func() {
		if t.Failed() {
			primary.log.dump(t, "primary")
			standby.log.dump(t, "standby")
		}
	}()
	spec := warmSpec("w1", primary.pub, standby.pub, urls)
	ctx := context.Background()
	standby.a.Track(ctx, spec)
	time.Sleep(2 * time.Second) // the standby's subscription for the lease first
	primary.a.Track(ctx, spec)
	primary.waitState("w1", lease.StateLive, 1, 20*time.Second)
	standby.waitState("w1", lease.StateStandby, 1, 20*time.Second)
	// The standby's subscription names the primary (it follows Track
	// within a second) and its heartbeats reach the standby.
	waitFor(t, 20*time.Second, "the standby seeing the primary's heartbeats on a quorum of relays", func() bool {
		return testutil.ToFloat64(standby.a.obs.met.quorum.WithLabelValues(primary.pub)) == 1
	})
	time.Sleep(2 * time.Second) // and on the third relay
	if eoseCount(primary.a.pool) != 3 || eoseCount(standby.a.pool) != 3 || !primary.backend.Running("w1") {
		t.Fatalf("before the stall: primary synced with %d relays, standby with %d, w1 running %v; want 3, 3, true",
			eoseCount(primary.a.pool), eoseCount(standby.a.pool), primary.backend.Running("w1"))
	}

	stallAt := time.Now()
	for _, p := range proxies {
		p.Stall()
	}
	type relayLoad struct {
		maxPending int
		queuedAt   time.Duration
		dropped    int
		droppedAt  time.Duration
	}
	loads := make([]relayLoad, len(rs))
	for time.Since(stallAt) < stallFor {
		if st := lastState(primary, "w1"); st != string(lease.StateLive) || !primary.backend.Running("w1") {
			t.Fatalf("%v into the stall: primary w1 %q, running %v; want live and running throughout", time.Since(stallAt).Round(time.Millisecond), st, primary.backend.Running("w1"))
		}
		if st := lastState(standby, "w1"); st != string(lease.StateStandby) {
			t.Fatalf("%v into the stall: standby w1 %q, want standby (cut off, it must not take over)", time.Since(stallAt).Round(time.Millisecond), st)
		}
		for i, r := range rs {
			st := r.Stats()
			if st.PendingOutbound > 0 && loads[i].maxPending == 0 {
				loads[i].queuedAt = time.Since(stallAt).Round(time.Second)
			}
			loads[i].maxPending = max(loads[i].maxPending, st.PendingOutbound)
			if st.Dropped > 0 && loads[i].dropped == 0 {
				loads[i].droppedAt = time.Since(stallAt).Round(time.Second)
			}
			loads[i].dropped = st.Dropped
		}
		time.Sleep(250 * time.Millisecond)
	}
	for i, l := range loads {
		t.Logf("relay %d during the stall: queueing toward the standby from +%v, %d bytes at most; %d connections dropped (first at +%v)", i, l.queuedAt, l.maxPending, l.dropped, l.droppedAt)
	}
	// The fault reached every relay: the kernel's buffers toward the
	// standby filled, so the relay queued its writes or dropped it.
	for i, l := range loads {
		if l.maxPending == 0 && l.dropped == 0 {
			t.Errorf("relay %d never had to queue for or drop the stalled standby: the stall did not reach it", i)
		}
	}
	for _, p := range proxies {
		p.Resume()
	}

	// Nothing the primary did changed while the standby was gone.
	for _, e := range primary.log.snapshot() {
		if e.Time.Before(stallAt) {
			continue
		}
		if e.Kind == "state" || e.Kind == "start" || e.Kind == "stop" ||
			(e.Kind == "quorum" && strings.Contains(e.Detail, "LOST")) {
			t.Fatalf("primary at +%v: %s %s %s %s; want no change of w1 and no quorum loss", e.Time.Sub(stallAt).Round(time.Millisecond), e.Kind, e.Workload, e.State, e.Detail)
		}
	}
	// The standby comes back and stands by.
	waitFor(t, 60*time.Second, "the standby synced with 3 relays again", func() bool { return eoseCount(standby.a.pool) == 3 })
	if st := lastState(standby, "w1"); st != string(lease.StateStandby) {
		t.Fatalf("standby w1 after the stall %q, want standby", st)
	}
	if st := lastState(primary, "w1"); st != string(lease.StateLive) || !primary.backend.Running("w1") {
		t.Fatalf("primary w1 after the stall %q, running %v; want live and running", st, primary.backend.Running("w1"))
	}
}

// lastState is the state ta last entered for workload id (from its
// timeline; "" before any).
func lastState(ta *testAgent, id string) string {
	st := ""
	for _, e := range ta.log.snapshot() {
		if e.Kind == "state" && e.Workload == id {
			st = e.State
		}
	}
	return st
}
