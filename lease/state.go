package lease

// State is the state of one workload as seen by one provider. Values are
// English words so that a persisted row reads as English.
type State string

const (
	// StateProvisioning: this provider holds the workload and has started
	// it, but its own heartbeats have not yet reached relay quorum (rule 11
	// bounds this by ProvisionTimeout).
	StateProvisioning State = "provisioning"
	// StateLive: this provider holds the workload, runs it, and has quorum.
	StateLive State = "live"
	// StateSuspect: this provider holds the workload, but has lacked quorum
	// for at least T1 since the moment it was lost. It still runs it.
	StateSuspect State = "suspect"
	// StateEvicted: quorum stayed lost past T1+T2; this provider stopped
	// its copy and published a revocation naming a successor (rule 7).
	StateEvicted State = "evicted"
	// StateFenced: a higher epoch of the workload was seen (or this
	// provider's own epoch held by a provider the lease ranks first); this
	// provider stopped its copy (rule 9). It rejoins as a standby of that
	// epoch's holder as soon as it hears the holder's heartbeats, or once
	// the claim that fenced it has settled (StateStandby), so that a lease
	// keeps a standby after a failover.
	StateFenced State = "fenced"
	// StateRespawning: the workload process exited and a respawn is
	// scheduled or in progress (rule 5).
	StateRespawning State = "respawning"
	// StateFailed (terminal): provisioning or relay sync timed out for a
	// workload quorum loss does not evict (rule 11), or the restart policy
	// is exhausted. A Failed effect says why.
	StateFailed State = "failed"
	// StateStandby: this provider is a standby; it watches the holder's
	// heartbeats and the revocations for the workload.
	StateStandby State = "standby"
	// StatePromoting: this standby is in the claim step (rule 8): it has
	// published, is reading, or is backing off before retrying a promotion
	// claim for epoch+1.
	StatePromoting State = "promoting"
	// StateSyncing: a restored holder that was Live or Suspect (or became
	// Live before the sync) waits until M relays reported EOSE with no
	// higher epoch seen (rule 10). It keeps listing the workload.
	StateSyncing State = "syncing"
	// StateExpired (terminal): the lease's ExpiresAt passed; the workload
	// was stopped if it ran here.
	StateExpired State = "expired"
)

// States lists every state, in the order of the state diagram.
var States = []State{
	StateStandby, StatePromoting, StateProvisioning, StateSyncing, StateLive, StateSuspect,
	StateRespawning, StateEvicted, StateFenced, StateFailed, StateExpired,
}

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool {
	for _, v := range States {
		if s == v {
			return true
		}
	}
	return false
}

// Terminal reports whether no input moves a workload out of s.
func (s State) Terminal() bool {
	return s == StateFailed || s == StateExpired
}

// Holding reports whether this provider is the workload's holder in s and
// its process may be running: the states whose (workload, epoch) pairs the
// provider lists in its heartbeats.
func (s State) Holding() bool {
	switch s {
	case StateProvisioning, StateLive, StateSuspect, StateRespawning, StateSyncing:
		return true
	}
	return false
}
