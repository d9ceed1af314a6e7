package agent

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/lease"
	"provideragent/relay"
)

// FuzzDecode feeds arbitrary relay events through the agent's ingest path
// (verify, decode, convert to machine inputs) and the machine: nothing
// panics and a forged or malformed event never becomes an input that
// changes a workload.
func FuzzDecode(f *testing.F) {
	key := nostr.GeneratePrivateKey()
	keys, err := identity.NewKeys(key)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Now()
	hb, _ := heartbeat.BuildHeartbeat(keys, heartbeat.HeartbeatParams{At: now, Workloads: []heartbeat.WorkloadEpoch{{ID: "w1", Epoch: 1}}}, false)
	claim, _ := heartbeat.BuildPromotion(keys, heartbeat.PromotionParams{WorkloadID: "w1", At: now, Epoch: 2})
	for _, ev := range []*nostr.Event{hb, claim} {
		b, _ := json.Marshal(ev)
		f.Add(b)
	}
	f.Add([]byte(`{"kind":38385,"content":"{","tags":[["workload","w1"]]}`))
	f.Add([]byte(`{}`))

	relays := stepRelays
	ctx := context.Background()
	a := newStepAgent(f, stepOpts{})
	self := a.PublicKey()
	if _, err := a.machine().Track(now, lease.Spec{
		ID: "w1", Primary: self, Standbys: []string{keys.PublicKey()}, Replication: lease.ReplicationWarmStandby,
		Epoch: 1, RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever}, Command: []string{"true"},
	}); err != nil {
		f.Fatal(err)
	}
	a.refreshPolicy([]string{"w1"})

	f.Fuzz(func(t *testing.T, raw []byte) {
		var ev nostr.Event
		if json.Unmarshal(raw, &ev) != nil {
			return
		}
		in, ok := a.decode(ctx, now, relay.Received{Relay: relays[0], Event: &ev})
		if !ok {
			return
		}
		if valid, _ := ev.CheckSignature(); !valid {
			t.Fatalf("decode accepted event %s with a bad signature", ev.ID)
		}
		// Feeding a verified input must not panic either.
		a.feed(a.sh.Begin(now), in)
	})
}
