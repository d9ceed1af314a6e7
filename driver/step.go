package driver

import (
	"context"
	"time"

	"provideragent/lease"
)

// Step is one machine step: inputs fed at one time, then committed
// together. Begin a step, feed it, Commit it; a step is used once.
type Step[P, X any] struct {
	d        *Driver[P, X]
	now      time.Time
	effs     []lease.Effect
	toks     []Token
	release  string
	extra    X
	hasExtra bool
}

// Begin starts a step at now (the caller's clock).
func (d *Driver[P, X]) Begin(now time.Time) *Step[P, X] { return &Step[P, X]{d: d, now: now} }

// Now is the step's time.
func (s *Step[P, X]) Now() time.Time { return s.now }

// Effects are the effects the step's inputs returned so far (for the
// caller's timeline; Commit performs them).
func (s *Step[P, X]) Effects() []lease.Effect { return s.effs }

// Token adds an input's token: it is finished once the step is persisted.
func (s *Step[P, X]) Token(t Token) { s.toks = append(s.toks, t) }

// Extra sets the caller's own rows for this step's commit (Batch.Extra). A
// step with them is committed even while held steps wait for a retry, and
// when that commit fails they are not kept: the caller retries them.
func (s *Step[P, X]) Extra(v X) { s.extra, s.hasExtra = v, true }

func (s *Step[P, X]) add(effs []lease.Effect) { s.effs = append(s.effs, effs...) }

// Inject adds effects that no input returned, for tests that run every
// effect type through a caller's Performer and Outbox along the real commit
// path (lease/leasetest's Want). A daemon never calls it: its effects come
// from the machine.
func (s *Step[P, X]) Inject(effs ...lease.Effect) { s.add(effs) }

// Heartbeat feeds a verified heartbeat as one relay delivered it. Another
// provider's heartbeat may refresh the claim times of the workloads it
// lists without an effect: Save writes those rows.
func (s *Step[P, X]) Heartbeat(hb lease.Heartbeat) {
	d := s.d
	s.add(d.m.ObserveHeartbeat(s.now, hb))
	if hb.Provider == d.m.Self() {
		return
	}
	for _, we := range hb.Workloads {
		if _, ok := d.m.State(we.ID); ok {
			d.dirty.add(we.ID)
		}
	}
}

// Revocation feeds a verified lease revocation.
func (s *Step[P, X]) Revocation(r lease.Revocation) {
	s.d.dirty.add(r.Workload)
	s.add(s.d.m.ObserveRevocation(s.now, r))
}

// Claim feeds a verified promotion claim, withdrawn marker or Paygress
// announcement (lease decides what one without an epoch counts as). A
// rival claim may be adopted by a later Tick without an effect.
func (s *Step[P, X]) Claim(c lease.PromotionClaim) {
	s.d.dirty.add(c.Workload)
	s.d.rivalWatch.add(c.Workload)
	s.add(s.d.m.ObserveClaim(s.now, c))
}

// ClaimsRead feeds a claim read: every claim it found, then its outcome.
// Competing is computed here, and returned for the caller's timeline: the
// distinct other providers whose active claim carries an epoch at or above
// the one read (lease records a Paygress announcement that competes as a
// rival, which ClaimsRead sees).
func (s *Step[P, X]) ClaimsRead(r lease.ClaimRead, claims []lease.PromotionClaim) int {
	self := s.d.m.Self()
	rivals := map[string]bool{}
	for _, c := range claims {
		s.Claim(c)
		if c.Workload == r.Workload && c.Claimer != self && c.Active && c.Epoch >= r.Epoch {
			rivals[c.Claimer] = true
		}
	}
	r.Competing = len(rivals)
	s.d.dirty.add(r.Workload)
	s.add(s.d.m.ClaimsRead(s.now, r))
	return r.Competing
}

// Grant feeds a lease grant (Track).
func (s *Step[P, X]) Grant(spec lease.Spec) error {
	s.d.dirty.add(spec.ID)
	effs, err := s.d.m.Track(s.now, spec)
	s.add(effs)
	return err
}

// Exited feeds the exit of a workload process.
func (s *Step[P, X]) Exited(pe lease.ProcessExit) {
	s.d.dirty.add(pe.Workload)
	s.add(s.d.m.ProcessExited(s.now, pe))
}

// RespawnDone feeds the outcome of an AttemptRespawn.
func (s *Step[P, X]) RespawnDone(r lease.RespawnResult) {
	s.d.dirty.add(r.Workload)
	s.add(s.d.m.RespawnDone(s.now, r))
}

// Restored feeds a RestoreCheckpoint's outcome.
func (s *Step[P, X]) Restored(r lease.RestoreResult) {
	s.d.dirty.add(r.Workload)
	s.add(s.d.m.Restored(s.now, r))
}

// HandOver hands a held workload over at the operator's request
// (lease.Machine.HandOver).
func (s *Step[P, X]) HandOver(h lease.Handover) error {
	s.d.dirty.add(h.Workload)
	effs, err := s.d.m.HandOver(s.now, h)
	s.add(effs)
	return err
}

// SetDraining turns the operator's drain on or off; the step's commit
// writes the machine's metadata, which holds it.
func (s *Step[P, X]) SetDraining(on bool) {
	if s.d.m.Draining() != on {
		s.d.m.SetDraining(s.now, on)
		s.d.metaSaved = false
	}
}

// ClaimPublished feeds the outcome of a PublishClaim.
func (s *Step[P, X]) ClaimPublished(a lease.ClaimAck) {
	s.d.dirty.add(a.Workload)
	s.add(s.d.m.ClaimPublished(s.now, a))
}

// RelaySynced reports a relay's EOSE on a new connection or after a
// RelayGap: its live stream is watched from now on, and after a restart it
// counts toward relay sync (rule 10).
func (s *Step[P, X]) RelaySynced(relay string) { s.add(s.d.m.RelaySynced(s.now, relay)) }

// RelayGap reports that the relay's live stream may miss events from now
// on (a connection ended or made anew, a subscription closed or sent
// again): it shows no silence until the relay's next RelaySynced. It
// changes nothing that is persisted.
func (s *Step[P, X]) RelayGap(relay string) { s.d.m.RelayGap(s.now, relay) }

// RelayShown reports that every event the relay delivered before this
// provider's own heartbeat (created, received), fed earlier as unordered,
// has been fed. It changes nothing that is persisted.
func (s *Step[P, X]) RelayShown(relay string, created, received time.Time) {
	s.d.m.RelayShown(s.now, relay, created, received)
}

// SetClockSuspect feeds the caller's verdict on its clock.
func (s *Step[P, X]) SetClockSuspect(suspect bool, why string) {
	s.add(s.d.m.SetClockSuspect(s.now, suspect, why))
}

// Tick advances every workload to the step's time.
func (s *Step[P, X]) Tick() { s.add(s.d.m.Tick(s.now)) }

// Release stops workload id where it is held and forgets it: its row and
// claim time are deleted with the step's commit, and it leaves the machine
// once that commit succeeded. It reports whether id was tracked. A step
// releases at most one workload.
func (s *Step[P, X]) Release(id string) bool {
	w, ok := s.d.m.Workload(id)
	if !ok {
		return false
	}
	if w.State.Holding() {
		s.add([]lease.Effect{lease.StopWorkload{ID: id, Epoch: w.Epoch, Reason: "released by operator"}})
	}
	s.release = id
	return true
}

// Commit performs and persists the step (see the package doc): the stops
// and reports at once, the rest once the step is committed. It returns
// ErrUnpersisted (wrapped) when the step is held, or the commit's error.
func (s *Step[P, X]) Commit(ctx context.Context) error {
	return s.d.commitStep(ctx, s.effs, commit[X]{now: s.now, toks: s.toks, release: s.release, extra: s.extra, hasExtra: s.hasExtra, run: true})
}
