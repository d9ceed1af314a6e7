// Package leasetest holds test helpers for drivers of the lease machine:
// one example of every lease.Effect type, so that the agent's and the
// simulator's tests can check they perform each one as its
// lease.DurabilityOf class says.
package leasetest

import (
	"time"

	"provideragent/lease"
)

// Effects returns one example of every lease.Effect type. lease's own
// tests fail when an Effect type is missing here.
func Effects() []lease.Effect {
	return []lease.Effect{
		lease.EnteredState{ID: "w1", From: lease.StateLive, To: lease.StateSuspect, Epoch: 1},
		lease.StartWorkload{ID: "w1", Epoch: 1},
		lease.StopWorkload{ID: "w1", Epoch: 1, Reason: "test"},
		lease.PublishRevocation{ID: "w1", Epoch: 1, Reason: "test"},
		lease.PublishClaim{ID: "w1", Epoch: 2},
		lease.WithdrawClaim{ID: "w1", Epoch: 2},
		lease.AnnouncePromotion{ID: "w1", Epoch: 2},
		lease.ReadClaims{ID: "w1", Epoch: 2, At: time.Unix(0, 0)},
		lease.AttemptRespawn{ID: "w1", Epoch: 1, Attempt: 1},
		lease.Failed{ID: "w1", Epoch: 1, Reason: "test"},
		lease.QuorumReport{ID: "w1", Epoch: 1},
	}
}
