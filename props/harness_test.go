package props_test

import (
	"fmt"
	"slices"
	"time"

	"pgregory.net/rapid"

	"provideragent/lease"
	"provideragent/props/sim"
)

// workloadID is the one workload every simulated world runs.
const workloadID = "w1"

// clockSlewPeriod is how often a time daemon (NTP) reverses a drifting
// clock within the bounds.
const clockSlewPeriod = time.Hour

// scenario is the static part of a world: sizes, quorum and clocks.
type scenario struct {
	K, N, M int
	Clocks  []sim.Clock
	Seed    uint64
}

func (sc scenario) String() string {
	s := fmt.Sprintf("K=%d providers, M=%d of N=%d relays, seed %d, clocks:", sc.K, sc.M, sc.N, sc.Seed)
	for i, c := range sc.Clocks {
		s += fmt.Sprintf(" P%d%+v/%+dppm", i, c.Offset, c.DriftPPM)
	}
	return s
}

// faultSpace says which faults a property lets rapid choose, and their bounds.
type faultSpace struct {
	MinK, MaxK int // providers (1 primary + standbys)
	MinN, MaxN int // relays
	FixedM     int // 0: draw M in [1, N]

	MaxOffset   time.Duration // per-provider clock offset bound (drift included)
	MinOffset   time.Duration // > 0 forces |offset| of P0 into [MinOffset, MaxOffset]
	MaxDriftPPM int64
	MinDriftPPM int64 // > 0 forces drift of magnitude >= this on P0 (slow) and P1 (fast)

	MaxAdvance time.Duration // longest quiet period after an action
	Warmup     time.Duration // fault-free period before the first action

	Partitions    bool
	RelayCrashes  bool
	Wipes         bool
	LinkFaults    bool // loss, duplicates, reordering
	Replays       bool
	ProviderCrash bool          // crash-restart (node crash, or agent crash: the workload follows within AgentDeathGrace)
	MidStepCrash  bool          // agent crash between persisting a step and performing its effects
	ProcessExits  bool          // the workload process exits on its own (restart policy applies)
	Kills         bool          // crash-stop
	MaxPause      time.Duration // 0: no pauses
	MinPause      time.Duration
	ExtraDelay    time.Duration // > 0: per-path delays up to this (beyond the bound)
	MinExtraDelay time.Duration
	// OnlyRelay >= 0 confines relay and link faults to that relay.
	OnlyRelay int
	// WorkloadsOutliveAgent drops the assumption that a workload dies with
	// its agent (sim.Config.AgentDeathGrace < 0); an agent-only crash then
	// lasts at most MaxAgentDown (default MaxPause: bounded like a pause).
	WorkloadsOutliveAgent bool
	MinAgentDown          time.Duration
	MaxAgentDown          time.Duration

	// CommitFailures lets a provider's database refuse every commit for up
	// to 30 min (a full disk), or make each commit wait for it and fail
	// (a write lock held by another process: the loop stalls behind it).
	CommitFailures bool
	// Forgeries lets relays serve forged events (bad signatures, or keys
	// the lease does not name) dated anywhere up to the year 2100.
	Forgeries bool
	// Targeted adds actions aimed at the moments where the single-writer
	// argument is most delicate: run until some provider is in a claim
	// step, or until a holder change (a new epoch started), then strike
	// (wipe a relay's storage, cut a provider off part of the relay set,
	// crash or pause a provider); and cut a provider off a random subset
	// of the relays at once.
	Targeted bool
	// HiddenBeats adds the hiddenBeat action (hidden_beat_test.go): the
	// holder regains quorum by one heartbeat on one relay, and every other
	// provider misses that beat there (a short cut, an agent restart, a
	// lost message ending its connection) while the relay crashes, with or
	// without its storage.
	HiddenBeats bool
	// CheckTakeoverBound also checks the takeover rule directly
	// (sim.AddTakeoverBound): no claim by takeover within TakeoverAfter,
	// less the drift allowance, of a heartbeat of the followed epoch
	// delivered from M relays.
	CheckTakeoverBound bool
	// Freezes lets relays freeze (take everything, answer nothing) for up
	// to 10 min.
	Freezes bool
	// BlobOutages makes every blob server unreachable for up to 20 min
	// (sim.BlobsDown): restores fail meanwhile, nothing stored is lost.
	BlobOutages bool
	// Moves lets the operator move the workload away from its Live holder
	// (sim.Move), also with a strike soon after.
	Moves bool
	// CheckpointForgeries lets relays serve forged checkpoint records
	// (forgeCheckpoint).
	CheckpointForgeries bool
}

// agentDown draws how long an agent-only crash lasts.
func (fs faultSpace) agentDown(t *rapid.T, label string, def time.Duration) time.Duration {
	if !fs.WorkloadsOutliveAgent {
		return drawDuration(t, label, 0, def)
	}
	if fs.MaxAgentDown > 0 {
		return drawDuration(t, label, fs.MinAgentDown, fs.MaxAgentDown)
	}
	return drawDuration(t, label, 0, fs.MaxPause)
}

// protocol builds the nodes of a world.
type protocol struct {
	name  string
	cfg   sim.Config
	nodes func(sc scenario) []sim.Node
}

func drawScenario(t *rapid.T, fs faultSpace) scenario {
	sc := scenario{}
	sc.K = rapid.IntRange(fs.MinK, fs.MaxK).Draw(t, "providers")
	sc.N = rapid.IntRange(fs.MinN, fs.MaxN).Draw(t, "relays")
	if fs.FixedM > 0 {
		sc.M = fs.FixedM
	} else {
		sc.M = rapid.IntRange(1, sc.N).Draw(t, "quorum")
	}
	// Within the drift bound a time daemon slews each clock back every
	// clockSlewPeriod, so drift never pushes the offset past MaxOffset.
	period, maxOffset := time.Duration(0), fs.MaxOffset
	if fs.MinDriftPPM == 0 && fs.MaxDriftPPM > 0 {
		period = clockSlewPeriod
		maxOffset -= time.Duration(int64(period) / 1e6 * fs.MaxDriftPPM)
	}
	for i := 0; i < sc.K; i++ {
		c := sim.Clock{Period: period}
		if maxOffset > 0 {
			lo := -maxOffset
			if fs.MinOffset > 0 && i == 0 {
				lo = fs.MinOffset
			}
			c.Offset = time.Duration(rapid.Int64Range(int64(lo), int64(maxOffset)).Draw(t, fmt.Sprintf("offset%d", i))).Round(time.Millisecond)
			if fs.MinOffset > 0 && i == 0 && rapid.Bool().Draw(t, "offset0behind") {
				c.Offset = -c.Offset
			}
		}
		if fs.MaxDriftPPM > 0 {
			lo := -fs.MaxDriftPPM
			if fs.MinDriftPPM > 0 && i <= 1 {
				lo = fs.MinDriftPPM
			}
			c.DriftPPM = rapid.Int64Range(lo, fs.MaxDriftPPM).Draw(t, fmt.Sprintf("drift%d", i))
			if fs.MinDriftPPM > 0 && i == 0 {
				c.DriftPPM = -c.DriftPPM // the primary's clock runs slow, standbys' fast
			}
		}
		sc.Clocks = append(sc.Clocks, c)
	}
	sc.Seed = rapid.Uint64().Draw(t, "seed")
	return sc
}

// world is one rapid test case: a simulator plus the fault space.
type world struct {
	s  *sim.Sim
	sc scenario
	fs faultSpace
	// revs are the revocations published so far (lateRevocation aims at
	// the next one).
	revs []sim.RevocationPublished
	// held and holding are, per epoch, the providers seen holding the
	// workload Live, and in any holding state (with CheckpointForgeries).
	held, holding map[uint64]map[sim.ProviderID]bool
}

func newWorld(t *rapid.T, proto protocol, fs faultSpace) *world {
	sc := drawScenario(t, fs)
	cfg := proto.cfg
	cfg.Providers, cfg.Relays, cfg.Seed = sc.K, sc.N, sc.Seed
	if fs.WorkloadsOutliveAgent {
		cfg.AgentDeathGrace = -1
	}
	s, err := sim.New(cfg, proto.nodes(sc), sc.Clocks)
	if err != nil {
		t.Fatalf("sim.New(%v) = %v, want nil", sc, err)
	}
	s.AddChecker(sim.SingleWriter(workloadID, sc.M))
	if fs.CheckTakeoverBound {
		lc := lease.DefaultConfig()
		s.AddTakeoverBound(workloadID, sc.M, lc.TakeoverAfter-assumed.DriftAllowance(lc))
	}
	s.KeepClaims(workloadID, assumed.ClaimsKeptLive)
	t.Logf("world: %s, %s", proto.name, sc)
	w := &world{s: s, sc: sc, fs: fs}
	s.AddReportProbe(func(_ sim.ProviderID, v any) {
		if r, ok := v.(sim.RevocationPublished); ok && r.Workload == workloadID {
			w.revs = append(w.revs, r)
		}
	})
	s.Boot()
	return w
}

func (w *world) provider(t *rapid.T) sim.ProviderID {
	return sim.ProviderID(rapid.IntRange(0, w.sc.K-1).Draw(t, "provider"))
}

func (w *world) relay(t *rapid.T) sim.RelayID {
	if w.fs.OnlyRelay >= 0 {
		return sim.RelayID(w.fs.OnlyRelay)
	}
	return sim.RelayID(rapid.IntRange(0, w.sc.N-1).Draw(t, "relay"))
}

// drawDuration draws a duration in [lo, hi] as whole minutes plus seconds,
// so that rapid's bias toward small integers does not make every wait tiny.
func drawDuration(t *rapid.T, label string, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	span := hi - lo
	var d time.Duration
	if span >= time.Minute {
		d = time.Duration(rapid.IntRange(0, int(span/time.Minute)).Draw(t, label+"Min")) * time.Minute
	}
	d += time.Duration(rapid.IntRange(0, 59).Draw(t, label+"Sec")) * time.Second
	if d > span {
		d = span
	}
	return lo + d
}

func (w *world) wait(t *rapid.T) {
	d := drawDuration(t, "wait", time.Second, w.fs.MaxAdvance)
	w.s.RunFor(d)
	t.Logf("  ... %v later (t=%v): %s", d, w.s.Now().Round(time.Millisecond), w.s.Describe())
}

// actions is the t.Repeat action map: every action applies one fault (or
// none), then lets simulated time run. The "" entry checks the invariant
// (the simulator itself checks after every event and keeps the first
// violation with the timeline up to it).
func (w *world) actions() map[string]func(*rapid.T) {
	fs := w.fs
	a := map[string]func(*rapid.T){
		"": func(t *rapid.T) {
			if v := w.s.Violation(); v != nil {
				t.Fatalf("%s at t=%v\ntimeline:\n%s", v.Msg, v.At, sim.FormatTimeline(v.Timeline))
			}
		},
		"wait": func(t *rapid.T) { w.wait(t) },
	}
	if fs.Partitions {
		a["partition"] = func(t *rapid.T) {
			p := w.provider(t)
			r := w.relay(t)
			t.Logf("t=%v partition P%d-R%d", w.s.Now(), p, r)
			w.s.Partition(p, r)
			w.wait(t)
		}
		a["isolate"] = func(t *rapid.T) {
			p := w.provider(t)
			t.Logf("t=%v isolate P%d from every relay", w.s.Now(), p)
			for r := 0; r < w.sc.N; r++ {
				if fs.OnlyRelay < 0 || r == fs.OnlyRelay {
					w.s.Partition(p, sim.RelayID(r))
				}
			}
			w.wait(t)
		}
		a["heal"] = func(t *rapid.T) {
			p, r := w.provider(t), w.relay(t)
			t.Logf("t=%v heal P%d-R%d", w.s.Now(), p, r)
			w.s.Heal(p, r)
			w.wait(t)
		}
	}
	if fs.RelayCrashes {
		a["relayCrash"] = func(t *rapid.T) {
			r := w.relay(t)
			wipe := fs.Wipes && rapid.Bool().Draw(t, "wipe")
			down := drawDuration(t, "down", 0, time.Hour)
			t.Logf("t=%v crash R%d (wipe %v) for %v", w.s.Now(), r, wipe, down)
			w.s.CrashRelay(r, wipe)
			w.s.After(down, func() { w.s.RestartRelay(r) })
			w.wait(t)
		}
	}
	if fs.LinkFaults {
		a["linkFaults"] = func(t *rapid.T) {
			p, r := w.provider(t), w.relay(t)
			f := sim.LinkFaults{
				LossPct: rapid.IntRange(0, 60).Draw(t, "loss"),
				DupPct:  rapid.IntRange(0, 60).Draw(t, "dup"),
				Reorder: rapid.Bool().Draw(t, "reorder"),
			}
			t.Logf("t=%v link P%d-R%d faults %+v", w.s.Now(), p, r, f)
			w.s.SetLinkFaults(p, r, f)
			w.wait(t)
		}
	}
	if fs.Replays {
		a["replay"] = func(t *rapid.T) {
			r := w.relay(t)
			t.Logf("t=%v R%d replays stored heartbeats", w.s.Now(), r)
			w.s.ReplayHeartbeats(r)
			w.wait(t)
		}
	}
	if fs.ProviderCrash {
		a["crashRestart"] = func(t *rapid.T) {
			p := w.provider(t)
			node := rapid.Bool().Draw(t, "nodeCrash")
			down := drawDuration(t, "down", 0, time.Hour)
			if !node {
				down = fs.agentDown(t, "agentDown", time.Hour)
			}
			t.Logf("t=%v crash P%d (node crash %v), restart %v later", w.s.Now(), p, node, down)
			w.s.CrashProvider(p, node)
			w.s.After(down, func() { w.s.RestartProvider(p) })
			w.wait(t)
		}
	}
	if fs.MidStepCrash {
		a["crashMidStep"] = func(t *rapid.T) {
			p := w.provider(t)
			down := fs.agentDown(t, "down", 30*time.Minute)
			n, ok := w.s.Node(p).(interface{ ArmMidStepCrash(time.Duration) })
			if ok {
				t.Logf("t=%v P%d's agent will crash mid-step (after persisting, before the effects), down %v", w.s.Now(), p, down)
				n.ArmMidStepCrash(down)
			}
			w.wait(t)
		}
		a["crashBeforeCommit"] = func(t *rapid.T) {
			p := w.provider(t)
			down := fs.agentDown(t, "down", 30*time.Minute)
			n, ok := w.s.Node(p).(interface{ ArmCrashBeforeCommit(time.Duration) })
			if ok {
				t.Logf("t=%v P%d's agent will crash mid-step (after its stops, before its commit), down %v", w.s.Now(), p, down)
				n.ArmCrashBeforeCommit(down)
			}
			w.wait(t)
		}
	}
	if fs.ProcessExits {
		a["exit"] = func(t *rapid.T) {
			p := w.provider(t)
			t.Logf("t=%v P%d's workload process exits", w.s.Now(), p)
			w.s.ExitWorkload(p, workloadID)
			w.wait(t)
		}
	}
	if fs.Kills {
		a["kill"] = func(t *rapid.T) {
			p := w.provider(t)
			t.Logf("t=%v P%d dies for good", w.s.Now(), p)
			w.s.Kill(p)
			w.wait(t)
		}
	}
	if fs.MaxPause > 0 {
		a["pause"] = func(t *rapid.T) {
			p := w.provider(t)
			d := drawDuration(t, "pause", fs.MinPause, fs.MaxPause)
			t.Logf("t=%v pause P%d for %v", w.s.Now(), p, d)
			w.s.PauseFor(p, d)
			w.wait(t)
		}
	}
	if fs.CommitFailures {
		a["commitFailure"] = func(t *rapid.T) {
			p := w.provider(t)
			d := drawDuration(t, "failFor", time.Second, 30*time.Minute)
			if n, ok := w.s.Node(p).(interface{ ArmCommitFailure(time.Duration) bool }); ok && n.ArmCommitFailure(d) {
				t.Logf("t=%v P%d's database refuses every commit for %v", w.s.Now(), p, d)
				w.s.Logf("P%d's database refuses every commit for %v", p, d)
			}
			w.wait(t)
		}
		a["commitStall"] = func(t *rapid.T) {
			p := w.provider(t)
			d := drawDuration(t, "stallFor", time.Second, 30*time.Minute)
			if n, ok := w.s.Node(p).(interface{ ArmCommitStall(time.Duration) bool }); ok && n.ArmCommitStall(d) {
				t.Logf("t=%v P%d's database is locked by another process for %v: each commit waits, then fails", w.s.Now(), p, d)
				w.s.Logf("P%d's database is locked by another process for %v", p, d)
			}
			w.wait(t)
		}
	}
	if fs.Forgeries {
		a["forge"] = func(t *rapid.T) {
			r := w.relay(t)
			f := sim.ForgedEvent{Workload: workloadID, Revocation: rapid.Bool().Draw(t, "forgedRevocation")}
			if rapid.Bool().Draw(t, "badSig") {
				f.BadSig, f.Author = true, w.provider(t) // someone else's key, a signature that fails
			} else {
				f.Author = sim.ProviderID(w.sc.K + 7) // a key the lease does not name
			}
			ahead := []time.Duration{0, time.Hour, 74 * 365 * 24 * time.Hour}[rapid.IntRange(0, 2).Draw(t, "forgedAhead")]
			f.At = w.s.LocalNow(0).Add(ahead).Unix()
			t.Logf("t=%v R%d serves a forged event %+v", w.s.Now(), r, f)
			w.s.InjectForged(r, f)
			w.wait(t)
		}
	}
	if fs.Targeted {
		a["atNextClaim"] = func(t *rapid.T) {
			until := w.s.Now() + targetHorizon
			at := w.s.RunWhile(until, func() bool { return !w.claiming() })
			t.Logf("t=%v %s", w.s.Now(), map[bool]string{true: "a claim step is under way", false: "no claim step within the horizon"}[at >= 0])
			w.strike(t)
			w.wait(t)
		}
		a["atNextHolderChange"] = func(t *rapid.T) {
			_, e0 := w.s.Starts()
			until := w.s.Now() + targetHorizon
			at := w.s.RunWhile(until, func() bool { _, e := w.s.Starts(); return e == e0 })
			t.Logf("t=%v %s", w.s.Now(), map[bool]string{true: "a new epoch started", false: "no new epoch within the horizon"}[at >= 0])
			w.strike(t)
			w.wait(t)
		}
		a["cutSubset"] = func(t *rapid.T) {
			w.cutSubset(t, w.provider(t))
			w.wait(t)
		}
		a["lateRevocation"] = func(t *rapid.T) {
			w.lateRevocation(t)
			w.wait(t)
		}
	}
	if fs.HiddenBeats {
		a["hiddenBeat"] = func(t *rapid.T) {
			w.hiddenBeat(t)
			w.wait(t)
		}
	}
	if fs.ExtraDelay > 0 {
		a["slowPair"] = func(t *rapid.T) {
			a := w.provider(t)
			b := sim.ProviderID((int(a) + 1 + rapid.IntRange(0, w.sc.K-2).Draw(t, "other")) % w.sc.K)
			d := drawDuration(t, "delay", fs.MinExtraDelay, fs.ExtraDelay)
			t.Logf("t=%v every relay delivers P%d's events to P%d and back %v late", w.s.Now(), a, b, d)
			for r := 0; r < w.sc.N; r++ {
				w.s.SetPathDelay(a, sim.RelayID(r), b, d)
				w.s.SetPathDelay(b, sim.RelayID(r), a, d)
			}
			w.wait(t)
		}
	}
	w.addCheckpointActions(a)
	return a
}

// targetHorizon is how long a targeted action waits for its moment (a
// claim step, a new epoch) before it strikes anyway: a takeover needs
// TakeoverAfter (12 min) of silence, so a failover begun before the action
// reaches its claim step within it.
const targetHorizon = 20 * time.Minute

// claiming reports whether some provider is in a claim step.
func (w *world) claiming() bool {
	for p := 0; p < w.sc.K; p++ {
		if n, ok := w.s.Node(sim.ProviderID(p)).(interface{ Claiming(string) bool }); ok && n.Claiming(workloadID) {
			return true
		}
	}
	return false
}

// cutSubset partitions provider p from a drawn subset of the relays and
// heals its links to the others.
func (w *world) cutSubset(t *rapid.T, p sim.ProviderID) {
	var cut []int
	for r := 0; r < w.sc.N; r++ {
		if w.fs.OnlyRelay >= 0 && r != w.fs.OnlyRelay {
			continue
		}
		if rapid.Bool().Draw(t, fmt.Sprintf("cut%d", r)) {
			w.s.Partition(p, sim.RelayID(r))
			cut = append(cut, r)
		} else {
			w.s.Heal(p, sim.RelayID(r))
		}
	}
	t.Logf("t=%v P%d cut off relays %v (healed to the others)", w.s.Now(), p, cut)
}

// lateRevocation aims at a revocation that its successor hears late, after
// another standby took over and a relay lost the new holder's claim (issue
// 24's schedule, its choices drawn): the holder loses quorum but keeps some
// relays (where its revocation will be); at its revocation the named
// successor is cut off every relay or its agent crashes, so that it reads
// the revocation only when it comes back; every other provider is cut off
// a drawn part of the relays the holder kept (so that a new holder's claim
// may miss them); once a new epoch starts, a drawn relay crashes (losing
// its storage when wipes are allowed and the storage assumption lets it);
// and the successor comes back within a minute of its restart, to the
// holder's relays and the crashed one, or to a drawn subset. Each step
// that finds nothing to aim at within the horizon ends the action there.
func (w *world) lateRevocation(t *rapid.T) {
	h, ok := w.liveHolder()
	if !ok {
		t.Logf("t=%v lateRevocation: no live holder", w.s.Now())
		return
	}
	kept := map[int]bool{rapid.IntRange(0, w.sc.N-1).Draw(t, "holderKeeps"): true}
	for r := 0; r < w.sc.N; r++ {
		if !kept[r] && len(kept) < w.sc.M-1 && rapid.Bool().Draw(t, fmt.Sprintf("holderKeeps%d", r)) {
			kept[r] = true
		}
	}
	for r := 0; r < w.sc.N; r++ {
		if !kept[r] {
			w.s.Partition(h, sim.RelayID(r))
		}
	}
	t.Logf("t=%v lateRevocation: holder P%d keeps relays %v", w.s.Now(), h, keys(kept))
	n := len(w.revs)
	if w.s.RunWhile(w.s.Now()+targetHorizon, func() bool { return len(w.revs) == n }) < 0 {
		t.Logf("t=%v lateRevocation: no revocation within the horizon", w.s.Now())
		return
	}
	succ := w.revs[n].Successor
	if succ < 0 {
		t.Logf("t=%v lateRevocation: the revocation names no successor", w.s.Now())
		return
	}
	reboot := w.fs.ProviderCrash && rapid.Bool().Draw(t, "successorReboots")
	if reboot {
		w.s.CrashProvider(succ, rapid.Bool().Draw(t, "successorNodeCrash"))
	} else {
		for r := 0; r < w.sc.N; r++ {
			w.s.Partition(succ, sim.RelayID(r))
		}
	}
	for p := 0; p < w.sc.K; p++ {
		if sim.ProviderID(p) == succ || sim.ProviderID(p) == h {
			continue
		}
		for r := range kept {
			if rapid.Bool().Draw(t, fmt.Sprintf("P%dOffKept%d", p, r)) {
				w.s.Partition(sim.ProviderID(p), sim.RelayID(r))
			}
		}
	}
	t.Logf("t=%v lateRevocation: successor P%d misses the revocation (reboot %v)", w.s.Now(), succ, reboot)
	_, e0 := w.s.Starts()
	if w.s.RunWhile(w.s.Now()+targetHorizon, func() bool { _, e := w.s.Starts(); return e == e0 }) < 0 {
		t.Logf("t=%v lateRevocation: no new epoch within the horizon", w.s.Now())
		return
	}
	w.s.RunFor(drawDuration(t, "beforeCrash", 0, 5*time.Minute))
	r := w.relay(t)
	wipe := w.fs.Wipes && rapid.Bool().Draw(t, "lateWipe")
	down := drawDuration(t, "lateDown", 0, 2*time.Minute)
	t.Logf("t=%v lateRevocation: crash R%d (wipe %v) for %v", w.s.Now(), r, wipe, down)
	w.s.CrashRelay(r, wipe)
	w.s.RunFor(down)
	w.s.RestartRelay(r)
	w.s.RunFor(drawDuration(t, "successorAway", 0, time.Minute))
	if reboot {
		w.s.RestartProvider(succ)
	}
	back := map[int]bool{}
	if rapid.Bool().Draw(t, "successorBackToEvidence") {
		back[int(r)] = true
		for k := range kept {
			back[k] = true
		}
	} else {
		for q := 0; q < w.sc.N; q++ {
			if rapid.Bool().Draw(t, fmt.Sprintf("successorBack%d", q)) {
				back[q] = true
			}
		}
	}
	for q := range back {
		w.s.Heal(succ, sim.RelayID(q))
	}
	t.Logf("t=%v lateRevocation: successor P%d back on relays %v", w.s.Now(), succ, keys(back))
}

func keys(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// liveHolder is a provider holding the workload Live, if any.
func (w *world) liveHolder() (sim.ProviderID, bool) {
	for p := 0; p < w.sc.K; p++ {
		if _, ok := w.s.Node(sim.ProviderID(p)).Live(workloadID); ok && w.s.Up(sim.ProviderID(p)) {
			return sim.ProviderID(p), true
		}
	}
	return 0, false
}

// runnerAt is the provider running the workload at the highest epoch.
func (w *world) runnerAt() (sim.ProviderID, bool) {
	best, found := sim.ProviderID(0), false
	var top uint64
	for p := 0; p < w.sc.K; p++ {
		if e, ok := w.s.Running(sim.ProviderID(p), workloadID); ok && (!found || e > top) {
			best, top, found = sim.ProviderID(p), e, true
		}
	}
	return best, found
}

// strike applies one fault drawn from those the fault space allows, at
// once: the moment chosen by a targeted action.
func (w *world) strike(t *rapid.T) {
	fs := w.fs
	var kinds []string
	if fs.RelayCrashes {
		kinds = append(kinds, "relay")
	}
	if fs.Partitions {
		kinds = append(kinds, "cut")
	}
	if fs.ProviderCrash {
		kinds = append(kinds, "crash")
	}
	if fs.MaxPause > 0 {
		kinds = append(kinds, "pause")
	}
	if len(kinds) == 0 {
		return
	}
	switch rapid.SampledFrom(kinds).Draw(t, "strike") {
	case "relay":
		r := w.relay(t)
		wipe := fs.Wipes && rapid.Bool().Draw(t, "wipe")
		down := drawDuration(t, "down", 0, 2*time.Minute)
		t.Logf("t=%v strike: crash R%d (wipe %v) for %v", w.s.Now(), r, wipe, down)
		w.s.CrashRelay(r, wipe)
		w.s.After(down, func() { w.s.RestartRelay(r) })
	case "cut":
		w.cutSubset(t, w.provider(t))
	case "crash":
		p := w.provider(t)
		node := rapid.Bool().Draw(t, "nodeCrash")
		down := drawDuration(t, "down", 0, 10*time.Minute)
		if !node {
			down = fs.agentDown(t, "agentDown", 10*time.Minute)
		}
		t.Logf("t=%v strike: crash P%d (node crash %v), restart %v later", w.s.Now(), p, node, down)
		w.s.CrashProvider(p, node)
		w.s.After(down, func() { w.s.RestartProvider(p) })
	case "pause":
		p := w.provider(t)
		d := drawDuration(t, "pause", fs.MinPause, fs.MaxPause)
		t.Logf("t=%v strike: pause P%d for %v", w.s.Now(), p, d)
		w.s.PauseFor(p, d)
	}
}

// runSafety is the safety property over proto and fs: build a world, let
// rapid apply faults, and fail at the first two-writer instant.
func runSafety(proto protocol, fs faultSpace, st *stats) func(*rapid.T) {
	return func(t *rapid.T) {
		w := newWorld(t, proto, fs)
		if fs.Warmup > 0 {
			w.s.RunFor(fs.Warmup)
			t.Logf("  ... %v warm-up (t=%v): %s", fs.Warmup, w.s.Now(), w.s.Describe())
		}
		t.Repeat(w.actions())
		st.add(w)
	}
}

// stats sums what the checks of one property simulated.
type stats struct {
	checks    int
	events    uint64
	simTime   time.Duration
	failovers int // checks in which some standby started the workload
	starts    int
}

func (st *stats) add(w *world) {
	if st == nil {
		return
	}
	st.checks++
	st.events += w.s.Steps()
	st.simTime += w.s.Now()
	n, e := w.s.Starts()
	st.starts += n
	if e > 1 {
		st.failovers++
	}
}

func (st *stats) String() string {
	if st.checks == 0 {
		return "no completed checks"
	}
	return fmt.Sprintf("%d checks passed: %d simulated events, %v simulated time (%v per check on average), %d workload starts, failover in %d checks",
		st.checks, st.events, st.simTime.Round(time.Second), (st.simTime / time.Duration(st.checks)).Round(time.Second), st.starts, st.failovers)
}
