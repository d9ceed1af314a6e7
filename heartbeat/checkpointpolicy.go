package heartbeat

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Restore modes of a grant's checkpoint policy: what a new holder does when
// no checkpoint can be fetched within the restore timeout.
const (
	// RestoreRequired keeps the workload from starting without its state.
	RestoreRequired = "required"
	// RestoreBestEffort starts the workload fresh after the timeout, and
	// says so (the default).
	RestoreBestEffort = "best-effort"
)

// MaxRestoreTimeout bounds a grant's restore_timeout_s.
const MaxRestoreTimeout = time.Hour

// CheckpointPolicy is a lease grant's optional "checkpoint" object: where
// the workload's checkpoints go and what a new holder does without one.
// A decoded policy has passed Validate and Restore is never empty.
type CheckpointPolicy struct {
	// Servers are the Blossom base URLs (http or https) checkpoints are
	// uploaded to, at most MaxCheckpointServers; empty means each
	// provider's own uploader.servers.
	Servers []string
	// MinServers is K, how many of Servers must hold every blob of a
	// checkpoint before it counts as published; 0 means all of them.
	MinServers int
	// Restore is RestoreRequired or RestoreBestEffort ("" builds
	// best-effort).
	Restore string
	// RestoreTimeout bounds the restore before Restore decides; 0 means
	// the agent's default, else 1 s to MaxRestoreTimeout in whole seconds.
	RestoreTimeout time.Duration
}

// checkpointPolicyWire is the grant content's "checkpoint" object.
type checkpointPolicyWire struct {
	Servers         []string `json:"servers,omitempty"`
	MinServers      int      `json:"min_servers,omitempty"`
	Restore         string   `json:"restore,omitempty"`
	RestoreTimeoutS int64    `json:"restore_timeout_s,omitempty"`
}

// Validate checks the policy and names the first bad field and its value.
func (p CheckpointPolicy) Validate() error {
	if err := validateServerList(p.Servers, false); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if p.MinServers < 0 || p.MinServers > len(p.Servers) {
		return fmt.Errorf("checkpoint: min_servers %d, want 0 (all) to %d (the number of servers)", p.MinServers, len(p.Servers))
	}
	switch p.Restore {
	case "", RestoreRequired, RestoreBestEffort:
	default:
		return fmt.Errorf("checkpoint: restore %.40q, want %q or %q", p.Restore, RestoreRequired, RestoreBestEffort)
	}
	if t := p.RestoreTimeout; t != 0 && (t < time.Second || t > MaxRestoreTimeout || t%time.Second != 0) {
		return fmt.Errorf("checkpoint: restore_timeout %v, want 0 (default) or whole seconds from 1s to %v", t, MaxRestoreTimeout)
	}
	return nil
}

// wire returns the policy's JSON object.
func (p CheckpointPolicy) wire() *checkpointPolicyWire {
	restore := p.Restore
	if restore == "" {
		restore = RestoreBestEffort
	}
	return &checkpointPolicyWire{Servers: p.Servers, MinServers: p.MinServers, Restore: restore,
		RestoreTimeoutS: int64(p.RestoreTimeout / time.Second)}
}

// decodeCheckpointPolicy turns the wire object into a validated policy.
func decodeCheckpointPolicy(w *checkpointPolicyWire) (*CheckpointPolicy, error) {
	if w.RestoreTimeoutS < 0 || w.RestoreTimeoutS > int64(MaxRestoreTimeout/time.Second) {
		return nil, fmt.Errorf("checkpoint: restore_timeout_s %d, want 0 (default) or 1 to %d", w.RestoreTimeoutS, int64(MaxRestoreTimeout/time.Second))
	}
	p := CheckpointPolicy{Servers: append([]string(nil), w.Servers...), MinServers: w.MinServers, Restore: w.Restore,
		RestoreTimeout: time.Duration(w.RestoreTimeoutS) * time.Second}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.Restore == "" {
		p.Restore = RestoreBestEffort
	}
	return &p, nil
}

// validateServerList checks a list of Blossom base URLs: at most
// MaxCheckpointServers (at least one when required), each an http(s) URL
// with a host, no user, query, fragment or space, at most MaxServerURLBytes, none twice.
func validateServerList(servers []string, required bool) error {
	if len(servers) > MaxCheckpointServers || required && len(servers) == 0 {
		least := 0
		if required {
			least = 1
		}
		return fmt.Errorf("%d servers, want %d to %d", len(servers), least, MaxCheckpointServers)
	}
	seen := make(map[string]bool, len(servers))
	for i, s := range servers {
		if len(s) > MaxServerURLBytes {
			return fmt.Errorf("servers[%d] %.40q... is %d bytes, max %d", i, s, len(s), MaxServerURLBytes)
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			u.Opaque != "" || strings.ContainsAny(s, "?# ") {
			return fmt.Errorf("servers[%d] %q, want an http(s) base URL", i, s)
		}
		if seen[s] {
			return fmt.Errorf("servers[%d] %q listed twice", i, s)
		}
		seen[s] = true
	}
	return nil
}
