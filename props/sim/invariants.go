package sim

import (
	"fmt"
)

// SingleWriter returns a checker for workload w, the invariant the props
// tests state: at most one provider runs w at any instant; no two providers
// hold w Live at the same epoch; the epoch a provider holds Live never goes
// backwards (across its restarts too); and no provider enters Live at an
// epoch below one another provider has already held Live while a claim or
// announcement of that higher epoch is still stored on at least m relays
// (then every claim read of N-m+1 relays meets it). Relays that lose their
// storage can erase every trace of an epoch whose holder is gone; a later
// claimer then reuses its number, which is not two writers. Paused providers
// count (their workload keeps running); providers whose agent is down count
// only through their running flag.
func SingleWriter(w string, m int) Checker {
	maxHeld := map[ProviderID]uint64{}
	wasLive := map[ProviderID]bool{}
	var maxAny uint64 // highest epoch any provider has held Live
	// reused by every check (it runs after every simulated event)
	var runners []ProviderID
	type liveEpoch struct {
		epoch uint64
		p     ProviderID
	}
	var liveAt []liveEpoch
	return func(s *Sim) error {
		runners = runners[:0]
		for _, p := range s.provs {
			if _, ok := p.running[w]; ok {
				runners = append(runners, p.id)
			}
		}
		if len(runners) > 1 {
			msg := fmt.Sprintf("two writers: workload %s runs on", w)
			for _, id := range runners {
				msg += fmt.Sprintf(" %s(epoch %d)", s.provs[id].name, s.provs[id].running[w])
			}
			return fmt.Errorf("%s", msg)
		}
		liveAt = liveAt[:0]
		for _, p := range s.provs {
			if !p.up {
				continue
			}
			e, ok := p.node.Live(w)
			if !ok {
				wasLive[p.id] = false
				continue
			}
			if !wasLive[p.id] && e < maxAny {
				if n := s.storedEpochEvidence(w, e); n >= m {
					return fmt.Errorf("%s enters workload %s Live at epoch %d after epoch %d was held Live (a claim of a higher epoch is stored on %d relays)",
						p.name, w, e, maxAny, n)
				}
			}
			wasLive[p.id] = true
			for _, l := range liveAt {
				if l.epoch == e {
					return fmt.Errorf("%s and %s both hold workload %s Live at epoch %d", s.provs[l.p].name, p.name, w, e)
				}
			}
			liveAt = append(liveAt, liveEpoch{e, p.id})
			if e < maxHeld[p.id] {
				return fmt.Errorf("%s holds workload %s Live at epoch %d after holding epoch %d", p.name, w, e, maxHeld[p.id])
			}
			maxHeld[p.id] = e
			maxAny = max(maxAny, e)
		}
		return nil
	}
}

// storedEpochEvidence counts the relays that store an active claim or an
// announcement of workload w at an epoch above e, made by a provider of the
// world (a relay's injected events, valid signature or not, are no
// evidence that any provider held that epoch).
func (s *Sim) storedEpochEvidence(w string, e uint64) int {
	n := 0
	for _, rs := range s.relays {
		for _, ev := range rs.store {
			if we, ok := claimedEpoch(ev, w); ok && we > e {
				n++
				break
			}
		}
	}
	return n
}

// CheckpointLineage returns a checker for the checkpoints workload w's
// nodes restore (each NoteRestored of a CheckpointJournal): whenever a
// node restores the state of epoch E from a record of epoch e signed by s,
//
//   - the record is no injected event (InjectCheckpoint: no forgery, with
//     a valid signature or not, is ever restored);
//   - e < E, or e == E and s is the restorer itself (its own record of
//     the epoch it restores again after a restart);
//   - s held w Live at e at the instant it published the record
//     (Event.AuthorHeldLive, which the world reads from s's node as it
//     publishes): only the current holder publishes. (A signer never seen
//     holding e Live fails this too.)
func CheckpointLineage(w string) Checker {
	read := map[ProviderID]int{} // journal notes read, per provider
	return func(s *Sim) error {
		for _, p := range s.provs {
			j, ok := p.node.(CheckpointJournal)
			if !ok {
				continue
			}
			notes := j.CheckpointJournal()
			from := read[p.id]
			read[p.id] = len(notes)
			for _, nt := range notes[from:] {
				if nt.What != NoteRestored || nt.Workload != w {
					continue
				}
				if err := s.lineageOf(p, nt); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

func (s *Sim) lineageOf(p *provider, nt CheckpointNote) error {
	if nt.Record == nil {
		return s.blobLineageOf(p, nt)
	}
	ev := nt.Record
	b, _ := ev.Body.(LeaseCheckpoint)
	signer := fmt.Sprintf("P%d", ev.Author)
	what := fmt.Sprintf("%s restored workload %s at epoch %d from %s's record of epoch %d (seq %d, value %d)",
		p.name, nt.Workload, nt.Epoch, signer, b.Epoch, b.Seq, b.Value)
	switch {
	case ev.Injected || ev.Forged:
		return fmt.Errorf("%s: the record is a forgery a relay served (bad signature %v)", what, ev.Forged)
	case b.Epoch > nt.Epoch || (b.Epoch == nt.Epoch && ev.Author != p.id):
		return fmt.Errorf("%s: a record of a later epoch, or of its own epoch by another provider", what)
	case !ev.AuthorHeldLive:
		return fmt.Errorf("%s: %s did not hold epoch %d Live when it published the record (at %v)", what, signer, b.Epoch, ev.SentAt)
	}
	return nil
}

// blobLineageOf checks a restore of a checkpoint named by heartbeats (no
// record): the blob was put by a provider that held that epoch Live, of an
// earlier epoch (or its own of the restored one).
func (s *Sim) blobLineageOf(p *provider, nt CheckpointNote) error {
	b, ok := s.blobs[nt.Blob]
	what := fmt.Sprintf("%s restored workload %s at epoch %d from blob %s", p.name, nt.Workload, nt.Epoch, nt.Blob)
	switch {
	case !ok:
		return fmt.Errorf("%s: no such blob was ever put", what)
	case b.workload != nt.Workload || b.value != nt.Value:
		return fmt.Errorf("%s: the blob holds %s's value %d, restored %d", what, b.workload, b.value, nt.Value)
	case b.epoch > nt.Epoch || (b.epoch == nt.Epoch && b.author != p.id):
		return fmt.Errorf("%s: a blob of a later epoch (%d), or of its own epoch by another provider", what, b.epoch)
	case !b.heldLive:
		return fmt.Errorf("%s: P%d did not hold epoch %d Live when it put the blob", what, b.author, b.epoch)
	}
	return nil
}

// MoveLosesNothing returns a checker for workload w's planned moves: after
// a move handed epoch E over at value v (a NoteMoved of a
// CheckpointJournal), the first copy any node starts at an epoch above E
// starts from v exactly (RPO 0), whoever it is (the successor, a later
// standby, or the mover retaking it). A move the mover's restart aborted
// (NoteMoveAborted: its handover was never committed, and the copy ran on
// at E) is no longer checked.
func MoveLosesNothing(w string) Checker {
	read := map[ProviderID]int{}
	var moved *CheckpointNote
	var mover ProviderID
	return func(s *Sim) error {
		var fresh [][]CheckpointNote
		for _, p := range s.provs {
			j, ok := p.node.(CheckpointJournal)
			if !ok {
				fresh = append(fresh, nil)
				continue
			}
			notes := j.CheckpointJournal()
			fresh = append(fresh, notes[read[p.id]:])
			read[p.id] = len(notes)
			for _, nt := range fresh[p.id] {
				switch {
				case nt.Workload != w:
				case nt.What == NoteMoved:
					moved, mover = &nt, p.id
				case nt.What == NoteMoveAborted && moved != nil && mover == p.id && moved.Epoch == nt.Epoch:
					moved = nil
				}
			}
		}
		for _, p := range s.provs {
			for _, nt := range fresh[p.id] {
				if moved == nil || nt.What != NoteStarted || nt.Workload != w || nt.Epoch <= moved.Epoch {
					continue
				}
				if nt.Value != moved.Value {
					return fmt.Errorf("%s starts workload %s at epoch %d from value %d; %s's planned move handed epoch %d over at value %d",
						p.name, w, nt.Epoch, nt.Value, s.provs[mover].name, moved.Epoch, moved.Value)
				}
				moved = nil
			}
		}
		return nil
	}
}

// claimedEpoch is the epoch of workload w that stored event ev shows a
// provider of the world claimed: an active claim's or an announcement's;
// false for any other event and for injected ones.
func claimedEpoch(ev *Event, w string) (uint64, bool) {
	if ev.Injected {
		return 0, false
	}
	switch b := ev.Body.(type) {
	case LeaseClaim:
		return b.Epoch, b.Active && b.Workload == w
	case LeaseAnnouncement:
		return b.Epoch, b.Workload == w
	}
	return 0, false
}
