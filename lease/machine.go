package lease

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Machine is one provider's view of many workloads. It is not safe for
// concurrent use: the driver feeds inputs from one goroutine, persists the
// resulting state, then performs the returned effects in order.
//
// Every input method takes now, the provider's local clock. Time never runs
// backwards inside the machine: a now earlier than one already seen is
// treated as the latest one seen.
type Machine struct {
	cfg      Config
	self     string
	selfIdx  int
	relays   []string
	relayIdx map[string]int

	provs   []ProviderSnapshot
	provIdx map[string]int

	list []*WorkloadSnapshot
	byID map[string]*WorkloadSnapshot
	// wake[i] is a lower bound (unix ns) of the next time Tick can change
	// anything for list[i]; 0 means always look. Derived, never persisted:
	// inputs that could bring a deadline forward reset it (touch).
	wake []int64

	// watch is, per relay, the evidence that this provider hears the
	// relay's live stream (see relayWatch). Volatile: not persisted.
	watch []relayWatch

	now          time.Time
	awaitingSync bool
	synced       []bool
	// clockSuspect is set while the driver finds this provider's clock
	// outside the bound the guarantee rests on (SetClockSuspect); why says
	// how, for the eviction reason.
	clockSuspect bool
	clockWhy     string
	// draining is set while the operator drains this node (SetDraining):
	// it starts no claim step.
	draining bool
	// publishing counts the workloads in PhasePublishing: claims that
	// wait for their publish's answer (Config.ClaimWindow bounds it).
	// Derived from the workloads' phases (setPhase, add, Remove).
	publishing int
}

// New returns an empty machine for provider self (a hex pubkey).
func New(cfg Config, self string) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new lease machine: %w", err)
	}
	if !IsHexPubkey(self) {
		return nil, fmt.Errorf("new lease machine: self = %q: %w", self, ErrInvalidSpec)
	}
	cfg.Relays = append([]string(nil), cfg.Relays...)
	m := &Machine{
		cfg:      cfg,
		self:     self,
		relayIdx: make(map[string]int, cfg.N),
		provIdx:  make(map[string]int),
		byID:     make(map[string]*WorkloadSnapshot),
		watch:    make([]relayWatch, cfg.N),
	}
	for i, r := range cfg.Relays {
		n, _ := NormalizeRelayURL(r) // validated above
		m.relays = append(m.relays, n)
		m.relayIdx[n] = i
		m.relayIdx[r] = i
	}
	m.selfIdx = m.provider(self)
	return m, nil
}

// Config returns the machine's configuration.
func (m *Machine) Config() Config { return m.cfg }

// Self returns this provider's pubkey.
func (m *Machine) Self() string { return m.self }

// Relays returns the normalised relay set, in relay-index order.
func (m *Machine) Relays() []string { return append([]string(nil), m.relays...) }

// RelayIndex returns the index of a relay URL in the relay set.
func (m *Machine) RelayIndex(url string) (int, bool) {
	if i, ok := m.relayIdx[url]; ok {
		return i, true
	}
	n, err := NormalizeRelayURL(url)
	if err != nil {
		return 0, false
	}
	i, ok := m.relayIdx[n]
	return i, ok
}

// Now returns the latest time the machine has seen.
func (m *Machine) Now() time.Time { return m.now }

// AwaitingSync reports whether the machine was restored and fewer than M
// relays have reported RelaySynced since.
func (m *Machine) AwaitingSync() bool { return m.awaitingSync }

// State returns a workload's state.
func (m *Machine) State(id string) (State, bool) {
	w := m.byID[id]
	if w == nil {
		return "", false
	}
	return w.State, true
}

// Epochs returns a workload's state, the epoch it holds (or last held) and
// the epoch it claims while Promoting, without copying the workload as
// Workload does (the simulator's invariant checkers read it after every
// event).
func (m *Machine) Epochs(id string) (st State, epoch, target uint64, ok bool) {
	w := m.byID[id]
	if w == nil {
		return "", 0, 0, false
	}
	return w.State, w.Epoch, w.Target, true
}

// Len returns the number of tracked workloads.
func (m *Machine) Len() int { return len(m.list) }

// IDs returns the tracked workload IDs in tracking order.
func (m *Machine) IDs() []string {
	ids := make([]string, len(m.list))
	for i, w := range m.list {
		ids[i] = w.Spec.ID
	}
	return ids
}

// StateCounts adds the number of workloads in each state to counts (for
// metrics) and returns it; a nil map is allocated.
func (m *Machine) StateCounts(counts map[State]int) map[State]int {
	if counts == nil {
		counts = make(map[State]int, len(States))
	}
	for _, w := range m.list {
		counts[w.State]++
	}
	return counts
}

// Held appends to dst the (workload, epoch) pairs this provider holds (the
// Holding states), for its heartbeats, in tracking order.
func (m *Machine) Held(dst []WorkloadEpoch) []WorkloadEpoch {
	for _, w := range m.list {
		if w.State.Holding() {
			dst = append(dst, WorkloadEpoch{ID: w.Spec.ID, Epoch: w.Epoch})
		}
	}
	return dst
}

// HasQuorum reports whether provider has relay quorum at now in this
// provider's view: at least M relays delivered a counting heartbeat of it
// within the last Stale.
func (m *Machine) HasQuorum(now time.Time, provider string) bool {
	i, ok := m.provIdx[provider]
	if !ok {
		return false
	}
	return now.UTC().Before(m.provs[i].QuorumUntil)
}

// QuorumUntil returns when provider loses (or lost) quorum unless more
// heartbeats arrive; zero when it never had quorum.
func (m *Machine) QuorumUntil(provider string) time.Time {
	i, ok := m.provIdx[provider]
	if !ok {
		return time.Time{}
	}
	return m.provs[i].QuorumUntil
}

// clock folds an input's now into the machine's monotonic clock.
func (m *Machine) clock(now time.Time) time.Time {
	now = now.UTC()
	if now.Before(m.now) {
		return m.now
	}
	m.now = now
	return now
}

// provider returns the index of a provider, registering it when new.
func (m *Machine) provider(id string) int {
	if i, ok := m.provIdx[id]; ok {
		return i
	}
	n := len(m.relays)
	m.provs = append(m.provs, ProviderSnapshot{
		ID:       id,
		Seen:     make([]time.Time, n),
		Created:  make([]time.Time, n),
		Unlisted: make([]time.Time, n),
	})
	i := len(m.provs) - 1
	m.provIdx[id] = i
	return i
}

// add indexes a workload record (used by Track and Restore).
func (m *Machine) add(w *WorkloadSnapshot) {
	w.named = w.named[:0]
	w.named = append(w.named, m.provider(w.Spec.Primary))
	for _, sb := range w.Spec.Standbys {
		w.named = append(w.named, m.provider(sb))
	}
	w.holder = m.provider(w.Holder)
	w.rank = m.rank(w)
	if len(w.ClaimAt) != len(m.relays) {
		w.ClaimAt = make([]time.Time, len(m.relays))
	}
	w.idx = len(m.list)
	if w.Phase == PhasePublishing {
		m.publishing++
	}
	m.list = append(m.list, w)
	m.wake = append(m.wake, 0)
	m.byID[w.Spec.ID] = w
}

// Track starts tracking a workload from its lease grant (the Grant input).
// The primary enters Provisioning and starts the workload; a standby enters
// Standby and starts watching the primary. Re-sending the tracked spec, or
// one that only extends ExpiresAt or changes StateURI, updates it and
// returns no effects; any other change returns ErrAlreadyTracked.
func (m *Machine) Track(now time.Time, spec Spec) ([]Effect, error) {
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("track: %w", err)
	}
	if !spec.Names(m.self) {
		return nil, fmt.Errorf("track %s: %w", spec.ID, ErrNotNamed)
	}
	if err := m.checkRelays(spec); err != nil {
		return nil, fmt.Errorf("track %s: %w", spec.ID, err)
	}
	now = m.clock(now)
	spec = spec.clone()
	spec.CreatedAt, spec.ExpiresAt = spec.CreatedAt.UTC(), spec.ExpiresAt.UTC()
	if w := m.byID[spec.ID]; w != nil {
		old, upd := w.Spec, spec
		old.ExpiresAt, upd.ExpiresAt = time.Time{}, time.Time{}
		old.StateURI, upd.StateURI = "", ""
		if !specEqual(old, upd) || (!spec.ExpiresAt.IsZero() && spec.ExpiresAt.Before(w.Spec.ExpiresAt)) ||
			(spec.ExpiresAt.IsZero() && !w.Spec.ExpiresAt.IsZero()) {
			return nil, fmt.Errorf("track %s: %w", spec.ID, ErrAlreadyTracked)
		}
		w.Spec.ExpiresAt, w.Spec.StateURI = spec.ExpiresAt, spec.StateURI
		m.touch(w) // an expiry may have appeared
		return nil, nil
	}
	w := &WorkloadSnapshot{Spec: spec, Holder: spec.Primary, Epoch: spec.Epoch}
	m.add(w)
	var out []Effect
	if spec.Primary == m.self {
		w.HoldFrom = now
		m.enter(w, StateProvisioning, &out)
		m.beginEpoch(w, "", &out)
	} else {
		w.WatchFrom = now
		m.noteHolder(w, w.Epoch, w.Holder, now)
		m.enter(w, StateStandby, &out)
	}
	return out, nil
}

func specEqual(a, b Spec) bool {
	return a.ID == b.ID && a.Primary == b.Primary && slices.Equal(a.Standbys, b.Standbys) &&
		a.Replication == b.Replication && a.RestartPolicy == b.RestartPolicy && a.Epoch == b.Epoch &&
		a.StateURI == b.StateURI && slices.Equal(a.Command, b.Command) && a.CreatedAt.Equal(b.CreatedAt) &&
		a.ExpiresAt.Equal(b.ExpiresAt) && slices.Equal(a.Relays, b.Relays) && a.Quorum == b.Quorum &&
		checkpointEqual(a.Checkpoint, b.Checkpoint)
}

func checkpointEqual(a, b *CheckpointPolicy) bool {
	if a == nil || b == nil {
		return a == b
	}
	// A new checkpoint key is a new policy: members holding different keys
	// could not read each other's checkpoints.
	return slices.Equal(a.Servers, b.Servers) && a.MinServers == b.MinServers && a.Restore == b.Restore && a.RestoreTimeout == b.RestoreTimeout &&
		maps.Equal(a.Keys, b.Keys)
}

func (m *Machine) checkRelays(spec Spec) error {
	if spec.Quorum != 0 && spec.Quorum != m.cfg.M {
		return fmt.Errorf("%w: quorum = %d, machine uses m = %d", ErrRelaySetMismatch, spec.Quorum, m.cfg.M)
	}
	if len(spec.Relays) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(spec.Relays))
	for _, r := range spec.Relays {
		n, err := NormalizeRelayURL(r)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrRelaySetMismatch, err)
		}
		if _, ok := m.relayIdx[n]; !ok {
			return fmt.Errorf("%w: relay %q is not in the machine's relay set", ErrRelaySetMismatch, r)
		}
		seen[n] = true
	}
	if len(seen) != len(m.relays) {
		return fmt.Errorf("%w: lease lists %d distinct relays, machine has %d", ErrRelaySetMismatch, len(seen), len(m.relays))
	}
	return nil
}

// Remove forgets a workload (after the driver archived a terminal one). It
// reports whether the workload was tracked.
func (m *Machine) Remove(id string) bool {
	w := m.byID[id]
	if w == nil {
		return false
	}
	delete(m.byID, id)
	if w.Phase == PhasePublishing {
		m.publishing--
	}
	i := w.idx
	m.list = slices.Delete(m.list, i, i+1)
	m.wake = slices.Delete(m.wake, i, i+1)
	for j := i; j < len(m.list); j++ {
		m.list[j].idx = j
	}
	return true
}

// enter moves w to state to and records the transition.
func (m *Machine) enter(w *WorkloadSnapshot, to State, out *[]Effect) {
	from := w.State
	w.State = to
	w.Since = m.now
	m.touch(w)
	if to != StatePromoting {
		m.setPhase(w, PhaseNone)
		w.PhaseAt, w.Target, w.ClaimAttempt, w.ClaimFrom, w.Trigger = time.Time{}, 0, 0, time.Time{}, ""
		w.RevokeBy = time.Time{}
	}
	if to != StateSyncing {
		w.Resume, w.ResumeSince = "", time.Time{}
	}
	if to != StateProvisioning && w.Restore.pending() {
		// A restore in progress is abandoned; its report is refused by
		// Restored from now on.
		w.Restore, w.RestoreAt = RestoreNone, time.Time{}
	}
	if to != StateRespawning {
		// A respawn not yet issued is cancelled; one issued and not yet
		// reported is refused by RespawnDone from now on.
		w.RespawnAt, w.RespawnIssued = time.Time{}, false
	}
	*out = append(*out, EnteredState{ID: w.Spec.ID, From: from, To: to, Epoch: w.Epoch})
}

// touch makes the next Tick look at w again.
func (m *Machine) touch(w *WorkloadSnapshot) { m.wake[w.idx] = 0 }

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
