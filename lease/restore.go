package lease

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// RestoreMode says what a new holder does when it cannot fetch the
// workload's last published checkpoint.
type RestoreMode string

const (
	// RestoreBestEffort: after one attempt of RestoreTimeout fails, start
	// from nothing and say so (RestoreReport).
	RestoreBestEffort RestoreMode = "best-effort"
	// RestoreRequired: keep trying (the workload stays Provisioning and
	// says why) until ProvisionTimeout, then fail here and hand the
	// workload to the next standby (rule 11), which may reach the servers.
	RestoreRequired RestoreMode = "required"
)

// DefaultRestoreTimeout bounds one restore attempt when the grant names
// none.
const DefaultRestoreTimeout = 60 * time.Second

// Checkpoint server limits: a policy or a checkpoint record lists at most
// MaxCheckpointServers Blossom servers, each URL at most MaxServerURLBytes.
const (
	MaxCheckpointServers = 16
	MaxServerURLBytes    = 256
)

// ValidateCheckpointServers checks a list of Blossom base URLs: at most
// MaxCheckpointServers (at least one when required), each an http or
// https URL with a host and no user, query, fragment or space, at most
// MaxServerURLBytes, none twice. The error names the first bad entry.
func ValidateCheckpointServers(servers []string, required bool) error {
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

// CheckpointPolicy is a lease's durable-state settings: where checkpoints
// go, when one counts as published, and what a new holder does before it
// starts the workload.
type CheckpointPolicy struct {
	// Servers are the Blossom servers (http or https base URLs)
	// checkpoints are uploaded to. Empty: the holder's own configured
	// servers.
	Servers []string `json:"servers,omitempty"`
	// MinServers is K: a checkpoint counts as published once every blob
	// of it is on K servers (and its record on M relays). 0: all Servers.
	MinServers int `json:"min_servers,omitempty"`
	// Restore is what happens when no checkpoint can be fetched in time
	// (empty: best-effort).
	Restore RestoreMode `json:"restore,omitempty"`
	// RestoreTimeout bounds one restore attempt (0: DefaultRestoreTimeout).
	RestoreTimeout time.Duration `json:"restore_timeout,omitempty"`
	// Keys is the grant's checkpoint key sealed to each member: a
	// member's hex public key -> a NIP-44 v2 payload its issuer made for
	// it. Opaque to the lease (each member opens its own); never modified
	// once made. Empty: checkpoints are stored in plaintext.
	Keys map[string]string `json:"keys,omitempty"`
}

// Limits of CheckpointPolicy.Keys: one per member (the primary and up to
// 16 standbys), each payload at most MaxSealedKeyBytes (a 32-byte key
// sealed with NIP-44 v2 is 176).
const (
	MaxCheckpointKeys = 17
	MaxSealedKeyBytes = 512
)

// Validate checks a policy from an untrusted grant.
func (p CheckpointPolicy) Validate() error {
	if err := ValidateCheckpointServers(p.Servers, false); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if p.MinServers < 0 || (len(p.Servers) > 0 && p.MinServers > len(p.Servers)) {
		return fmt.Errorf("checkpoint.min_servers = %d, must be 0 (all) to the number of servers (%d)", p.MinServers, len(p.Servers))
	}
	switch p.Restore {
	case "", RestoreBestEffort, RestoreRequired:
	default:
		return fmt.Errorf("checkpoint.restore = %q, must be best-effort or required", p.Restore)
	}
	if p.RestoreTimeout != 0 && (p.RestoreTimeout < time.Second || p.RestoreTimeout > time.Hour) {
		return fmt.Errorf("checkpoint.restore_timeout = %v, must be 0 (default) or 1s to 1h", p.RestoreTimeout)
	}
	if len(p.Keys) > MaxCheckpointKeys {
		return fmt.Errorf("checkpoint.keys: %d entries, at most %d (one per member)", len(p.Keys), MaxCheckpointKeys)
	}
	for k, v := range p.Keys {
		if len(k) != 64 || strings.Trim(k, "0123456789abcdef") != "" {
			return fmt.Errorf("checkpoint.keys: member %.70q, want 64 lowercase hex characters", k)
		}
		if len(v) == 0 || len(v) > MaxSealedKeyBytes || strings.Trim(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") != "" {
			return fmt.Errorf("checkpoint.keys[%s]: %d bytes, want 1 to %d of base64 (a NIP-44 payload)", k[:8], len(v), MaxSealedKeyBytes)
		}
	}
	return nil
}

// Mode is Restore with its default.
func (p CheckpointPolicy) Mode() RestoreMode {
	if p.Restore == "" {
		return RestoreBestEffort
	}
	return p.Restore
}

// Timeout is RestoreTimeout with its default.
func (p CheckpointPolicy) Timeout() time.Duration {
	if p.RestoreTimeout == 0 {
		return DefaultRestoreTimeout
	}
	return p.RestoreTimeout
}

// RestorePhase is where a workload with a checkpoint policy stands in
// restoring the state of the epoch it begins here.
type RestorePhase string

const (
	// RestoreNone: nothing to restore (no policy, or this epoch did not
	// begin here by a grant or a won claim).
	RestoreNone RestorePhase = ""
	// RestoreRunning: RestoreCheckpoint was emitted; Restored awaited.
	RestoreRunning RestorePhase = "restoring"
	// RestoreWaiting: an attempt failed under RestoreRequired; the next
	// one starts at RestoreAt.
	RestoreWaiting RestorePhase = "waiting"
	// RestoreDone: the checkpoint was restored; the workload started.
	RestoreDone RestorePhase = "restored"
	// RestoreFresh: the workload started without a checkpoint (none was
	// ever published, or best-effort gave up).
	RestoreFresh RestorePhase = "fresh"
)

// pending reports whether the workload may not start yet.
func (p RestorePhase) pending() bool { return p == RestoreRunning || p == RestoreWaiting }

// EpochHolder is who held an epoch of a workload, and when this provider
// learned that epoch began (the grant, hearing the holder, or its own
// claim). Checkpoint records are checked against it.
type EpochHolder struct {
	Epoch  uint64    `json:"epoch"`
	Holder string    `json:"holder"`
	From   time.Time `json:"from"`
}

// maxHolders bounds WorkloadSnapshot.Holders: records of older epochs
// are refused as unknown_holder.
const maxHolders = 16

// RestoreCheckpoint asks the driver to fetch the newest usable checkpoint
// of the workload published before Epoch (SelectCheckpoints decides which
// records are usable), verify it and place it where the workload's run
// at Epoch will find it, within Timeout, and to report with
// Machine.Restored carrying Attempt. The machine starts the workload only
// after that report. Hint is the state_uri of the revocation that handed
// the workload over; Seed the grant's StateURI.
type RestoreCheckpoint struct {
	ID      string
	Epoch   uint64
	Attempt int
	Mode    RestoreMode
	Timeout time.Duration
	Holders []EpochHolder
	GrantAt time.Time
	Hint    string
	Seed    string
	// Evidence is the newest checkpoint the holders' heartbeats named
	// (zero: none): a required restore never starts from an older one.
	Evidence CheckpointEvidence
}

// RestoreReport announces how the state of a new epoch was (or was not)
// restored: log and count it.
type RestoreReport struct {
	ID     string
	Epoch  uint64
	Phase  RestorePhase
	Reason string
}

func (e RestoreCheckpoint) Workload() string { return e.ID }
func (e RestoreReport) Workload() string     { return e.ID }
func (RestoreCheckpoint) isEffect()          {}
func (RestoreReport) isEffect()              {}

func (e RestoreCheckpoint) String() string {
	return fmt.Sprintf("restore %s epoch=%d attempt=%d mode=%s timeout=%v", e.ID, e.Epoch, e.Attempt, e.Mode, e.Timeout)
}

func (e RestoreReport) String() string {
	return fmt.Sprintf("restore-report %s epoch=%d phase=%s reason=%q", e.ID, e.Epoch, e.Phase, e.Reason)
}

// RestoreResult reports a RestoreCheckpoint's outcome. OK: a checkpoint
// was placed (From names it). Fresh: there is nothing to restore (no
// record of this grant was ever published), so the workload may start
// from nothing in any mode. Otherwise the attempt failed, for Reason.
type RestoreResult struct {
	Workload string
	Epoch    uint64
	Attempt  int
	OK       bool
	Fresh    bool
	From     string
	Reason   string
}

// beginEpoch starts the workload at the epoch that just began here (a
// grant naming this provider primary, or a won claim): at once without a
// checkpoint policy, else after restoring the last published checkpoint.
func (m *Machine) beginEpoch(w *WorkloadSnapshot, hint string, out *[]Effect) {
	m.noteHolder(w, w.Epoch, m.self, w.HoldFrom)
	w.Restore, w.RestoreAt, w.RestoreAttempt, w.RestoreWhy = RestoreNone, time.Time{}, 0, ""
	if w.Spec.Checkpoint == nil {
		*out = append(*out, StartWorkload{ID: w.Spec.ID, Epoch: w.Epoch})
		return
	}
	w.RestoreHint = hint
	m.requestRestore(w, out)
}

// requestRestore emits the next restore attempt.
func (m *Machine) requestRestore(w *WorkloadSnapshot, out *[]Effect) {
	w.RestoreAttempt++
	w.Restore = RestoreRunning
	w.RestoreAt = m.now.Add(w.Spec.Checkpoint.Timeout())
	*out = append(*out, m.restoreRequest(w))
}

func (m *Machine) restoreRequest(w *WorkloadSnapshot) RestoreCheckpoint {
	p := w.Spec.Checkpoint
	return RestoreCheckpoint{
		ID: w.Spec.ID, Epoch: w.Epoch, Attempt: w.RestoreAttempt, Mode: p.Mode(), Timeout: p.Timeout(),
		Holders: append([]EpochHolder(nil), w.Holders...), GrantAt: w.Spec.CreatedAt,
		Hint: w.RestoreHint, Seed: w.Spec.StateURI, Evidence: w.Evidence,
	}
}

// noteHolder records that holder holds epoch e of w since from.
func (m *Machine) noteHolder(w *WorkloadSnapshot, e uint64, holder string, from time.Time) {
	for i := range w.Holders {
		if w.Holders[i].Epoch == e {
			if w.Holders[i].Holder != holder {
				w.Holders[i] = EpochHolder{Epoch: e, Holder: holder, From: from}
			}
			return
		}
	}
	w.Holders = append(w.Holders, EpochHolder{Epoch: e, Holder: holder, From: from})
	if len(w.Holders) > maxHolders {
		low := 0
		for i := range w.Holders {
			if w.Holders[i].Epoch < w.Holders[low].Epoch {
				low = i
			}
		}
		w.Holders = append(w.Holders[:low], w.Holders[low+1:]...)
	}
}

// Restored feeds the outcome of a RestoreCheckpoint. It is ignored unless
// the workload is still Provisioning at that epoch and restoring that
// attempt (a fence, a later attempt or a restart moved on). A placed
// checkpoint, or nothing to restore, starts the workload; a failed attempt
// starts it from nothing under best-effort, and under required waits half
// a RestoreTimeout and tries again (ProvisionTimeout bounds the whole).
func (m *Machine) Restored(now time.Time, r RestoreResult) []Effect {
	w := m.byID[r.Workload]
	if w == nil || w.State != StateProvisioning || w.Epoch != r.Epoch || w.Restore != RestoreRunning || w.RestoreAttempt != r.Attempt {
		return nil
	}
	m.clock(now)
	m.touch(w)
	var out []Effect
	switch {
	case r.OK:
		m.restoreEnds(w, RestoreDone, "restored "+r.From, &out)
	case r.Fresh:
		m.restoreEnds(w, RestoreFresh, r.Reason, &out)
	default:
		m.restoreFailed(w, r.Reason, &out)
	}
	return out
}

// restoreEnds records how the epoch's state was restored and starts the
// workload.
func (m *Machine) restoreEnds(w *WorkloadSnapshot, phase RestorePhase, reason string, out *[]Effect) {
	w.Restore, w.RestoreAt, w.RestoreWhy = phase, time.Time{}, reason
	*out = append(*out, RestoreReport{ID: w.Spec.ID, Epoch: w.Epoch, Phase: phase, Reason: reason},
		StartWorkload{ID: w.Spec.ID, Epoch: w.Epoch})
}

// restoreFailed handles an attempt that failed or timed out.
func (m *Machine) restoreFailed(w *WorkloadSnapshot, reason string, out *[]Effect) {
	if w.Spec.Checkpoint.Mode() == RestoreBestEffort {
		m.restoreEnds(w, RestoreFresh, "started without a checkpoint (best-effort): "+reason, out)
		return
	}
	w.Restore, w.RestoreWhy = RestoreWaiting, reason
	w.RestoreAt = m.now.Add(w.Spec.Checkpoint.Timeout() / 2)
	*out = append(*out, RestoreReport{ID: w.Spec.ID, Epoch: w.Epoch, Phase: RestoreWaiting,
		Reason: fmt.Sprintf("restore required: attempt %d failed, next at %s: %s", w.RestoreAttempt, w.RestoreAt.Format(time.RFC3339), reason)})
}

// tickRestore times out a restore attempt and starts the next one
// (Provisioning only); it reports whether the workload is still waiting
// for its state.
func (m *Machine) tickRestore(w *WorkloadSnapshot, now time.Time, out *[]Effect) bool {
	if !w.Restore.pending() {
		return false
	}
	if now.Before(w.RestoreAt) || m.awaitingSync {
		return true
	}
	if w.Restore == RestoreRunning {
		m.restoreFailed(w, fmt.Sprintf("no answer within restore_timeout %v", w.Spec.Checkpoint.Timeout()), out)
	} else {
		m.requestRestore(w, out)
	}
	return w.Restore.pending()
}
