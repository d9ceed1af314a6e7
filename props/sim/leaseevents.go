package sim

// The events a LeaseNode publishes and reads (the simulated forms of the
// agent's Nostr kinds), the simulated keys and relay URLs, and the lease
// configuration and grant the properties run.

import (
	"fmt"
	"time"

	"provideragent/lease"
)

// LeaseHeartbeat is the body of a heartbeat published by a LeaseNode: the
// (workload, epoch) pairs it holds (lease.Machine.Held).
type LeaseHeartbeat struct {
	Workloads []lease.WorkloadEpoch
	// Shard and Shards split one beat over several events (the agent does
	// when the list is too long for one relay event); 0/0 is one event.
	Shard, Shards int
}

// LeaseRevocation is the body of a revocation (kind 38385).
type LeaseRevocation struct {
	Workload  string
	Epoch     uint64
	Successor string
	Standbys  []string
	Reason    string
	QuorumAt  int64 // unix milliseconds, the revoker's clock; 0 unknown
	// StateURI names the checkpoint the successor should resume from (a
	// planned move's final record).
	StateURI string
}

// LeaseClaim is the body of a promotion claim or withdrawn marker (kind
// 38386 under the claim d tag, ClaimD: a Paygress node never reads it).
type LeaseClaim struct {
	Workload string
	Epoch    uint64
	Active   bool
}

// LeaseAnnouncement is the body of the Paygress-form promotion announcement
// a LeaseNode publishes once its claim won (kind 38386 under the Paygress d
// tag, AnnouncementD), with its epoch.
type LeaseAnnouncement struct {
	Workload string
	Epoch    uint64
}

// ClaimD is the d tag of a workload's claims and withdrawn markers (the
// agent's provider-agent:claim:v1:<workload>).
func ClaimD(workload string) string { return "claim:" + workload }

// AnnouncementD is the d tag of a workload's promotion announcements (the
// Paygress paygress:promoted:v1:<workload>); Paygress nodes read every
// event under it as a promotion.
func AnnouncementD(workload string) string { return "promoted:" + workload }

// ProviderKey is the hex pubkey of simulated provider p.
func ProviderKey(p ProviderID) string { return fmt.Sprintf("%064x", int(p)+0xa0) }

// RelayURL is the URL of simulated relay r.
func RelayURL(r RelayID) string { return fmt.Sprintf("wss://r%d.sim", int(r)) }

// LeaseConfig returns lease.DefaultConfig with the simulated relay set of n
// relays and quorum m.
func LeaseConfig(m, n int) lease.Config {
	c := lease.DefaultConfig()
	c.M, c.N = m, n
	c.Relays = make([]string, n)
	for i := range c.Relays {
		c.Relays[i] = RelayURL(RelayID(i))
	}
	return c
}

// LeaseSpec is the grant of workload id to k providers: P0 is the primary at
// epoch 1 and P1..Pk-1 the standbys in rank order (warm standby).
func LeaseSpec(cfg lease.Config, id string, k int) lease.Spec {
	s := lease.Spec{
		ID:            id,
		Primary:       ProviderKey(0),
		Replication:   lease.ReplicationWarmStandby,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure, MaxAttempts: 3},
		Epoch:         1,
		CreatedAt:     Epoch,
		Relays:        append([]string(nil), cfg.Relays...),
		Quorum:        cfg.M,
	}
	for i := 1; i < k; i++ {
		s.Standbys = append(s.Standbys, ProviderKey(ProviderID(i)))
	}
	return s
}

// claimInput is the lease input for a kind 38386 event as relay r served
// it, as the agent feeds it (heartbeat.ClaimInput): our claims and withdrawn
// markers with their epoch, a Paygress announcement with EpochUnknown and
// its created_at, left to lease.Machine.ObserveClaim to judge.
func claimInput(r RelayID, ev *Event) (lease.PromotionClaim, bool) {
	c := lease.PromotionClaim{Claimer: ProviderKey(ev.Author), Relay: RelayURL(r), CreatedAt: time.Unix(ev.CreatedAt, 0)}
	switch b := ev.Body.(type) {
	case LeaseClaim:
		c.Workload, c.Epoch, c.Active = b.Workload, b.Epoch, b.Active
	case LeaseAnnouncement:
		c.Workload, c.Epoch, c.Active = b.Workload, b.Epoch, true
	case AnchorPromotion:
		c.Workload, c.Epoch, c.Active = b.Workload, lease.EpochUnknown, true
	default:
		return c, false
	}
	return c, true
}

// unixMilliOrZero is the time of unix milliseconds u, or the zero time for 0.
func unixMilliOrZero(u int64) time.Time {
	if u == 0 {
		return time.Time{}
	}
	return time.UnixMilli(u)
}
