package lease

import (
	"fmt"
	"time"
)

// ObserveHeartbeat feeds one verified heartbeat as delivered by one relay.
// It counts (refreshes the provider's relay table) only when the provider
// is named by a tracked lease, the relay is in the relay set, its created_at
// lies in [received-Stale, received+MaxSkew], and it is newer than the last
// heartbeat accepted from that relay for that provider. A counting heartbeat
// that lists a workload at a higher epoch than this provider knows fences a
// copy held here (rule 9); one that lists it at the epoch a standby follows,
// from another provider than the holder it follows, makes that provider the
// holder (only the provider heard holding an epoch has its silence counted),
// and one that lists it at an evicted former holder's own epoch fences that
// former holder for good (the epoch was claimed again: yieldsEpoch).
// State changes that follow from quorum happen at the next Tick. In the
// steady state it does not allocate.
func (m *Machine) ObserveHeartbeat(now time.Time, hb Heartbeat) []Effect {
	pi, ok := m.provIdx[hb.Provider]
	if !ok {
		return nil
	}
	ri := m.relayFast(hb.Relay)
	if ri < 0 {
		var ok bool
		if ri, ok = m.RelayIndex(hb.Relay); !ok {
			return nil
		}
	}
	now = m.clock(now)
	recv := now
	if !hb.ReceivedAt.IsZero() && hb.ReceivedAt.Before(now) {
		recv = hb.ReceivedAt.UTC()
	}
	created := hb.CreatedAt.UTC()
	if created.Before(recv.Add(-m.cfg.Stale)) || created.After(recv.Add(m.cfg.MaxSkew)) {
		return nil // stale, replayed long after, or from the future (rule 3)
	}
	shards := hb.Shards
	if shards <= 1 {
		shards = 1
	} else if shards > MaxShards || hb.Shard < 0 || hb.Shard >= shards {
		return nil
	}
	p := &m.provs[pi]
	arrived := recv
	switch {
	case created.Before(p.Created[ri]):
		return nil // re-served older beat (rule 3)
	case created.Equal(p.Created[ri]):
		if shards == 1 {
			return nil // replay (rule 3)
		}
		// Another shard of a beat already begun on this relay: it counts
		// from the beat's first arrival, so a shard re-served later never
		// extends anything.
		b := p.beat(ri)
		if b.first.IsZero() || b.n == 0 {
			return nil
		}
		recv = b.first
		if b.add(hb.Shard, shards) {
			m.seen(p, ri, recv, created)
		}
	default:
		p.Created[ri] = created
		if shards == 1 {
			m.seen(p, ri, recv, created)
			break
		}
		b := p.beat(ri)
		b.reset(recv, shards)
		if b.add(hb.Shard, shards) {
			m.seen(p, ri, recv, created)
		}
	}
	if pi == m.selfIdx && !hb.Unordered {
		m.heardOwnBeat(ri, arrived, created)
	}
	if !hb.Listed {
		if recv.After(p.Unlisted[ri]) {
			p.Unlisted[ri] = recv
		}
		return nil
	}
	if pi == m.selfIdx {
		return nil
	}
	var out []Effect
	for _, we := range hb.Workloads {
		w := m.byID[we.ID]
		if w == nil || !w.names(pi) || w.State.Terminal() || we.Epoch > MaxEpoch {
			continue
		}
		switch {
		case we.Epoch == w.Epoch && pi == w.holder:
			if recv.After(w.ClaimAt[ri]) {
				w.ClaimAt[ri] = recv
			}
		case we.Epoch > w.Epoch, we.Epoch == w.Epoch && m.yieldsEpoch(w, pi):
			// A higher epoch, or the epoch known here held by another
			// provider than the one followed: the holder followed was a
			// guess (adoptSettled follows a rival whose claim stood; its
			// withdrawal may never have been seen), or this provider's own
			// epoch was claimed again by another (relays that lost their
			// storage hid the claim), and at most one provider may hold an
			// epoch, so pi is the holder. Silence is counted only of the
			// provider heard holding the epoch.
			m.heardHolding(w, pi, we.Epoch, ri, recv, &out)
		case we.Epoch < w.Epoch && !w.State.Holding():
			m.heardLowerHolder(w, ri, recv, &out)
		}
		if we.Epoch == w.Epoch && pi == w.holder && !we.Checkpoint.IsZero() && w.Spec.Checkpoint != nil {
			if ev := (CheckpointEvidence{Epoch: we.Epoch, Seq: we.Checkpoint.Seq, Manifest: we.Checkpoint.Manifest}); ev.newer(w.Evidence) {
				w.Evidence = ev
			}
		}
	}
	return out
}

// heardLowerHolder: provider heard holding w at an epoch below the one
// known here. Relays that lost their storage can have erased the later
// epochs, so it reused a number: it runs the workload all the same, and
// its eviction is timed from its own heartbeats. Its beats count as the
// holder's for the silence a takeover or a retake waits for (ClaimAt), and
// a claim step under way ends, its claim withdrawn if in flight (a retake
// goes back to Evicted): starting beside it would be two writers until it
// hears the higher epoch. That includes a claim step in its backoff, whose
// next attempt would not look at the silence again for a retake. The
// epoch known here stays (a holder of a higher one yields nothing to it;
// it yields when it hears that holder).
func (m *Machine) heardLowerHolder(w *WorkloadSnapshot, ri int, recv time.Time, out *[]Effect) {
	if recv.After(w.ClaimAt[ri]) {
		w.ClaimAt[ri] = recv
		m.touch(w)
	}
	if w.State != StatePromoting {
		return
	}
	if w.Trigger == TriggerRetake {
		m.withdrawInFlight(w, w.Target, out)
		m.enter(w, StateEvicted, out)
		return
	}
	m.abortClaim(w, w.Target, out)
}

// seen records that a whole beat of provider p, created at created,
// arrived from relay ri at recv: it refreshes p's relay table and quorum.
func (m *Machine) seen(p *ProviderSnapshot, ri int, recv, created time.Time) {
	if p.Complete == nil {
		p.Complete = make([]time.Time, len(p.Seen))
	}
	if created.After(p.Complete[ri]) {
		p.Complete[ri] = created
	}
	// A beat counts for quorum as seen no later than its creation plus
	// the relay delay (and the second created_at rounds down), plus the
	// allowed skew for another provider's beat, whose created_at is on
	// its clock: a relay re-serving an old beat (to a provider that
	// restarted and subscribed again), or delivering one late, must not
	// extend quorum past what any other provider saw when it was new. A
	// holder restarted 130 s after its last beat otherwise kept quorum
	// for another stale from its old beats while its standby counted
	// silence from their first delivery (props TestTakeoverNeverEarly,
	// 19,225th check of seed 13798835503039173375: two writers for 4 s).
	// Its own beats are on its own clock: no skew, which the margin of
	// Config.Validate counts on.
	lim := created.Add(time.Second + m.cfg.RelayDelay)
	if p != &m.provs[m.selfIdx] {
		lim = lim.Add(m.cfg.MaxSkew)
	}
	seenAt := recv
	if seenAt.After(lim) {
		seenAt = lim
	}
	if seenAt.After(p.Seen[ri]) {
		p.Seen[ri] = seenAt
	}
	m.updateQuorum(p)
}

// beat returns the sharded beat being assembled from relay ri.
func (p *ProviderSnapshot) beat(ri int) *beat {
	if p.beats == nil {
		p.beats = make([]beat, len(p.Seen))
	}
	return &p.beats[ri]
}

func (b *beat) reset(first time.Time, shards int) {
	b.first, b.n, b.shards = first, 0, shards
	words := (shards + 63) / 64
	if cap(b.got) < words {
		b.got = make([]uint64, words)
	}
	b.got = b.got[:words]
	clear(b.got)
}

// add records shard i of a beat of shards events and reports whether the
// beat just became complete.
func (b *beat) add(i, shards int) bool {
	if shards != b.shards {
		return false // the shard count changed within one beat: ignore it
	}
	w, bit := i/64, uint64(1)<<(i%64)
	if b.got[w]&bit != 0 {
		return false
	}
	b.got[w] |= bit
	b.n++
	return b.n == shards
}

// relayFast finds a relay by its normalised or configured spelling with a
// linear scan (N is small; cheaper than hashing the URL), or returns -1.
func (m *Machine) relayFast(url string) int {
	for i, r := range m.relays {
		if r == url || m.cfg.Relays[i] == url {
			return i
		}
	}
	return -1
}

// updateQuorum recomputes QuorumUntil: the M-th most recent Seen plus Stale.
// It keeps the M newest times in a small array: O(N*M), no allocation.
func (m *Machine) updateQuorum(p *ProviderSnapshot) {
	var top [MaxRelays]int // indices into p.Seen, newest first
	k, n := m.cfg.M, 0
	for i, s := range p.Seen {
		if s.IsZero() {
			continue
		}
		j := n
		for j > 0 && s.After(p.Seen[top[j-1]]) {
			j--
		}
		if j >= k {
			continue
		}
		if n < k {
			n++
		}
		copy(top[j+1:n], top[j:n-1])
		top[j] = i
	}
	if n < k {
		p.QuorumUntil = time.Time{}
		return
	}
	p.QuorumUntil = p.Seen[top[k-1]].Add(m.cfg.Stale)
}

func (w *WorkloadSnapshot) names(pi int) bool {
	for _, n := range w.named {
		if n == pi {
			return true
		}
	}
	return false
}

// yieldsEpoch reports whether another provider pi heard holding w at the
// epoch known here is taken as its holder: by a standby or one in the
// claim step (they merely watch the holder), by an evicted former holder,
// which is then fenced for good, and by a holder that pi outranks.
//
// An evicted holder's epoch held by another means the epoch was claimed
// again (relays that carried the first claim lost their storage, and the
// claimer read the others); retaking would start a copy beside that
// holder's (props' TestSingleWriter seed 2070523810), while the heard
// holder, like any holder, fences itself once it lacks quorum.
//
// Two holders of one epoch should never exist; if relays lost a claim the
// claim step needed (outside the storage assumption, lease/doc.go), they
// resolve as a second line of defence: the one the lease ranks lower
// (primary first, then the standbys in order) fences itself as soon as it
// hears the other's heartbeat, and the other keeps running. Both decide
// from the same lease, so exactly one of them stops.
func (m *Machine) yieldsEpoch(w *WorkloadSnapshot, pi int) bool {
	switch {
	case w.State == StateStandby || w.State == StatePromoting || w.State == StateEvicted || w.State == StateFenced:
		return true
	case w.State.Holding():
		return w.leaseRank(pi) < w.leaseRank(m.selfIdx)
	}
	return false
}

// leaseRank is provider pi's place in w's lease: 0 for the primary, i+1 for
// standby i (len(named) for a provider the lease does not name).
func (w *WorkloadSnapshot) leaseRank(pi int) int {
	for i, n := range w.named {
		if n == pi {
			return i
		}
	}
	return len(w.named)
}

// heardHolding handles a heartbeat of provider pi that lists w at epoch e,
// either above the one known here or at it while another provider is
// followed: pi holds w at e. A copy held here is fenced, an evicted one
// fenced, a claim in progress is withdrawn, and pi becomes the holder this
// provider watches, its silence counted from now: a fenced former holder
// rejoins as its standby.
func (m *Machine) heardHolding(w *WorkloadSnapshot, pi int, e uint64, ri int, recv time.Time, out *[]Effect) {
	holder := m.provs[pi].ID
	switch {
	case w.State.Holding() && e == w.Epoch:
		m.fence(w, fmt.Sprintf("epoch %d also held by %s, which the lease ranks first", e, holder), out)
	case w.State.Holding():
		m.fence(w, fmt.Sprintf("epoch %d held by %s", e, holder), out)
	case w.State == StateEvicted:
		m.enter(w, StateFenced, out)
	case w.State == StatePromoting:
		target := w.Target
		m.follow(w, pi, e, recv)
		m.abortClaim(w, target, out)
	}
	m.follow(w, pi, e, recv)
	w.ClaimAt[ri] = recv
	if w.State == StateFenced {
		m.enter(w, StateStandby, out) // rejoin: a standby of the holder heard
	}
}

// follow makes provider pi at epoch e the holder this provider watches.
func (m *Machine) follow(w *WorkloadSnapshot, pi int, e uint64, at time.Time) {
	w.holder = pi
	w.Holder = m.provs[pi].ID
	w.rank = m.rank(w)
	w.Epoch = e
	w.WatchFrom = at
	w.Revoked = false
	m.noteHolder(w, e, w.Holder, at)
	w.Restore, w.RestoreAt, w.RestoreAttempt, w.RestoreWhy, w.RestoreHint = RestoreNone, time.Time{}, 0, "", ""
	m.touch(w)
	clear(w.ClaimAt)
	w.Rivals = dropRivals(w.Rivals, e)
}

// dropRivals removes rival claims at or below epoch e.
func dropRivals(rs []RivalClaim, e uint64) []RivalClaim {
	out := rs[:0]
	for _, r := range rs {
		if r.Epoch > e {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// fence stops a copy held here because a higher epoch exists (rule 9).
func (m *Machine) fence(w *WorkloadSnapshot, reason string, out *[]Effect) {
	epoch := w.Epoch
	m.enter(w, StateFenced, out)
	*out = append(*out, StopWorkload{ID: w.Spec.ID, Epoch: epoch, Reason: reason})
}

// ObserveClaim feeds a verified promotion claim or withdrawn marker. An
// active claim for a higher epoch by a provider the lease names fences a
// copy held here at once (rule 9); a standby records it as a rival claim,
// which blocks its own claim step for that epoch (rule 8).
//
// A claim with EpochUnknown is a Paygress announcement: its author started
// the workload before announcing, and it never withdraws. It counts as an
// active claim of Epoch+1 (fencing a copy held here, and competing in a
// standby's claim step) when it is by a provider other than the current
// holder and was made after the current holder began at Epoch (see
// announcedSince). Addressable events live forever, so older announcements
// (from an earlier failover) are ignored, as are those with a zero
// CreatedAt.
func (m *Machine) ObserveClaim(now time.Time, c PromotionClaim) []Effect {
	w := m.byID[c.Workload]
	if w == nil || w.State.Terminal() || c.Claimer == m.self || c.Epoch > MaxEpoch {
		return nil
	}
	pi, ok := m.provIdx[c.Claimer]
	if !ok || !w.names(pi) {
		return nil
	}
	if !w.newestClaim(c.Claimer, c.CreatedAt) {
		return nil // an older version of a claim event already replaced
	}
	announced := c.Epoch == EpochUnknown
	if announced {
		if !c.Active || pi == w.holder || w.Epoch >= MaxEpoch || !m.announcedSince(w, c.CreatedAt) {
			return nil
		}
		c.Epoch = w.Epoch + 1
	}
	now = m.clock(now)
	m.touch(w)
	if !c.Active {
		out := w.Rivals[:0]
		for _, r := range w.Rivals {
			if r.Claimer != c.Claimer || r.Epoch != c.Epoch {
				out = append(out, r)
			}
		}
		w.Rivals = out
		if len(w.Rivals) == 0 {
			w.Rivals = nil
		}
		return nil
	}
	if c.Epoch <= w.Epoch {
		return m.heardReusedClaim(w, pi, c, now)
	}
	var out []Effect
	switch w.State {
	case StateProvisioning, StateLive, StateSuspect, StateRespawning, StateSyncing:
		reason := fmt.Sprintf("epoch %d claimed by %s", c.Epoch, c.Claimer)
		if announced {
			reason = fmt.Sprintf("promotion announced by %s after epoch %d began", c.Claimer, w.Epoch)
		}
		m.fence(w, reason, &out)
	case StateEvicted:
		m.enter(w, StateFenced, &out)
	}
	// The claim is a rival from here: a standby's or claimer's, and a
	// fenced provider's, which follows the claimer once the claim has
	// settled (Tick) if it never hears the claimer hold the workload.
	// one rival entry per claimer (its latest claim), so the list stays
	// bounded by the providers the lease names.
	found := false
	for i, r := range w.Rivals {
		if r.Claimer != c.Claimer {
			continue
		}
		found = true
		if r.Epoch == c.Epoch {
			return out // already a rival (out may hold the fence above)
		}
		w.Rivals[i] = RivalClaim{Claimer: c.Claimer, Epoch: c.Epoch, SeenAt: now}
	}
	if !found {
		w.Rivals = append(w.Rivals, RivalClaim{Claimer: c.Claimer, Epoch: c.Epoch, SeenAt: now})
	}
	if w.State == StatePromoting && c.Epoch > w.Target {
		m.abortClaim(w, w.Target, &out)
	}
	return out
}

// heardReusedClaim handles an active claim of the epoch known here, by
// another provider than its holder, or of a lower one: relays that lost
// their storage hid the later epochs and the claimer reuses a number. It
// will run the workload if its claim step succeeds, so its claim counts as
// a lower holder's heartbeat does (heardLowerHolder): it holds off a
// takeover or retake for takeover_after and ends a claim step under way.
// A standby that ignored it took over the next epoch 48 s after the
// claimer started (props TestLateDeliveries, seed 10933068389224290337,
// after 8,901 checks). Only a claim made within the last Stale counts:
// relays keep claims for ever and serve them again on every subscription.
func (m *Machine) heardReusedClaim(w *WorkloadSnapshot, pi int, c PromotionClaim, now time.Time) []Effect {
	// An unknown (zero) CreatedAt is before any now - Stale: it never counts.
	if (c.Epoch == w.Epoch && pi == w.holder) || w.State.Holding() || c.CreatedAt.Before(now.Add(-m.cfg.Stale)) {
		return nil
	}
	ri, ok := m.RelayIndex(c.Relay)
	if !ok {
		return nil
	}
	var out []Effect
	m.heardLowerHolder(w, ri, now, &out)
	return out
}

// newestClaim records a claim event of claimer created at created and
// reports whether it is at least as new as every claim event seen from that
// claimer for w (NIP-01: the newest version of a replaceable event wins). A
// zero created is unknown and always accepted.
func (w *WorkloadSnapshot) newestClaim(claimer string, created time.Time) bool {
	if created.IsZero() {
		return true
	}
	created = created.UTC()
	for i := range w.ClaimMarks {
		mk := &w.ClaimMarks[i]
		if mk.Claimer != claimer {
			continue
		}
		if created.Before(mk.CreatedAt) {
			return false
		}
		mk.CreatedAt = created
		return true
	}
	w.ClaimMarks = append(w.ClaimMarks, ClaimMark{Claimer: claimer, CreatedAt: created})
	return true
}

// announcedSince reports whether a Paygress announcement made at created
// (the announcer's clock, whole seconds) may have been made after the
// current holder began at w.Epoch: when this provider began holding
// (HoldFrom) or began watching the holder (WatchFrom), whichever is later,
// on the local clock. The two clocks differ by up to MaxSkew, and created_at
// is truncated to the second, so the announcement counts unless it lies
// more than MaxSkew plus one second before that start. This errs towards
// counting: an announcement counted wrongly only fences a copy or delays a
// standby's claim (liveness), while one ignored wrongly would leave two
// writers (safety).
func (m *Machine) announcedSince(w *WorkloadSnapshot, created time.Time) bool {
	if created.IsZero() {
		return false
	}
	since := maxTime(w.HoldFrom, w.WatchFrom)
	return created.After(since.Add(-m.cfg.MaxSkew - time.Second))
}

// ObserveRevocation feeds a verified lease revocation. It is accepted only
// from the workload's current holder at its current epoch (rule 4), and only
// when made under the current grant (see Revocation.CreatedAt). A standby
// named as successor enters the claim step (rule 8), but only before its
// RevocationDeadline: a revocation heard later says nothing about who runs
// the workload now (another standby may have taken over meanwhile, and
// relays that lost their storage may hide its claim), so it starts no
// claim that the takeover rule would not start; the standby waits for the
// takeover instead. A node whose clock is suspect claims nothing.
func (m *Machine) ObserveRevocation(now time.Time, r Revocation) []Effect {
	w := m.byID[r.Workload]
	if w == nil || w.State.Terminal() || r.Signer == m.self {
		return nil
	}
	if r.Signer != w.Holder || r.Epoch != w.Epoch {
		return nil
	}
	if granted := w.Spec.CreatedAt; !r.CreatedAt.IsZero() && !granted.IsZero() &&
		r.CreatedAt.Before(granted.Add(-m.cfg.MaxSkew-time.Second)) {
		return nil // from an earlier grant of the workload
	}
	now = m.clock(now)
	m.touch(w)
	w.Revoked = true
	if w.State != StateStandby || r.Successor != m.self || m.clockSuspect || m.draining {
		return nil
	}
	by := m.RevocationDeadline(r)
	if !now.Before(by) {
		return nil // too late: the takeover rule decides (takeoverDue)
	}
	var out []Effect
	m.promote(w, TriggerRevocation, &out)
	w.RevokeBy = by
	w.RestoreHint = r.StateURI
	return out
}

// MaxDriftPPM is the clock rate error (parts per million) the machine
// allows for each provider's clock when it compares intervals measured on
// two clocks (RevocationDeadline); props states the same bound for the
// guarantee.
const MaxDriftPPM = 1000

// RevocationDeadline is the latest local time at which a claim step that
// revocation r started may still read the relays and start the workload:
// the earliest moment any standby could begin a takeover of the revoking
// holder, less every allowance. Heartbeats the holder created at
// r.QuorumAt (its clock), listing the workload, were on M relays, and any
// N-M+1 relays on which a standby counts silence include one of those M,
// so no standby's TakeoverAfter of silence ends before QuorumAt +
// TakeoverAfter in true time; our clock may differ from the holder's by
// MaxSkew, and the clocks' rates by MaxDriftPPM each over TakeoverAfter.
// Before it, no other provider can have claimed the next epoch (a retake
// needs TakeoverAfter after the eviction too), so the claim read cannot
// miss a rival; after it, only the takeover rule may start a claim.
//
// A holder whose heartbeats list no workloads (a Paygress peer) claims
// everything it holds with every heartbeat, so the creation time of its
// newest heartbeat this provider got from M relays bounds a takeover the
// same way when its revocation carries no QuorumAt. Zero (no claim by
// revocation) when neither is known.
func (m *Machine) RevocationDeadline(r Revocation) time.Time {
	at := r.QuorumAt.UTC()
	if w := m.byID[r.Workload]; w != nil && r.Signer == w.Holder {
		if c := m.unlistedQuorum(&m.provs[w.holder]); c.After(at) {
			at = c
		}
	}
	if at.IsZero() {
		return time.Time{}
	}
	drift := m.cfg.TakeoverAfter / 1_000_000 * (2 * MaxDriftPPM)
	return at.Add(m.cfg.TakeoverAfter - m.cfg.MaxSkew - drift)
}

// unlistedQuorum is, for a provider whose heartbeats list no workloads (a
// Paygress peer: on each relay its newest counting heartbeat was unlisted),
// the M-th newest over the relays of that heartbeat's created_at; zero for
// a provider that lists workloads.
func (m *Machine) unlistedQuorum(p *ProviderSnapshot) time.Time {
	var created [MaxRelays]time.Time
	n := 0
	for r := range p.Seen {
		if p.Unlisted[r].IsZero() || !p.Unlisted[r].Equal(p.Seen[r]) {
			continue
		}
		created[n] = p.Created[r]
		n++
	}
	return mthNewest(created[:n], m.cfg.M)
}

// mthNewest is the m-th newest of times (zero times ignored), or zero when
// fewer than m are set.
func mthNewest(times []time.Time, m int) time.Time {
	var top [MaxRelays]time.Time // newest first
	n := 0
	for _, c := range times {
		if c.IsZero() {
			continue
		}
		j := min(n, m)
		for j > 0 && c.After(top[j-1]) {
			j--
		}
		if j >= m {
			continue
		}
		if n < m {
			n++
		}
		copy(top[j+1:n], top[j:n-1])
		top[j] = c
	}
	if n < m {
		return time.Time{}
	}
	return top[m-1]
}

// quorumAt is, for this provider's revocation of w, the creation time of
// its newest heartbeat that came back from M relays (the M-th newest, over
// the relays, of the newest complete own beat each delivered), provided it
// was created since this provider began holding w at its epoch, so that it
// listed w; zero otherwise.
func (m *Machine) quorumAt(w *WorkloadSnapshot) time.Time {
	q := mthNewest(m.provs[m.selfIdx].Complete, m.cfg.M)
	if q.Before(w.HoldFrom) {
		return time.Time{}
	}
	return q
}

// QuorumAt is the quorum time a revocation of workload id by this provider
// would carry now (PublishRevocation.QuorumAt): zero when this provider
// does not hold it, or none of its heartbeats since it began holding came
// back from M relays; a standby then cannot claim on the revocation and
// waits for the takeover rule.
func (m *Machine) QuorumAt(id string) time.Time {
	w := m.byID[id]
	if w == nil || w.Holder != m.self || !w.State.Holding() {
		return time.Time{}
	}
	return m.quorumAt(w)
}
