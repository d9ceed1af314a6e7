package props

// Machine-level properties: rapid drives ONE lease.Machine with random input
// sequences (including inputs from strangers, stale epochs, replays and
// clocks that step backwards) and checks after every step:
//
//	(a) no PublishRevocation while the workload is held here (Live or any
//	    other holding state) after the step;
//	(b) every PublishRevocation is preceded, in the same effect slice, by a
//	    StopWorkload of that workload (rule 7);
//	(c) AttemptRespawn only under an on-failure policy, with 1 <= attempt <=
//	    max_attempts;
//	(d) time never moves a state backwards: the machine clock never
//	    decreases; terminal states (fenced, failed, expired) are never left;
//	    a workload's epoch never decreases; and between two consecutive Ticks
//	    with no other input, no holder-side workload moves back along
//	    provisioning/live -> suspect -> evicted -> terminal (passing time
//	    alone cannot restore quorum);
//	(e) a machine restored from a JSON snapshot at any step (and synced with
//	    every relay at once, rule 10's only difference) produces exactly the
//	    same effects and state as the original for all later inputs, once
//	    the original's relay streams ended and came back at the same
//	    instant (a restart ends every connection; the relay watch is
//	    volatile); Restore
//	    itself stops every workload not held here (a stop the crash may
//	    have lost) and the sync may re-issue an issued AttemptRespawn;
//	(f) AttemptRespawn is emitted only when due (At <= now), for the
//	    workload's current attempt while Respawning, never while awaiting
//	    relay sync;
//	(g) at most ClaimWindow workloads (drawn: no bound, 1, 2 or the
//	    default) wait for their claim publish's answer at once, and every
//	    PublishClaim puts its workload in that phase.
//
// EnteredState effects must also chain: each workload's first From is its
// state before the step and its last To is its state after.

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"provideragent/lease"
)

var machineT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var machineNames = []string{"alice", "bob", "carol", "dave", "mallory"}

// machineHexKey turns a short name into a 64-character hex pubkey.
func machineHexKey(name string) string {
	h := fmt.Sprintf("%x", name)
	return h + strings.Repeat("0", 64-len(h))
}

func machineRelays() []string {
	return []string{"wss://r1.test", "wss://r2.test", "wss://r3.test"}
}

type machineWorld struct {
	cfg      lease.Config
	self     string
	m        *lease.Machine
	restored *lease.Machine // nil until the first restore action
	specs    map[string]lease.Spec
	ids      []string
	now      time.Time
	prev     map[string]lease.State
	lastTick bool // the previous action was a Tick
	prevNow  time.Time
	prevEp   map[string]uint64
}

func newMachineWorld(t *rapid.T) *machineWorld {
	cfg := lease.DefaultConfig()
	cfg.Relays = machineRelays()
	cfg.EvictWithoutStandby = rapid.Bool().Draw(t, "evict_without_standby")
	cfg.ClaimWindow = rapid.SampledFrom([]int{0, 1, 2, lease.DefaultClaimWindow}).Draw(t, "claim_window")
	selfName := rapid.SampledFrom([]string{"alice", "bob", "carol"}).Draw(t, "self")
	self := machineHexKey(selfName)
	m, err := lease.New(cfg, self)
	if err != nil {
		t.Fatalf("lease.New() = %v", err)
	}
	w := &machineWorld{cfg: cfg, self: self, m: m, specs: map[string]lease.Spec{}, now: machineT0,
		prev: map[string]lease.State{}, prevEp: map[string]uint64{}}
	n := rapid.IntRange(1, 3).Draw(t, "workloads")
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("w%d", i+1)
		spec := lease.Spec{ID: id, Epoch: 1, CreatedAt: machineT0}
		// self is primary or standby; others fill the rest.
		others := []string{}
		for _, nm := range []string{"alice", "bob", "carol", "dave"} {
			if machineHexKey(nm) != self {
				others = append(others, machineHexKey(nm))
			}
		}
		if rapid.Bool().Draw(t, "self_primary") {
			spec.Primary = self
			k := rapid.IntRange(0, 2).Draw(t, "standbys")
			spec.Standbys = others[:k]
		} else {
			spec.Primary = others[0]
			spec.Standbys = []string{self}
			if rapid.Bool().Draw(t, "self_second") {
				spec.Standbys = []string{others[1], self}
			}
		}
		if len(spec.Standbys) > 0 {
			spec.Replication = lease.ReplicationWarmStandby
		} else {
			spec.Replication = rapid.SampledFrom([]lease.Replication{lease.ReplicationNone, lease.ReplicationCheckpointed}).Draw(t, "replication")
		}
		if rapid.Bool().Draw(t, "on_failure") {
			spec.RestartPolicy = lease.RestartPolicy{Policy: lease.RestartOnFailure, MaxAttempts: rapid.IntRange(0, 3).Draw(t, "max_attempts")}
		} else {
			spec.RestartPolicy = lease.RestartPolicy{Policy: lease.RestartNever}
		}
		if rapid.IntRange(0, 3).Draw(t, "expires") == 0 {
			spec.ExpiresAt = machineT0.Add(time.Duration(rapid.IntRange(600, 7200).Draw(t, "expires_s")) * time.Second)
		}
		w.specs[id] = spec
		w.ids = append(w.ids, id)
		w.step(t, "track "+id, false, func(m *lease.Machine) []lease.Effect {
			effs, err := m.Track(w.now, spec)
			if err != nil {
				t.Fatalf("Track(%s) = %v", id, err)
			}
			return effs
		})
	}
	return w
}

// advance moves the test clock; now and then it steps backwards, which the
// machine must treat as no time passing.
func (w *machineWorld) advance(t *rapid.T) {
	switch rapid.IntRange(0, 9).Draw(t, "clock") {
	case 0:
		w.now = w.now.Add(-time.Duration(rapid.IntRange(1, 120).Draw(t, "back_s")) * time.Second)
	case 1, 2:
		w.now = w.now.Add(time.Duration(rapid.IntRange(0, 900).Draw(t, "jump_s")) * time.Second)
	default:
		w.now = w.now.Add(time.Duration(rapid.IntRange(0, 60).Draw(t, "step_s")) * time.Second)
	}
}

func (w *machineWorld) workload(t *rapid.T) string {
	return rapid.SampledFrom(w.ids).Draw(t, "workload")
}

func (w *machineWorld) provider(t *rapid.T) string {
	// self and the named providers most of the time, a stranger sometimes.
	return machineHexKey(rapid.SampledFrom(machineNames).Draw(t, "provider"))
}

func (w *machineWorld) relay(t *rapid.T) string {
	return rapid.SampledFrom([]string{"wss://r1.test", "wss://r2.test", "wss://r3.test", "WSS://R2.test/", "wss://evil.test"}).Draw(t, "relay")
}

// epoch draws an epoch near the machine's view of the workload.
func (w *machineWorld) epoch(t *rapid.T, id string) uint64 {
	ws, _ := w.m.Workload(id)
	e := ws.Epoch
	if ws.Target > 0 {
		e = ws.Target
	}
	d := rapid.IntRange(-1, 2).Draw(t, "epoch_delta")
	if int(e)+d < 1 {
		return 1
	}
	return uint64(int(e) + d)
}

// step feeds one input to the machine (and the restored twin, if any) and
// checks every property.
func (w *machineWorld) step(t *rapid.T, what string, isTick bool, in func(*lease.Machine) []lease.Effect) {
	before := map[string]lease.State{}
	for _, id := range w.ids {
		before[id], _ = w.m.State(id)
	}
	effs := in(w.m)
	if w.restored != nil {
		reffs := in(w.restored)
		if !reflect.DeepEqual(effs, reffs) {
			t.Fatalf("(e) %s: restored machine effects = %v, want %v", what, reffs, effs)
		}
		if got, want := w.restored.Snapshot(), w.m.Snapshot(); !reflect.DeepEqual(got, want) {
			t.Fatalf("(e) %s: restored machine state = %+v, want %+v", what, got, want)
		}
		if got, want := w.restored.Watching(), w.m.Watching(); !reflect.DeepEqual(got, want) {
			t.Fatalf("(e) %s: restored machine's relay watch = %+v, want %+v", what, got, want)
		}
	}
	w.check(t, what, isTick, before, effs)
}

func (w *machineWorld) check(t *rapid.T, what string, isTick bool, before map[string]lease.State, effs []lease.Effect) {
	stopped := map[string]bool{}
	chain := map[string]lease.State{}
	for i, e := range effs {
		id := e.Workload()
		spec, ok := w.specs[id]
		if !ok {
			t.Fatalf("%s: effect %d %v for unknown workload", what, i, e)
		}
		switch e := e.(type) {
		case lease.StopWorkload:
			stopped[id] = true
		case lease.PublishRevocation:
			if !stopped[id] {
				t.Fatalf("(b) %s: %v not preceded by a stop in %v", what, e, effs)
			}
			if st, _ := w.m.State(id); st.Holding() {
				t.Fatalf("(a) %s: %v while the state is %v", what, e, st)
			}
		case lease.AttemptRespawn:
			p := spec.RestartPolicy
			if p.Policy != lease.RestartOnFailure || e.Attempt < 1 || e.Attempt > p.MaxAttempts {
				t.Fatalf("(c) %s: %v under policy %+v", what, e, p)
			}
			if ws, _ := w.m.Workload(id); e.At.After(w.m.Now()) || ws.State != lease.StateRespawning ||
				ws.Attempts != e.Attempt || !ws.RespawnIssued || w.m.AwaitingSync() {
				t.Fatalf("(f) %s: %v at %v with %s attempt %d issued %v, awaiting sync %v",
					what, e, w.m.Now(), ws.State, ws.Attempts, ws.RespawnIssued, w.m.AwaitingSync())
			}
		case lease.EnteredState:
			if machineCoverage != nil {
				machineCoverage[string(e.From)+"->"+string(e.To)]++
			}
			from, seen := chain[id]
			if !seen {
				from = before[id]
			}
			if e.From != from {
				t.Fatalf("%s: %v, but the state was %v", what, e, from)
			}
			chain[id] = e.To
		}
	}
	now := w.m.Now()
	if now.Before(w.prevNow) {
		t.Fatalf("(d) %s: machine clock went back from %v to %v", what, w.prevNow, now)
	}
	w.prevNow = now
	for _, id := range w.ids {
		st, _ := w.m.State(id)
		if to, ok := chain[id]; ok && to != st {
			t.Fatalf("%s: last EnteredState of %s is %v, state is %v", what, id, to, st)
		}
		if _, ok := chain[id]; !ok && before[id] != st && before[id] != "" {
			t.Fatalf("%s: %s moved %v -> %v without an EnteredState", what, id, before[id], st)
		}
		if before[id].Terminal() && st != before[id] {
			t.Fatalf("(d) %s: %s left terminal state %v for %v", what, id, before[id], st)
		}
		ws, _ := w.m.Workload(id)
		if ws.Epoch < w.prevEp[id] {
			t.Fatalf("(d) %s: %s epoch went back from %d to %d", what, id, w.prevEp[id], ws.Epoch)
		}
		w.prevEp[id] = ws.Epoch
		if isTick && w.lastTick && holderRank(st) >= 0 && holderRank(before[id]) >= 0 && holderRank(st) < holderRank(before[id]) {
			t.Fatalf("(d) %s: time alone moved %s back from %v to %v", what, id, before[id], st)
		}
	}
	for _, he := range w.m.Held(nil) {
		st, _ := w.m.State(he.ID)
		if !st.Holding() {
			t.Fatalf("%s: Held() lists %v in state %v", what, he, st)
		}
	}
	publishing := 0
	for _, ws := range w.m.Snapshot().Workloads {
		if ws.Phase == lease.PhasePublishing {
			publishing++
		}
	}
	if w.cfg.ClaimWindow > 0 && publishing > w.cfg.ClaimWindow {
		t.Fatalf("(g) %s: %d claims wait for their publish's answer, window %d", what, publishing, w.cfg.ClaimWindow)
	}
	for _, e := range effs {
		if c, ok := e.(lease.PublishClaim); ok {
			if ws, _ := w.m.Workload(c.ID); ws.Phase != lease.PhasePublishing {
				t.Fatalf("(g) %s: %v, but the workload is in phase %q", what, e, ws.Phase)
			}
		}
	}
	w.lastTick = isTick
}

// holderRank orders the holder-side states along the path time alone can
// take; -1 for states outside it.
func holderRank(s lease.State) int {
	switch s {
	case lease.StateProvisioning, lease.StateLive, lease.StateSyncing, lease.StateRespawning:
		return 0
	case lease.StateSuspect:
		return 1
	case lease.StateEvicted:
		return 2
	case lease.StateFenced, lease.StateFailed, lease.StateExpired:
		return 3
	}
	return -1
}

func (w *machineWorld) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"tick": func(t *rapid.T) {
			w.advance(t)
			now := w.now
			w.step(t, "tick", true, func(m *lease.Machine) []lease.Effect { return m.Tick(now) })
		},
		"self heartbeats": func(t *rapid.T) {
			// this provider's own heartbeats come back from most relays.
			w.advance(t)
			now := w.now
			held := w.m.Held(nil)
			for _, r := range machineRelays() {
				if rapid.IntRange(0, 4).Draw(t, "drop") == 0 {
					continue
				}
				hb := lease.Heartbeat{Provider: w.self, Relay: r, CreatedAt: now, ReceivedAt: now, Listed: true, Workloads: held}
				w.step(t, "self hb", false, func(m *lease.Machine) []lease.Effect { return m.ObserveHeartbeat(now, hb) })
			}
		},
		"healthy period": func(t *rapid.T) {
			// a while of self heartbeats on every relay, a Tick each minute.
			rounds := rapid.IntRange(1, 15).Draw(t, "rounds")
			for i := 0; i < rounds; i++ {
				w.now = w.now.Add(time.Minute)
				now := w.now
				held := w.m.Held(nil)
				for _, r := range machineRelays() {
					hb := lease.Heartbeat{Provider: w.self, Relay: r, CreatedAt: now, ReceivedAt: now, Listed: true, Workloads: held}
					w.step(t, "healthy hb", false, func(m *lease.Machine) []lease.Effect { return m.ObserveHeartbeat(now, hb) })
				}
				w.step(t, "healthy tick", true, func(m *lease.Machine) []lease.Effect { return m.Tick(now) })
			}
		},
		"holder heartbeats": func(t *rapid.T) {
			// the holder as this machine knows it claims its workload.
			w.advance(t)
			now := w.now
			id := w.workload(t)
			ws, _ := w.m.Workload(id)
			if ws.Holder == w.self {
				return
			}
			for _, r := range machineRelays() {
				hb := lease.Heartbeat{Provider: ws.Holder, Relay: r, CreatedAt: now, ReceivedAt: now, Listed: true,
					Workloads: []lease.WorkloadEpoch{{ID: id, Epoch: ws.Epoch}}}
				w.step(t, "holder hb", false, func(m *lease.Machine) []lease.Effect { return m.ObserveHeartbeat(now, hb) })
			}
		},
		"claim feedback": func(t *rapid.T) {
			// the driver's side of the claim step for a promoting workload.
			id := w.workload(t)
			ws, _ := w.m.Workload(id)
			switch ws.Phase {
			case lease.PhasePublishing:
				w.now = w.now.Add(time.Duration(rapid.IntRange(0, 40).Draw(t, "ack_s")) * time.Second)
				now := w.now
				a := lease.ClaimAck{Workload: id, Epoch: ws.Target, Accepted: rapid.IntRange(1, 3).Draw(t, "accepted")}
				w.step(t, "claim ack", false, func(m *lease.Machine) []lease.Effect { return m.ClaimPublished(now, a) })
			case lease.PhaseReading:
				if w.now.Before(ws.PhaseAt) {
					w.now = ws.PhaseAt
				}
				w.now = w.now.Add(time.Duration(rapid.IntRange(0, 40).Draw(t, "read_s")) * time.Second)
				now := w.now
				r := lease.ClaimRead{Workload: id, Epoch: ws.Target, Relays: rapid.IntRange(1, 3).Draw(t, "relays"), Competing: rapid.IntRange(0, 4).Draw(t, "competing") / 4}
				w.step(t, "claim read", false, func(m *lease.Machine) []lease.Effect { return m.ClaimsRead(now, r) })
			}
		},
		"respawn feedback": func(t *rapid.T) {
			// the driver's side of a respawn: Tick once it is due, which
			// issues AttemptRespawn, then report its outcome.
			id := w.workload(t)
			ws, _ := w.m.Workload(id)
			if ws.State != lease.StateRespawning {
				return
			}
			if !ws.RespawnIssued {
				if w.now.Before(ws.RespawnAt) {
					w.now = ws.RespawnAt
				}
				now := w.now
				w.step(t, "respawn due tick", true, func(m *lease.Machine) []lease.Effect { return m.Tick(now) })
			}
			w.now = w.now.Add(time.Duration(rapid.IntRange(0, 5).Draw(t, "respawn_s")) * time.Second)
			now := w.now
			ws, _ = w.m.Workload(id)
			rr := lease.RespawnResult{Workload: id, Attempt: ws.Attempts, OK: rapid.Bool().Draw(t, "ok")}
			w.step(t, "respawn done", false, func(m *lease.Machine) []lease.Effect { return m.RespawnDone(now, rr) })
		},
		"heartbeat": func(t *rapid.T) {
			w.advance(t)
			now := w.now
			hb := lease.Heartbeat{
				Provider:   w.provider(t),
				Relay:      w.relay(t),
				CreatedAt:  now.Add(time.Duration(rapid.IntRange(-240, 60).Draw(t, "created_off_s")) * time.Second),
				ReceivedAt: now,
				Listed:     rapid.Bool().Draw(t, "listed"),
			}
			if hb.Listed && rapid.Bool().Draw(t, "lists") {
				id := w.workload(t)
				hb.Workloads = []lease.WorkloadEpoch{{ID: id, Epoch: w.epoch(t, id)}}
			}
			w.step(t, "heartbeat", false, func(m *lease.Machine) []lease.Effect { return m.ObserveHeartbeat(now, hb) })
		},
		"claim": func(t *rapid.T) {
			w.advance(t)
			now := w.now
			id := w.workload(t)
			c := lease.PromotionClaim{Workload: id, Claimer: w.provider(t), Epoch: w.epoch(t, id), Active: rapid.Bool().Draw(t, "active")}
			if rapid.IntRange(0, 4).Draw(t, "paygress") == 0 {
				// a Paygress announcement: no epoch, created around now
				c.Epoch = lease.EpochUnknown
				c.CreatedAt = now.Add(time.Duration(rapid.IntRange(-900, 60).Draw(t, "announced_off_s")) * time.Second)
			}
			w.step(t, "claim", false, func(m *lease.Machine) []lease.Effect { return m.ObserveClaim(now, c) })
		},
		"revocation": func(t *rapid.T) {
			w.advance(t)
			now := w.now
			id := w.workload(t)
			ws, _ := w.m.Workload(id)
			r := lease.Revocation{Workload: id, Signer: ws.Holder, Epoch: ws.Epoch, Successor: w.provider(t)}
			if rapid.IntRange(0, 3).Draw(t, "forged") == 0 {
				r.Signer, r.Epoch = w.provider(t), w.epoch(t, id)
			}
			w.step(t, "revocation", false, func(m *lease.Machine) []lease.Effect { return m.ObserveRevocation(now, r) })
		},
		"clock": func(t *rapid.T) {
			w.advance(t)
			now := w.now
			suspect := rapid.Bool().Draw(t, "clock_suspect")
			w.step(t, "clock", false, func(m *lease.Machine) []lease.Effect { return m.SetClockSuspect(now, suspect, "drawn") })
		},
		"process exit": func(t *rapid.T) {
			w.advance(t)
			now := w.now
			id := w.workload(t)
			pe := lease.ProcessExit{Workload: id, Epoch: w.epoch(t, id), Reason: "exit 1"}
			w.step(t, "exit", false, func(m *lease.Machine) []lease.Effect { return m.ProcessExited(now, pe) })
		},
		"respawn result": func(t *rapid.T) {
			w.advance(t)
			now := w.now
			id := w.workload(t)
			ws, _ := w.m.Workload(id)
			rr := lease.RespawnResult{Workload: id, Attempt: ws.Attempts + rapid.IntRange(-1, 1).Draw(t, "attempt_delta"), OK: rapid.Bool().Draw(t, "ok")}
			w.step(t, "respawn", false, func(m *lease.Machine) []lease.Effect { return m.RespawnDone(now, rr) })
		},
		"claim published": func(t *rapid.T) {
			w.advance(t)
			now := w.now
			id := w.workload(t)
			a := lease.ClaimAck{Workload: id, Epoch: w.epoch(t, id), Accepted: rapid.IntRange(0, 3).Draw(t, "accepted")}
			w.step(t, "claim published", false, func(m *lease.Machine) []lease.Effect { return m.ClaimPublished(now, a) })
		},
		"claims read": func(t *rapid.T) {
			w.advance(t)
			now := w.now
			id := w.workload(t)
			r := lease.ClaimRead{Workload: id, Epoch: w.epoch(t, id), Relays: rapid.IntRange(0, 3).Draw(t, "relays"), Competing: rapid.IntRange(0, 1).Draw(t, "competing")}
			w.step(t, "claims read", false, func(m *lease.Machine) []lease.Effect { return m.ClaimsRead(now, r) })
		},
		"relay synced": func(t *rapid.T) {
			now := w.now
			r := w.relay(t)
			w.step(t, "relay synced", false, func(m *lease.Machine) []lease.Effect { return m.RelaySynced(now, r) })
		},
		"relay gap": func(t *rapid.T) {
			now := w.now
			r := w.relay(t)
			w.step(t, "relay gap", false, func(m *lease.Machine) []lease.Effect { m.RelayGap(now, r); return nil })
		},
		"restore": func(t *rapid.T) {
			// A restart ends every connection: the original's streams
			// end and come back at the same instant (its watch is
			// volatile, as the restored machine's is), so that the
			// twins can be compared.
			for _, rl := range machineRelays() {
				for _, m := range []*lease.Machine{w.m, w.restored} {
					if m == nil {
						continue
					}
					m.RelayGap(w.m.Now(), rl)
					if effs := m.RelaySynced(w.m.Now(), rl); len(effs) > 0 && m == w.m {
						t.Fatalf("(e) the original's RelaySynced = %v, want nothing (it never restarted)", effs)
					}
				}
			}
			src := w.m
			if w.restored != nil {
				src = w.restored
			}
			b, err := json.Marshal(src.Snapshot())
			if err != nil {
				t.Fatalf("json.Marshal(snapshot) = %v", err)
			}
			var snap lease.Snapshot
			if err := json.Unmarshal(b, &snap); err != nil {
				t.Fatalf("json.Unmarshal(snapshot) = %v", err)
			}
			r, reffs, err := lease.Restore(w.m.Now(), w.cfg, snap)
			if err != nil {
				t.Fatalf("lease.Restore() = %v", err)
			}
			// Restore's own effects: an idempotent stop of every workload
			// not held here (a stop lost in the crash), then the entries
			// into Syncing.
			for _, e := range reffs {
				switch e := e.(type) {
				case lease.StopWorkload:
					if st, _ := r.State(e.ID); st.Holding() {
						t.Fatalf("(e) Restore stops %s, held here in %v", e.ID, st)
					}
				case lease.EnteredState:
					if e.To != lease.StateSyncing {
						t.Fatalf("(e) Restore effect %v", e)
					}
				default:
					t.Fatalf("(e) Restore effect %v", e)
				}
			}
			for _, id := range w.ids {
				if st, _ := r.State(id); !st.Holding() && !stopsIn(reffs, id) {
					t.Fatalf("(e) Restore effects %v: no stop of %s (%v)", reffs, id, st)
				}
			}
			// rule 10: the restored machine syncs with every relay at once;
			// its sync effects (resume and idempotent start, re-issue of a
			// respawn whose report the restart lost) are the only
			// difference from the original.
			for _, rl := range machineRelays() {
				for _, e := range r.RelaySynced(w.m.Now(), rl) {
					switch e := e.(type) {
					case lease.EnteredState:
						if e.From != lease.StateSyncing {
							t.Fatalf("(e) restore sync effect %v", e)
						}
					case lease.StartWorkload:
					case lease.AttemptRespawn:
						if ws, _ := r.Workload(e.ID); ws.State != lease.StateRespawning || !ws.RespawnIssued || ws.Attempts != e.Attempt {
							t.Fatalf("(e) restore sync effect %v for %+v", e, ws)
						}
					default:
						t.Fatalf("(e) restore sync effect %v", e)
					}
				}
			}
			if got, want := r.Snapshot(), w.m.Snapshot(); !reflect.DeepEqual(got, want) {
				t.Fatalf("(e) restored+synced state = %+v, want %+v", got, want)
			}
			if got, want := r.Watching(), w.m.Watching(); !reflect.DeepEqual(got, want) {
				t.Fatalf("(e) restored+synced relay watch = %+v, want %+v", got, want)
			}
			w.restored = r
		},
		"": func(t *rapid.T) {},
	}
}

func stopsIn(effs []lease.Effect, id string) bool {
	for _, e := range effs {
		if st, ok := e.(lease.StopWorkload); ok && st.ID == id {
			return true
		}
	}
	return false
}

// machineCoverage counts the transitions the property test reached.
var machineCoverage map[string]int

func TestMachineProperties(t *testing.T) {
	machineCoverage = map[string]int{}
	defer func() {
		keys := make([]string, 0, len(machineCoverage))
		for k, n := range machineCoverage {
			keys = append(keys, fmt.Sprintf("%s:%d", k, n))
		}
		sort.Strings(keys)
		t.Logf("transitions reached: %s", strings.Join(keys, " "))
		machineCoverage = nil
	}()
	Check(t, func(t *rapid.T) {
		w := newMachineWorld(t)
		t.Repeat(w.actions())
	})
}
