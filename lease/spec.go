package lease

import (
	"fmt"
	"time"
)

// Replication is the availability mode the consumer chose for a workload.
type Replication string

const (
	// ReplicationNone: one copy, no checkpoint, no failover.
	ReplicationNone Replication = "none"
	// ReplicationCheckpointed: one copy that checkpoints to StateURI; no
	// standby, so quorum loss only reports (rule 6).
	ReplicationCheckpointed Replication = "checkpointed"
	// ReplicationWarmStandby: ordered standbys take over through the claim
	// step; quorum loss evicts the holder.
	ReplicationWarmStandby Replication = "warm-standby"
)

// RestartKind names a restart policy.
type RestartKind string

const (
	// RestartNever: a process exit fails the workload.
	RestartNever RestartKind = "never"
	// RestartOnFailure: a process exit is respawned up to MaxAttempts times.
	RestartOnFailure RestartKind = "on-failure"
)

// RestartPolicy says what to do when the workload process exits (rule 6: it
// applies to process exits, not to quorum loss).
type RestartPolicy struct {
	Policy RestartKind `json:"policy"`
	// MaxAttempts is the number of respawn attempts allowed in a row
	// (on-failure only); the count resets after RestartResetAfter Live.
	MaxAttempts int `json:"max_attempts,omitempty"`
}

// MaxEpoch bounds epochs everywhere: a grant's epoch must lie below it (so
// that a standby can still claim epoch+1), and
// heartbeats and claims naming a higher epoch are ignored, so epoch+1 never
// overflows.
const MaxEpoch = 1 << 62

// MaxRestartAttempts bounds RestartPolicy.MaxAttempts.
const MaxRestartAttempts = 1000

// MaxIDBytes bounds workload IDs. Every tag value and filter item built
// from an id must fit relays' limits (strfry refuses filter items over 255
// bytes), and the longest one a subscription or claim read asks for is
// provider-agent:claim:v1:<id> (24 bytes of prefix): 255-24 = 231.
const MaxIDBytes = 231

// Spec is a workload lease grant: who holds the workload, who stands by, and
// how it is run. Provider identities are 64-character lower-case hex public
// keys.
type Spec struct {
	// ID identifies the workload (the lease's workload_id).
	ID string `json:"id"`
	// Primary is the provider holding the workload at Epoch.
	Primary string `json:"primary"`
	// Standbys is the ordered standby list; rank 0 is tried first. Only
	// warm-standby workloads have standbys.
	Standbys []string `json:"standbys,omitempty"`
	// Replication is the availability mode.
	Replication Replication `json:"replication"`
	// RestartPolicy applies when the workload process exits.
	RestartPolicy RestartPolicy `json:"restart_policy"`
	// Epoch is the lease epoch of Primary; it starts at 1.
	Epoch uint64 `json:"epoch"`
	// StateURI optionally points at the latest checkpoint.
	StateURI string `json:"state_uri,omitempty"`
	// Command is the workload's command line (argv), opaque to the machine.
	Command []string `json:"command,omitempty"`
	// CreatedAt is when the lease was issued.
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when the lease ends; zero means never.
	ExpiresAt time.Time `json:"expires_at"`
	// Relays optionally lists the lease's relay set; when set it must equal
	// the machine's Config.Relays as a set (after normalisation).
	Relays []string `json:"relays,omitempty"`
	// Quorum optionally states M; when non-zero it must equal Config.M.
	Quorum int `json:"quorum,omitempty"`
}

// IsHexPubkey reports whether s is a 64-character lower-case hex string.
func IsHexPubkey(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Validate checks a spec from an untrusted grant. Errors wrap ErrInvalidSpec
// and name the field and value.
func (s Spec) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidSpec}, args...)...)
	}
	if s.ID == "" || len(s.ID) > MaxIDBytes {
		return bad("id = %q (%d bytes), must be 1 to %d bytes so that every tag and relay filter item built from it fits 255 bytes",
			s.ID, len(s.ID), MaxIDBytes)
	}
	for i := 0; i < len(s.ID); i++ {
		if c := s.ID[i]; c < 0x21 || c > 0x7e {
			return bad("id = %q, must be printable ascii without spaces", s.ID)
		}
	}
	if !IsHexPubkey(s.Primary) {
		return bad("primary = %q, must be a 64-character lower-case hex pubkey", s.Primary)
	}
	seen := map[string]bool{s.Primary: true}
	for i, sb := range s.Standbys {
		if !IsHexPubkey(sb) {
			return bad("standbys[%d] = %q, must be a 64-character lower-case hex pubkey", i, sb)
		}
		if seen[sb] {
			return bad("standbys[%d] = %q, names a provider twice", i, sb)
		}
		seen[sb] = true
	}
	switch s.Replication {
	case ReplicationNone, ReplicationCheckpointed:
		if len(s.Standbys) > 0 {
			return bad("replication = %q with %d standbys, standbys need warm-standby", s.Replication, len(s.Standbys))
		}
	case ReplicationWarmStandby:
		if len(s.Standbys) == 0 {
			return bad("replication = %q, needs at least one standby", s.Replication)
		}
	default:
		return bad("replication = %q, must be none, checkpointed or warm-standby", s.Replication)
	}
	switch s.RestartPolicy.Policy {
	case RestartNever:
		if s.RestartPolicy.MaxAttempts != 0 {
			return bad("restart_policy.max_attempts = %d, must be 0 with policy never", s.RestartPolicy.MaxAttempts)
		}
	case RestartOnFailure:
		if s.RestartPolicy.MaxAttempts < 0 || s.RestartPolicy.MaxAttempts > MaxRestartAttempts {
			return bad("restart_policy.max_attempts = %d, must be 0 to %d", s.RestartPolicy.MaxAttempts, MaxRestartAttempts)
		}
	default:
		return bad("restart_policy.policy = %q, must be never or on-failure", s.RestartPolicy.Policy)
	}
	if s.Epoch < 1 || s.Epoch >= MaxEpoch {
		return bad("epoch = %d, must be 1 to 2^62-1 (a standby must be able to claim epoch+1, at most 2^62)", s.Epoch)
	}
	if !s.ExpiresAt.IsZero() && !s.CreatedAt.IsZero() && !s.ExpiresAt.After(s.CreatedAt) {
		return bad("expires_at = %v, must be after created_at = %v", s.ExpiresAt, s.CreatedAt)
	}
	if s.Quorum < 0 || s.Quorum > MaxRelays {
		return bad("quorum = %d, must be 0 to %d", s.Quorum, MaxRelays)
	}
	for i, r := range s.Relays {
		if _, err := NormalizeRelayURL(r); err != nil {
			return bad("relays[%d] = %q: %v", i, r, err)
		}
	}
	return nil
}

// Names reports whether the spec names provider as primary or standby.
func (s Spec) Names(provider string) bool {
	return provider == s.Primary || s.Rank(provider) >= 0
}

// Rank is provider's index in Standbys, or -1 when it is not a standby.
func (s Spec) Rank(provider string) int {
	for i, sb := range s.Standbys {
		if sb == provider {
			return i
		}
	}
	return -1
}

func (s Spec) clone() Spec {
	s.Standbys = append([]string(nil), s.Standbys...)
	s.Command = append([]string(nil), s.Command...)
	s.Relays = append([]string(nil), s.Relays...)
	return s
}
