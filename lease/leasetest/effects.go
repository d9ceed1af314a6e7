// Package leasetest holds test helpers for drivers of the lease machine:
// one example of every lease.Effect type, so that the agent's and the
// simulator's tests can check they perform each one as its
// lease.DurabilityOf class says (Did, Want).
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
		lease.RestoreCheckpoint{ID: "w1", Epoch: 2, Attempt: 1, Mode: lease.RestoreBestEffort, Timeout: time.Minute},
		lease.RestoreReport{ID: "w1", Epoch: 2, Phase: lease.RestoreFresh, Reason: "test"},
	}
}

// Did counts what a driver did when it performed effects through its real
// commit-and-perform path, in words both drivers' tests use: the agent's
// (agent/dispatch_test.go) and the simulator's (props/sim/dispatch_test.go)
// each report a Did per example of Effects, and both must equal Want.
type Did struct {
	Started    int // process starts (StartWorkload, AttemptRespawn)
	Stopped    int // process stops
	Queued     int // outbox rows committed with the step
	Published  int // events sent directly, not through the outbox
	ClaimReads int // claim reads requested
	Restores   int // checkpoint restores requested
}

// Want is what a driver must do when it performs e alone, with e's
// workload running: by e's lease.DurabilityOf class, the way
// lease.Performer describes it.
func Want(e lease.Effect) Did {
	switch lease.DurabilityOf(e) {
	case lease.Process:
		if _, stop := e.(lease.StopWorkload); stop {
			return Did{Stopped: 1}
		}
		return Did{Started: 1}
	case lease.Outbox:
		return Did{Queued: 1}
	case lease.Feedback:
		switch e.(type) {
		case lease.ReadClaims:
			return Did{ClaimReads: 1}
		case lease.RestoreCheckpoint:
			return Did{Restores: 1}
		}
		return Did{Published: 1}
	}
	return Did{}
}
