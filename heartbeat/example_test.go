package heartbeat_test

import (
	"fmt"
	"time"

	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/lease"
)

// Fixed keys, so that the examples print the same every run.
var (
	alice, _ = identity.NewKeys("0000000000000000000000000000000000000000000000000000000000000001")
	bob, _   = identity.NewKeys("0000000000000000000000000000000000000000000000000000000000000002")
	at       = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
)

// A provider builds its heartbeat (the stored and the ephemeral event)
// listing the workloads it holds Live; a reader checks the signature and
// decodes it.
func ExampleBuildHeartbeats() {
	stored, ephemeral, err := heartbeat.BuildHeartbeats(alice, heartbeat.HeartbeatParams{
		At:        at,
		Workloads: []heartbeat.WorkloadEpoch{{ID: "web-1", Epoch: 3}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ok, _ := stored.CheckSignature()
	hb, err := heartbeat.DecodeHeartbeat(stored)
	if err != nil {
		fmt.Println(err)
		return
	}
	epoch, live := hb.ClaimsLive("web-1")
	fmt.Println("kinds:", stored.Kind, ephemeral.Kind)
	fmt.Println("signature ok:", ok)
	fmt.Println("provider is alice:", hb.Provider == alice.PublicKey())
	fmt.Println("web-1 live at epoch:", epoch, live)
	fmt.Println("expires after:", hb.Expiration.Sub(hb.CreatedAt))
	// Output:
	// kinds: 38384 20384
	// signature ok: true
	// provider is alice: true
	// web-1 live at epoch: 3 true
	// expires after: 5m0s
}

// An issuer grants a warm-standby lease: alice runs the workload, bob
// stands by. The decoded grant's Spec is what lease.Machine.Track takes.
func ExampleBuildLeaseGrant() {
	ev, err := heartbeat.BuildLeaseGrant(alice, heartbeat.LeaseGrantParams{
		WorkloadID:    "web-1",
		Primary:       alice.PublicKey(),
		Standbys:      []string{bob.PublicKey()},
		Relays:        []string{"wss://r0.example", "wss://r1.example", "wss://r2.example"},
		Quorum:        2,
		Replication:   lease.ReplicationWarmStandby,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure, MaxAttempts: 3},
		Command:       []string{"/usr/bin/web", "--port", "8080"},
		At:            at,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	g, err := heartbeat.DecodeLeaseGrant(ev)
	if err != nil {
		fmt.Println(err)
		return
	}
	spec := heartbeat.SpecOf(g)
	fmt.Println("kind:", ev.Kind)
	fmt.Println("workload:", spec.ID, "epoch", spec.Epoch)
	fmt.Println("primary is alice:", spec.Primary == alice.PublicKey())
	fmt.Println("bob's rank:", spec.Rank(bob.PublicKey()))
	fmt.Println("command:", spec.Command)
	fmt.Println("valid:", spec.Validate() == nil)
	// Output:
	// kind: 38388
	// workload: web-1 epoch 1
	// primary is alice: true
	// bob's rank: 0
	// command: [/usr/bin/web --port 8080]
	// valid: true
}

// A holder that fenced itself revokes its epoch, naming the standby that
// should claim the next one; the standby decodes it.
func ExampleBuildRevocation() {
	ev, err := heartbeat.BuildRevocation(alice, heartbeat.RevocationParams{
		WorkloadID: "web-1",
		Standbys:   []string{bob.PublicKey()},
		Reason:     "relay quorum lost",
		At:         at,
		Successor:  bob.PublicKey(),
		Epoch:      3,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := heartbeat.DecodeRevocation(ev)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("kind:", ev.Kind)
	fmt.Println("revokes:", r.WorkloadID, "epoch", r.Epoch)
	fmt.Println("signed by the primary:", r.Signer == r.Primary && r.Primary == alice.PublicKey())
	fmt.Println("successor is bob:", r.HasSuccessor && r.Successor == bob.PublicKey())
	fmt.Println("reason:", r.Reason)
	// Output:
	// kind: 38385
	// revokes: web-1 epoch 3
	// signed by the primary: true
	// successor is bob: true
	// reason: relay quorum lost
}
