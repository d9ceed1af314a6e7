package heartbeat

import (
	"fmt"
	"maps"
	"time"

	"provideragent/lease"
)

// MaxRestoreTimeout bounds a grant's restore_timeout_s.
const MaxRestoreTimeout = time.Hour

// checkpointPolicyWire is the grant content's optional "checkpoint" object,
// lease.CheckpointPolicy on the wire (the timeout in whole seconds).
type checkpointPolicyWire struct {
	Servers         []string          `json:"servers,omitempty"`
	MinServers      int               `json:"min_servers,omitempty"`
	Restore         string            `json:"restore,omitempty"`
	RestoreTimeoutS int64             `json:"restore_timeout_s,omitempty"`
	Keys            map[string]string `json:"keys,omitempty"`
}

// policyWire returns a policy's JSON object; its timeout must be whole
// seconds.
func policyWire(p *lease.CheckpointPolicy) (*checkpointPolicyWire, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.RestoreTimeout%time.Second != 0 {
		return nil, fmt.Errorf("checkpoint: restore_timeout %v, want whole seconds", p.RestoreTimeout)
	}
	return &checkpointPolicyWire{Servers: p.Servers, MinServers: p.MinServers, Restore: string(p.Mode()),
		RestoreTimeoutS: int64(p.RestoreTimeout / time.Second), Keys: p.Keys}, nil
}

// decodeCheckpointPolicy turns the wire object into a validated policy
// whose Restore is never empty.
func decodeCheckpointPolicy(w *checkpointPolicyWire) (*lease.CheckpointPolicy, error) {
	if w.RestoreTimeoutS < 0 || w.RestoreTimeoutS > int64(MaxRestoreTimeout/time.Second) {
		return nil, fmt.Errorf("checkpoint: restore_timeout_s %d, want 0 (default) or 1 to %d", w.RestoreTimeoutS, int64(MaxRestoreTimeout/time.Second))
	}
	p := lease.CheckpointPolicy{Servers: append([]string(nil), w.Servers...), MinServers: w.MinServers, Restore: lease.RestoreMode(w.Restore),
		RestoreTimeout: time.Duration(w.RestoreTimeoutS) * time.Second, Keys: maps.Clone(w.Keys)}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.Restore = p.Mode()
	return &p, nil
}

// checkKeyMembers checks that a policy's checkpoint key is sealed to
// members of the lease only.
func checkKeyMembers(p *lease.CheckpointPolicy, s lease.Spec) error {
	for k := range p.Keys {
		if !s.Names(k) {
			return fmt.Errorf("checkpoint.keys: sealed to %s, not a member of the lease", k)
		}
	}
	return nil
}
