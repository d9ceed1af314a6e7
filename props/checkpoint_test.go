package props_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"provideragent/lease"
	"provideragent/props"
	"provideragent/props/sim"
)

// Durable workloads: every epoch that begins restores the
// newest usable checkpoint record before it starts, holders publish their
// copy's value as records while Live, and a planned move hands the exact
// last value over. The nodes run lease's own SelectCheckpoints; the
// simulator models no Blossom servers (a record carries its value).

// durableProtocol is leaseProtocol with a checkpoint policy (restore
// mode, restore_timeout 30 s) and checkpoints every every.
func durableProtocol(mode lease.RestoreMode, every time.Duration) protocol {
	p := leaseProtocol()
	p.name = fmt.Sprintf("provider-agent's rule (lease.DefaultConfig), durable: %s restore, a checkpoint every %v", mode, every)
	p.nodes = func(sc scenario) []sim.Node {
		lc := sim.LeaseConfig(sc.M, sc.N)
		spec := sim.DurableLeaseSpec(lc, workloadID, sc.K, lease.CheckpointPolicy{
			Servers: []string{"https://blossom.sim"}, Restore: mode, RestoreTimeout: 30 * time.Second,
		})
		nodes := make([]sim.Node, sc.K)
		for i := range nodes {
			n := sim.NewLeaseNode(lc, spec, sim.ProviderID(i), sc.K)
			n.CheckpointEvery(every)
			nodes[i] = n
		}
		return nodes
	}
	return p
}

// drawDurable draws the restore mode and the checkpoint cadence.
func drawDurable(t *rapid.T) protocol {
	mode := rapid.SampledFrom([]lease.RestoreMode{lease.RestoreBestEffort, lease.RestoreRequired}).Draw(t, "restoreMode")
	every := rapid.SampledFrom([]time.Duration{10 * time.Second, 30 * time.Second, 2 * time.Minute}).Draw(t, "checkpointEvery")
	return durableProtocol(mode, every)
}

// TestCheckpointLineage: under every fault of TestEveryFault (partitions,
// relay crashes and wipes, lossy links, replays, crashes mid-step too,
// pauses, kills, failing commits, process exits, forged claims and
// revocations, the targeted strikes and late revocations), relays that
// freeze, planned moves, and forged checkpoint records on relays (a key
// the lease does not name, a bad signature, a member that never held the
// epoch, an epoch never reached, another grant's record), in either
// restore mode: every restore takes a record of an earlier epoch (or its
// own of the epoch it restores), made by a provider while it held that
// epoch Live, and never a forgery (sim.CheckpointLineage); and
// SingleWriter holds throughout.
func TestCheckpointLineage(t *testing.T) {
	var st checkpointStats
	fs := withinBounds()
	fs.MidStepCrash = true
	fs.ProcessExits = true
	fs.Freezes = true
	fs.BlobOutages = true
	fs.Moves = true
	fs.CheckpointForgeries = true
	props.CheckCI(t, 30, func(rt *rapid.T) {
		w := newWorld(rt, drawDurable(rt), fs)
		w.s.AddChecker(sim.CheckpointLineage(workloadID))
		t0 := time.Now()
		actions := w.actions()
		// Relays may serve forgeries from the start: every restore of the
		// run then reads them (unless a wipe took them).
		for _, kind := range forgedKinds {
			if rapid.Bool().Draw(rt, "forgedAtStart"+kind) {
				w.forgeCheckpoint(rt, kind)
			}
		}
		rt.Repeat(actions)
		st.add(w, time.Since(t0))
	})
	t.Logf("%v", &st)
}

// TestPlannedMoveLosesNothing: a holder moved away (sim.Move: stop, final
// record on M relays, hand over) loses nothing: the first copy started at
// a later epoch, by whichever provider, starts from the final value
// exactly (RPO 0, sim.MoveLosesNothing), and SingleWriter holds. Faults
// are those of TestEveryFault and relay freezes, but no relay loses its
// storage: a wiped relay can lose the final record (and a best-effort
// successor that cannot read N-M+1 relays within one attempt starts
// fresh, by design), so restores are required here.
func TestPlannedMoveLosesNothing(t *testing.T) {
	var st checkpointStats
	fs := withinBounds()
	fs.Wipes = false
	fs.MidStepCrash = true
	fs.ProcessExits = true
	fs.Freezes = true
	fs.BlobOutages = true
	fs.Moves = true
	props.CheckCI(t, 40, func(rt *rapid.T) {
		every := rapid.SampledFrom([]time.Duration{10 * time.Second, 30 * time.Second, 2 * time.Minute}).Draw(rt, "checkpointEvery")
		w := newWorld(rt, durableProtocol(lease.RestoreRequired, every), fs)
		w.s.AddChecker(sim.MoveLosesNothing(workloadID))
		t0 := time.Now()
		rt.Repeat(w.actions())
		st.add(w, time.Since(t0))
	})
	t.Logf("%v", &st)
	if st.checks >= 10 && st.resumed == 0 {
		t.Fatalf("no check moved a holder and started its successor: the property checked nothing")
	}
}

// addCheckpointActions adds the fault space's durable-workload actions.
func (w *world) addCheckpointActions(a map[string]func(*rapid.T)) {
	fs := w.fs
	if fs.Freezes {
		a["freeze"] = func(t *rapid.T) {
			r := w.relay(t)
			d := drawDuration(t, "frozenFor", time.Second, 10*time.Minute)
			t.Logf("t=%v R%d freezes for %v", w.s.Now(), r, d)
			w.s.FreezeRelay(r)
			w.s.After(d, func() { w.s.ThawRelay(r) })
			w.wait(t)
		}
	}
	if fs.BlobOutages {
		a["blobOutage"] = func(t *rapid.T) {
			d := drawDuration(t, "blobsDownFor", time.Second, 20*time.Minute)
			t.Logf("t=%v every blob server is down for %v", w.s.Now(), d)
			w.s.BlobsDown(true)
			w.s.After(d, func() { w.s.BlobsDown(false) })
			w.wait(t)
		}
	}
	if fs.Moves {
		a["move"] = func(t *rapid.T) {
			w.move(t)
			w.wait(t)
		}
		a["cutThenMove"] = func(t *rapid.T) {
			// The final record reaches only the relays the holder still
			// has: fewer than M abort the move.
			if h, ok := w.liveHolder(); ok && fs.Partitions {
				w.cutSubset(t, h)
			}
			w.move(t)
			w.wait(t)
		}
		a["moveThenStrike"] = func(t *rapid.T) {
			if !w.move(t) {
				return
			}
			w.s.RunFor(drawDuration(t, "beforeStrike", 0, 2*time.Minute))
			w.strike(t)
			w.wait(t)
		}
	}
	if fs.CheckpointForgeries {
		w.held, w.holding = map[uint64]map[sim.ProviderID]bool{}, map[uint64]map[sim.ProviderID]bool{}
		mark := func(m map[uint64]map[sim.ProviderID]bool, e uint64, p sim.ProviderID) {
			if !m[e][p] {
				if m[e] == nil {
					m[e] = map[sim.ProviderID]bool{}
				}
				m[e][p] = true
			}
		}
		w.s.AddChecker(func(s *sim.Sim) error {
			for p := sim.ProviderID(0); int(p) < w.sc.K; p++ {
				if !s.Up(p) {
					continue
				}
				if e, ok := s.Node(p).Live(workloadID); ok {
					mark(w.held, e, p)
				}
				if e, claiming, ok := s.Node(p).(sim.Holder).Holding(workloadID); ok && !claiming {
					mark(w.holding, e, p)
				}
			}
			return nil
		})
		a["forgeCheckpoints"] = func(t *rapid.T) {
			if rapid.Bool().Draw(t, "forgeAtNextClaim") {
				// the claim's restore reads the relays soon after
				at := w.s.RunWhile(w.s.Now()+targetHorizon, func() bool { return !w.claiming() })
				t.Logf("t=%v %s", w.s.Now(), map[bool]string{true: "a claim step is under way", false: "no claim step within the horizon"}[at >= 0])
			}
			for i := rapid.IntRange(1, 4).Draw(t, "forgeries"); i > 0; i-- {
				w.forgeCheckpoint(t, rapid.SampledFrom(forgedKinds).Draw(t, "forgedKind"))
			}
			w.wait(t)
		}
	}
}

// move moves the workload away from its Live holder, if any.
func (w *world) move(t *rapid.T) bool {
	h, ok := w.liveHolder()
	if !ok {
		t.Logf("t=%v move: no live holder", w.s.Now())
		return false
	}
	t.Logf("t=%v move the workload away from P%d", w.s.Now(), h)
	w.s.Move(h, workloadID)
	return true
}

// forgedKinds are the forged checkpoint records forgeCheckpoint makes.
var forgedKinds = []string{"nonMember", "badSig", "neverHeld", "laterEpoch", "otherGrant"}

// forgeCheckpoint makes relays serve a checkpoint record no provider of
// the world published, of a kind the lease's rules must refuse: by a key
// the lease does not name, with a bad signature, by a member that never
// held the epoch, of an epoch nobody reaches, or of another grant (its
// real holder's, made before this grant). A record of a member that did
// hold its epoch under this grant, validly signed, is one it made: outside
// the assumptions (providers do not lie). So a member that never held
// epoch e (in no holding state so far) signs only records of epoch 1
// (nobody but the grant's primary ever holds it) or of an epoch below the
// highest started (claimed again only after relays lost every trace of it
// and of every epoch above it).
func (w *world) forgeCheckpoint(t *rapid.T, kind string) {
	_, maxEpoch := w.s.Starts()
	maxEpoch = max(maxEpoch, 1)
	grant := sim.Epoch.Unix()
	body := sim.LeaseCheckpoint{
		Workload: workloadID,
		Epoch:    uint64(rapid.IntRange(1, int(maxEpoch)).Draw(t, "forgedEpoch")),
		Seq:      uint64(rapid.IntRange(0, 1000).Draw(t, "forgedSeq")),
		Value:    uint64(rapid.IntRange(0, 1_000_000).Draw(t, "forgedValue")),
		GrantAt:  grant,
		Final:    rapid.Bool().Draw(t, "forgedFinal"),
	}
	if rapid.Bool().Draw(t, "forgedSeqHigh") {
		body.Seq += 1 << 40 // outranks every real record of its epoch
	}
	ahead := []time.Duration{0, time.Hour, 74 * 365 * 24 * time.Hour}[rapid.IntRange(0, 2).Draw(t, "forgedAhead")]
	f := sim.ForgedCheckpoint{At: w.s.LocalNow(0).Add(ahead).Unix()}
	switch kind {
	case "nonMember":
		f.Author = sim.ProviderID(w.sc.K + 7)
	case "badSig":
		f.Author, f.BadSig = w.provider(t), true
	case "neverHeld":
		if body.Epoch == maxEpoch && body.Epoch > 1 {
			body.Epoch--
		}
		var never []sim.ProviderID
		for p := 0; p < w.sc.K; p++ {
			if !w.holding[body.Epoch][sim.ProviderID(p)] && (body.Epoch != 1 || p != 0) {
				never = append(never, sim.ProviderID(p))
			}
		}
		if len(never) == 0 {
			t.Logf("t=%v forgeCheckpoint: every member held epoch %d", w.s.Now(), body.Epoch)
			return
		}
		f.Author = rapid.SampledFrom(never).Draw(t, "forgedSigner")
	case "laterEpoch":
		f.Author = w.provider(t)
		body.Epoch = 1<<20 + uint64(rapid.IntRange(0, 1000).Draw(t, "forgedLaterEpoch"))
	case "otherGrant":
		var holders []sim.ProviderID
		for p := sim.ProviderID(0); int(p) < w.sc.K; p++ {
			if w.held[body.Epoch][p] {
				holders = append(holders, p)
			}
		}
		if len(holders) == 0 {
			holders = append(holders, 0)
		}
		f.Author = holders[rapid.IntRange(0, len(holders)-1).Draw(t, "forgedHolder")]
		body.GrantAt = grant - int64(rapid.IntRange(1, 30).Draw(t, "forgedGrantDaysAgo"))*86400
		f.At = grant - 3600 // made under the earlier grant
	}
	f.Body = body
	var on []int
	for r := 0; r < w.sc.N; r++ {
		if rapid.Bool().Draw(t, fmt.Sprintf("forgedOn%d", r)) {
			on = append(on, r)
			w.s.InjectCheckpoint(sim.RelayID(r), f)
		}
	}
	t.Logf("t=%v relays %v serve a forged checkpoint record (%s): %+v", w.s.Now(), on, kind, f)
}

// checkpointStats sums what the durable properties' checks did.
type checkpointStats struct {
	checks, restored, fresh, started, moved, aborted, resumed int
	events                                                    uint64
	simTime, wall                                             time.Duration
}

func (st *checkpointStats) add(w *world, wall time.Duration) {
	st.checks++
	st.events += w.s.Steps()
	st.simTime += w.s.Now()
	st.wall += wall
	var moves []sim.CheckpointNote
	var starts []sim.CheckpointNote
	for p := 0; p < w.sc.K; p++ {
		for _, nt := range w.s.Node(sim.ProviderID(p)).(sim.CheckpointJournal).CheckpointJournal() {
			switch nt.What {
			case sim.NoteRestored:
				st.restored++
			case sim.NoteStarted:
				st.started++
				if nt.Epoch > 1 && nt.Value == 0 {
					st.fresh++
				}
				starts = append(starts, nt)
			case sim.NoteMoved:
				st.moved++
				moves = append(moves, nt)
			case sim.NoteMoveAborted:
				st.aborted++
			}
		}
	}
	for _, mv := range moves {
		for _, s := range starts {
			if s.Epoch == mv.Epoch+1 && s.Value == mv.Value {
				st.resumed++
				break
			}
		}
	}
}

func (st *checkpointStats) String() string {
	if st.checks == 0 {
		return "no completed checks"
	}
	return fmt.Sprintf("%d checks passed (%v wall): %d simulated events, %v simulated time; %d restores, %d copies started (%d above epoch 1 from 0), %d moves handed over (%d successors resumed at the final value), %d aborted",
		st.checks, st.wall.Round(time.Millisecond), st.events, st.simTime.Round(time.Second), st.restored, st.started, st.fresh, st.moved, st.resumed, st.aborted)
}
