package lease_test

import (
	"fmt"
	"strings"
	"time"

	"provideragent/lease"
)

// Stepping the machine: every input takes now and returns the effects to
// perform, in order; the caller (driver/) persists, then performs them.
// Here alice is granted a workload, sees her own heartbeats come back from
// two of three relays (quorum), goes Live, then hears nothing for longer
// than T1+T2: she stops the workload and revokes, naming bob.
func ExampleMachine() {
	alice, bob := strings.Repeat("a", 64), strings.Repeat("b", 64)
	cfg := lease.DefaultConfig()
	cfg.Relays = []string{"wss://r0.example", "wss://r1.example", "wss://r2.example"}
	m, err := lease.New(cfg, alice)
	if err != nil {
		fmt.Println(err)
		return
	}
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	show := func(step string, effs []lease.Effect) {
		st, _ := m.State("web-1")
		fmt.Printf("%s: %s\n", step, st)
		for _, e := range effs {
			fmt.Printf("  %T\n", e)
		}
	}

	effs, err := m.Track(t0, lease.Spec{
		ID: "web-1", Primary: alice, Standbys: []string{bob}, Epoch: 1,
		Replication:   lease.ReplicationWarmStandby,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever},
		Command:       []string{"/usr/bin/web"},
		CreatedAt:     t0,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	show("granted", effs)

	beat := t0.Add(time.Second)
	for _, r := range cfg.Relays[:2] {
		effs = m.ObserveHeartbeat(beat, lease.Heartbeat{
			Provider: alice, Relay: r, CreatedAt: beat, Listed: true,
			Workloads: []lease.WorkloadEpoch{{ID: "web-1", Epoch: 1}},
		})
	}
	show("own heartbeats on 2 relays", append(effs, m.Tick(beat)...))

	silent := beat.Add(cfg.Stale + cfg.T1)
	show("quorum lost for T1", m.Tick(silent))
	show("and T2 more", m.Tick(silent.Add(cfg.T2)))
	// Output:
	// granted: provisioning
	//   lease.EnteredState
	//   lease.StartWorkload
	// own heartbeats on 2 relays: live
	//   lease.EnteredState
	// quorum lost for T1: suspect
	//   lease.EnteredState
	// and T2 more: evicted
	//   lease.EnteredState
	//   lease.StopWorkload
	//   lease.PublishRevocation
}
