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

// A takeover is safe only if the standby would have heard every heartbeat
// that gave the holder quorum. These schedules and the hiddenBeat action
// attack that: the holder, left with fewer than M relays, comes back on
// one more relay r for one beat (quorum again, Live for another T1+T2
// after), and the standbys miss that beat on r: a short cut of their link
// between two of their own beats, an agent restart, or a lost message
// that ends the connection, while r loses its storage (or is an ephemeral
// sink: it serves nothing on the next subscription). A standby that reads
// "no beat received from r" as "the holder was silent on r" then takes
// over beside a Live holder. lease's relay watch (lease/watch.go) counts
// silence only over a relay's live stream since its last RelayGap, and only
// up to its last own heartbeat received (less the relay delay).

// TestOneWipeHidesAQuorumBeat: a standby misses one heartbeat that gave
// the holder quorum (a short cut of its own link, then one relay wipe).
// 2 providers, M=2 of N=3, perfect clocks.
// P1 (standby) watches R0 and R1 only; its agent restarts once at 90 s
// (its beats then go out 30 s after P0's). At 100 s P0 (holder) is cut off
// R0 and R1: it keeps R2, loses quorum and would evict at about 665 s, and
// P1 counts its silence on R0 and R1 from about 65 s. At 590 s P0 is back
// on R0 for one beat (600 s): that beat comes back to P0 from R0 and R2,
// so P0 has quorum again (Live, evicting no earlier than about 1205 s);
// P1 is off R0 from 597 s to 614 s (between two of its own beats) and R0
// loses its storage at 612 s, so P1 never hears that beat. With silence
// counted from the last beat received, P1 took over epoch 2 at about 815 s
// on R0 and R1, where its claim and beats stay: P0, on R2 only, never
// heard epoch 2 and ran until it evicted (50 of 50 seeds).
func TestOneWipeHidesAQuorumBeat(t *testing.T) {
	acrossSeeds(t, 50, 2, 2, 3, func(t *testing.T, s *sim.Sim) {
		oneWipeSchedule(s)
		s.RunUntil(40 * time.Minute)
		wantOneWriter(t, s)
	})
}

func oneWipeSchedule(s *sim.Sim) {
	s.Partition(1, 2) // P1 watches R0 and R1
	s.RunUntil(65 * time.Second)
	s.CrashProvider(1, false) // a standby's agent restarts: nothing runs there
	s.RunUntil(90 * time.Second)
	s.RestartProvider(1)
	s.RunUntil(100 * time.Second)
	s.Partition(0, 0)
	s.Partition(0, 1) // P0 keeps R2
	s.RunUntil(590 * time.Second)
	s.Heal(0, 0) // P0 back on R0 for its beat at 600 s
	s.RunUntil(597 * time.Second)
	s.Partition(1, 0) // P1 misses it live
	s.RunUntil(612 * time.Second)
	s.Partition(0, 0)
	s.CrashRelay(0, true) // and R0 forgets it (a heartbeat: not protected)
	s.RunUntil(613 * time.Second)
	s.RestartRelay(0)
	s.RunUntil(614 * time.Second)
	s.Heal(1, 0)
}

// TestHiddenBeatsOnEveryRelay: the standby watches all three relays, so
// its claim reaches every relay the holder might be on; the holder keeps
// R2 (where the standby hears it) and comes back on R0 for one beat at
// about 500 s, then on R1 for one beat at about 600 s, and each time the
// standby's link to that relay blinks (between two of its own beats) and
// the relay loses its storage. After the second beat (quorum on R1 and R2)
// the holder is cut off every relay: Live until its quorum lapses and
// T1+T2 pass, and deaf to any claim. The standby has seen nothing of it on
// R0 and R1 since 100 s.
func TestHiddenBeatsOnEveryRelay(t *testing.T) {
	acrossSeeds(t, 20, 2, 2, 3, func(t *testing.T, s *sim.Sim) {
		shiftPhase(s, 1)
		s.RunUntil(100 * time.Second)
		s.Partition(0, 0)
		s.Partition(0, 1) // P0 keeps R2
		hideBeat(s, 0, 1, 0, 500*time.Second, true)
		hideBeat(s, 0, 1, 1, 600*time.Second, true)
		isolate(s, 0, 3)
		s.RunUntil(60 * time.Minute)
		reconnect(s, 0, 3)
		s.RunUntil(80 * time.Minute)
		wantOneWriter(t, s)
	})
}

// TestHiddenBeatQuorumOfThree: M=3 of N=3, so a takeover needs silence on
// one relay only, and the holder needs all three. The holder, cut off R0
// at 100 s (no quorum), is back on R0 for one beat at about 500 s (quorum),
// which the standby misses (a blink of its link) and R0 then forgets; the
// holder is then cut off every relay (Live for stale+T1+T2 more, deaf to
// claims). The standby hears it on R1 and R2 until then, on R0 not since
// 100 s.
func TestHiddenBeatQuorumOfThree(t *testing.T) {
	acrossSeeds(t, 20, 2, 3, 3, func(t *testing.T, s *sim.Sim) {
		shiftPhase(s, 1)
		s.RunUntil(100 * time.Second)
		s.Partition(0, 0)
		hideBeat(s, 0, 1, 0, 500*time.Second, true)
		isolate(s, 0, 3)
		s.RunUntil(40 * time.Minute)
		reconnect(s, 0, 3)
		s.RunUntil(80 * time.Minute)
		wantOneWriter(t, s)
	})
}

// TestHiddenBeatAgentRestart: as TestOneWipeHidesAQuorumBeat, but the
// standby misses the beat because its agent restarts around it (13 s,
// shorter than a heartbeat interval), and R0 is a relay that keeps no
// heartbeat (it crashes and loses its storage right after the beat, as
// for an ephemeral event it never stores).
func TestHiddenBeatAgentRestart(t *testing.T) {
	acrossSeeds(t, 20, 2, 2, 3, func(t *testing.T, s *sim.Sim) {
		holderBackAt590(s)
		s.Heal(0, 0)
		if !runUntilStoredBeat(s, 0, 0, 2*time.Minute) {
			t.Fatalf("P0's beat never reached R0\n%s", sim.FormatTimeline(s.Timeline()))
		}
		s.CrashProvider(1, false)
		s.RunFor(8 * time.Second)
		s.Partition(0, 0)
		s.CrashRelay(0, true)
		s.RestartRelay(0)
		s.RunFor(5 * time.Second)
		s.RestartProvider(1)
		s.RunUntil(40 * time.Minute)
		wantOneWriter(t, s)
	})
}

// TestHiddenBeatLostDelivery: no cut and no restart: the relay's delivery
// of that one beat to the standby is lost, which ends the connection (a
// relay never skips an event on a connection it keeps: the delivery
// assumption), and the relay forgets the beat before the standby's new
// subscription reads it back.
func TestHiddenBeatLostDelivery(t *testing.T) {
	acrossSeeds(t, 20, 2, 2, 3, func(t *testing.T, s *sim.Sim) {
		holderBackAt590(s)
		s.SetLinkFaults(1, 0, sim.LinkFaults{LossPct: 100})
		s.Heal(0, 0)
		if !runUntilStoredBeat(s, 0, 0, 2*time.Minute) {
			t.Fatalf("P0's beat never reached R0\n%s", sim.FormatTimeline(s.Timeline()))
		}
		s.RunFor(8 * time.Second)
		s.Partition(0, 0)
		s.CrashRelay(0, true)
		s.RestartRelay(0)
		s.SetLinkFaults(1, 0, sim.LinkFaults{})
		s.RunUntil(40 * time.Minute)
		wantOneWriter(t, s)
	})
}

// TestTakeoverDuringAnUnseenCut: the standby's link to R0 is cut just
// before the holder's beat there and stays cut (the standby is not told:
// a silent cut goes unnoticed until a new connection) while its takeover
// falls due; R0 then loses its storage. Its proof on R0 ends at its last
// own heartbeat received before the cut, so it cannot claim meanwhile, and
// once reconnected it watches R0 anew.
func TestTakeoverDuringAnUnseenCut(t *testing.T) {
	acrossSeeds(t, 20, 2, 2, 3, func(t *testing.T, s *sim.Sim) {
		holderBackAt590(s)
		s.Heal(0, 0)
		s.Partition(1, 0)
		s.RunUntil(700 * time.Second)
		s.Partition(0, 0)
		s.CrashRelay(0, true)
		s.RestartRelay(0)
		s.RunUntil(1000 * time.Second) // past P1's old takeover time, still cut
		s.Heal(1, 0)
		s.RunUntil(40 * time.Minute)
		wantOneWriter(t, s)
	})
}

// hideBeat: holder h is back on relay r from at until its next heartbeat
// there came back to it; standby sb's link to r is cut right after sb's
// own beat came back from r and healed once r crashed after h's beat, so
// that the cut falls between two of sb's own beats (the schedules phase sb
// 30 s after h: shiftPhase). r loses its storage (wipe) or only restarts,
// and h is cut off r again.
func hideBeat(s *sim.Sim, h, sb sim.ProviderID, r sim.RelayID, at time.Duration, wipe bool) {
	s.RunUntil(at)
	s.Heal(h, r)
	if !runUntilStoredBeat(s, sb, r, 2*time.Minute) {
		return
	}
	s.RunFor(6 * time.Second) // its echo is back (legs of at most 5 s)
	s.Partition(sb, r)
	if !runUntilStoredBeat(s, h, r, 2*time.Minute) {
		return
	}
	s.RunFor(6 * time.Second) // the beat's echo is back at h
	s.Partition(h, r)
	s.CrashRelay(r, wipe)
	s.RunFor(time.Second)
	s.RestartRelay(r)
	s.Heal(sb, r)
}

// holderBackAt590 is the variants' common start, after
// TestOneWipeHidesAQuorumBeat: P1 watches R0 and R1 only, its beats 30 s
// after P0's; P0 is cut off R0 and R1 at 100 s (it keeps R2 and loses
// quorum); the world runs to 590 s, just before P0 is back on R0 for a
// beat.
func holderBackAt590(s *sim.Sim) {
	s.Partition(1, 2)
	shiftPhase(s, 1)
	s.RunUntil(100 * time.Second)
	s.Partition(0, 0)
	s.Partition(0, 1)
	s.RunUntil(590 * time.Second)
}

// shiftPhase restarts sb's agent at 65 s for 25 s, so that its heartbeats
// go out about 30 s after the holder's (both first beat at boot).
func shiftPhase(s *sim.Sim, sb sim.ProviderID) {
	s.RunUntil(65 * time.Second)
	s.CrashProvider(sb, false)
	s.RunUntil(90 * time.Second)
	s.RestartProvider(sb)
}

// runUntilStoredBeat runs until relay r stores a heartbeat of p sent from
// now on, at most for limit; it reports whether one came.
func runUntilStoredBeat(s *sim.Sim, p sim.ProviderID, r sim.RelayID, limit time.Duration) bool {
	from := s.Now()
	stored := func() bool {
		for _, ev := range s.Stored(r) {
			if ev.Kind == sim.KindHeartbeat && ev.Author == p && ev.SentAt >= from {
				return true
			}
		}
		return false
	}
	return s.RunWhile(from+limit, func() bool { return !stored() }) >= 0
}

// TestHiddenBeats searches the class: any number of providers (2 to 4)
// and relays (3 to 5), any quorum M, clocks within the bounds, and the
// hiddenBeat action alone (the holder keeps M-1 relays, comes back on one more
// for one beat after a drawn wait, and every other provider misses that
// beat by a drawn mechanism while the relay crashes, with or without its
// storage; the holder is then perhaps cut off every relay, so that it
// hears no claim); TestEveryFault and the others of withinBounds draw it
// among every other fault. With
// silence counted from the last beat received (before lease/watch.go) it
// finds two writers within CI's checks (seed in docs/reliability.md).
func TestHiddenBeats(t *testing.T) {
	var st stats
	fs := faultSpace{
		MinK: 2, MaxK: 4, MinN: 3, MaxN: 5,
		MaxOffset:   assumed.MaxClockOffset,
		MaxDriftPPM: assumed.MaxDriftPPM,
		MaxAdvance:  10 * time.Minute,
		Warmup:      2 * time.Minute,
		OnlyRelay:   -1,
		HiddenBeats: true,
	}
	props.CheckCI(t, 100, runSafety(leaseProtocol(), fs, &st))
	t.Logf("%v", &st)
}

// hiddenBeat is the targeted action of TestHiddenBeats (see the file's
// comment). The other providers are struck as r accepts the holder's beat
// (a drawn one of them, the target, always misses it).
func (w *world) hiddenBeat(t *rapid.T) {
	h, ok := w.liveHolder()
	if !ok {
		t.Logf("t=%v hiddenBeat: no live holder", w.s.Now())
		return
	}
	order := rapid.Permutation(relayIDs(w.sc.N)).Draw(t, "hiddenRelays")
	kept, r := order[:w.sc.M-1], order[w.sc.M-1]
	for _, x := range order[w.sc.M-1:] {
		w.s.Partition(h, x)
	}
	for _, x := range kept {
		w.s.Heal(h, x)
	}
	// Back while it is still Suspect (before stale+T1+T2), late enough
	// that a standby's silence from the cut would end before the holder's
	// new quorum does.
	cfg := lease.DefaultConfig()
	wait := drawDuration(t, "hiddenWait", cfg.Stale+30*time.Second, cfg.T1+cfg.T2+cfg.Stale-20*time.Second)
	target := sim.ProviderID((int(h) + 1 + rapid.IntRange(0, w.sc.K-2).Draw(t, "hiddenTarget")) % w.sc.K)
	t.Logf("t=%v hiddenBeat: holder P%d keeps relays %v, back on R%d after %v; P%d misses its beat there",
		w.s.Now(), h, kept, r, wait, target)
	w.s.RunFor(wait)
	w.s.Heal(h, r)
	var ends []func() // what ends each miss, once r crashed
	miss := func(p sim.ProviderID, hears int) {
		switch rapid.IntRange(0, hears).Draw(t, fmt.Sprintf("P%dMisses", p)) {
		case 0: // its link is cut
			w.s.Partition(p, r)
			ends = append(ends, func() { w.s.Heal(p, r) })
		case 1: // its agent restarts
			w.s.CrashProvider(p, false)
			ends = append(ends, func() { w.s.RestartProvider(p) })
		case 2: // a lost message ends its connection
			w.s.SetLinkFaults(p, r, sim.LinkFaults{LossPct: 100})
			ends = append(ends, func() { w.s.SetLinkFaults(p, r, sim.LinkFaults{}) })
		case 3: // it hears the beat
		}
	}
	if !runUntilStoredBeat(w.s, h, r, 2*time.Minute) {
		t.Logf("t=%v hiddenBeat: no beat of P%d on R%d", w.s.Now(), h, r)
		return
	}
	// Struck as r accepted the beat, before it reached them: a short
	// miss falls between two of their own heartbeats more often than not.
	miss(target, 2)
	for p := range sim.ProviderID(w.sc.K) {
		if p != h && p != target {
			miss(p, 3)
		}
	}
	w.s.RunFor(drawDuration(t, "hiddenEcho", 0, 10*time.Second))
	w.s.Partition(h, r)
	if rapid.Bool().Draw(t, "holderDeaf") {
		// Cut off every relay, the holder stays Live until its quorum
		// lapses and T1+T2 pass, and hears no claim meanwhile.
		for _, x := range kept {
			w.s.Partition(h, x)
		}
	}
	wipe := rapid.Bool().Draw(t, "hiddenWipe")
	w.s.CrashRelay(r, wipe)
	w.s.RunFor(drawDuration(t, "hiddenDown", 0, 10*time.Second))
	w.s.RestartRelay(r)
	w.s.RunFor(drawDuration(t, "hiddenMissEnds", 0, 30*time.Second))
	for _, end := range ends {
		end()
	}
	t.Logf("t=%v hiddenBeat: R%d crashed (wipe %v) after P%d's beat; the misses ended", w.s.Now(), r, wipe, h)
}
