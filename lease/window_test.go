package lease

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// claimsPublished are the workloads of the PublishClaim effects in effs.
func claimsPublished(effs []Effect) []string {
	var out []string
	for _, e := range effs {
		if c, ok := e.(PublishClaim); ok {
			out = append(out, c.ID)
		}
	}
	return out
}

// checkPublishing fails unless the machine's count of claims awaiting their
// publish's answer is the number of workloads in that phase.
func (h *harness) checkPublishing() {
	h.t.Helper()
	n := 0
	for _, w := range h.m.list {
		if w.Phase == PhasePublishing {
			n++
		}
	}
	if n != h.m.publishing {
		h.t.Fatalf("publishing = %d, %d workloads in phase %s", h.m.publishing, n, PhasePublishing)
	}
}

// At most ClaimWindow claims wait for their publish's answer at once: a
// standby whose holder of five workloads went silent claims two, then one
// more for each answer or timeout, until all five are claimed; the
// others stay standbys meanwhile (their takeover rule is checked again).
func TestClaimWindowBoundsClaimsAwaitingAnswers(t *testing.T) {
	h := newHarness(t, "bob", func(c *Config) { c.ClaimWindow = 2 })
	list := h.trackHeldByAlice(5)
	h.hb(0, "alice", all3, list)
	var first []string
	var d time.Duration
	for d = 0; d <= 3600*s && first == nil; d += s {
		if d%(60*s) == 0 {
			h.hb(d, "bob", all3, []WorkloadEpoch{})
		}
		first = claimsPublished(h.tick(d))
		h.checkPublishing()
	}
	if len(first) != 2 {
		t.Fatalf("first claims at %v: %v, want two (the window)", d, first)
	}
	promoting := 0
	for _, e := range list {
		if h.state(e.ID) == StatePromoting {
			promoting++
		}
	}
	if promoting != 2 {
		t.Fatalf("%d workloads promoting with a window of 2, want 2 (the others stand by)", promoting)
	}
	if got := claimsPublished(h.tick(d + s)); len(got) != 0 {
		t.Fatalf("claims with the window full: %v, want none", got)
	}
	// One answer frees one slot: the next tick claims one more.
	h.m.ClaimPublished(at(d+s), ClaimAck{Workload: first[0], Epoch: 2, Accepted: 3})
	h.checkPublishing()
	if got := claimsPublished(h.tick(d + 2*s)); len(got) != 1 {
		t.Fatalf("claims after one answer: %v, want one", got)
	}
	h.checkPublishing()
	// No more answers: the claims time out, are withdrawn, and the rest
	// are claimed as slots free; every workload claims at last.
	claimed := map[string]bool{}
	for _, id := range first {
		claimed[id] = true
	}
	for e := d + 3*s; e <= d+10*time.Minute; e += s {
		if e%(60*s) == 0 {
			h.hb(e, "bob", all3, []WorkloadEpoch{})
		}
		for _, id := range claimsPublished(h.tick(e)) {
			claimed[id] = true
		}
		h.checkPublishing()
		if h.m.publishing > 2 {
			t.Fatalf("%d claims awaiting answers at %v, want at most 2", h.m.publishing, e)
		}
	}
	if len(claimed) != 5 {
		t.Fatalf("claimed %d of 5 workloads in 10 minutes: %v", len(claimed), claimed)
	}
}

// A revocation that names this standby while the window is full starts
// the claim step waiting in its backoff phase, with no attempt counted,
// and publishes once a slot frees, before the revocation's deadline.
func TestRevocationWaitsForAClaimSlot(t *testing.T) {
	h := newHarness(t, "bob", func(c *Config) { c.ClaimWindow = 1 })
	h.track(0, warmSpec("w0", "alice", "bob"))
	h.track(0, warmSpec("w1", "carol", "bob"))
	h.hb(0, "alice", all3, []WorkloadEpoch{{ID: "w0", Epoch: 1}})
	h.hb(0, "carol", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
	h.hb(0, "bob", all3, []WorkloadEpoch{})
	rev := func(id, by string) []Effect {
		return h.m.ObserveRevocation(at(s), Revocation{Workload: id, Epoch: 1, Signer: key(by), Successor: key("bob"), QuorumAt: at(s)})
	}
	if got := claimsPublished(rev("w0", "alice")); len(got) != 1 {
		t.Fatalf("claims on the first revocation: %v, want one", got)
	}
	if got := claimsPublished(rev("w1", "carol")); len(got) != 0 {
		t.Fatalf("claims on the second revocation with the window full: %v, want none", got)
	}
	h.wantState("w1", StatePromoting)
	w1 := h.m.byID["w1"]
	if w1.Phase != PhaseBackoff || w1.ClaimAttempt != 0 {
		t.Fatalf("w1 in phase %s after %d attempts, want %s after none", w1.Phase, w1.ClaimAttempt, PhaseBackoff)
	}
	h.checkPublishing()
	h.m.ClaimPublished(at(2*s), ClaimAck{Workload: "w0", Epoch: 2, Accepted: 3})
	if got := claimsPublished(h.tick(2 * s)); len(got) != 1 || got[0] != "w1" {
		t.Fatalf("claims once w0's publish answered: %v, want w1's", got)
	}
	if w1.ClaimAttempt != 1 {
		t.Fatalf("w1's attempts = %d, want 1", w1.ClaimAttempt)
	}
	h.checkPublishing()
}

// The count of claims awaiting answers survives a snapshot and Remove.
func TestClaimWindowCountRestored(t *testing.T) {
	h := newHarness(t, "bob", func(c *Config) { c.ClaimWindow = 1 })
	h.track(0, warmSpec("w0", "alice", "bob"))
	h.hb(0, "bob", all3, []WorkloadEpoch{})
	if got := claimsPublished(h.m.ObserveRevocation(at(s), Revocation{Workload: "w0", Epoch: 1, Signer: key("alice"), Successor: key("bob"), QuorumAt: at(s)})); len(got) != 1 {
		t.Fatalf("claims on the revocation: %v, want one", got)
	}
	m, _, err := Restore(at(2*s), h.m.cfg, h.m.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if m.publishing != 1 {
		t.Fatalf("restored publishing = %d, want 1", m.publishing)
	}
	m.Remove("w0")
	if m.publishing != 0 {
		t.Fatalf("publishing after Remove = %d, want 0", m.publishing)
	}
}

// The schedule that would wedge the window: every claim's answer is lost
// (the agent dropped it unsent, or the relays never replied), and the
// node reboots with the window full (the count must come back from the
// persisted phases, neither zero nor stuck). A revocation that arrives
// while the window is full waits; the lost claims' slots come back by the
// claim step's timeout, the revocation then claims before its deadline
// and never after it (its answer is lost too: back to standby), the
// restored machine never has more than the window waiting, and the other
// takeovers come once the standby has watched the silence since its
// reboot (takeover_after).
func TestClaimWindowLostAnswersAndReboot(t *testing.T) {
	h := newHarness(t, "bob", func(c *Config) { c.ClaimWindow = 2 })
	list := h.trackHeldByAlice(4)
	h.track(0, warmSpec("r", "carol", "bob"))
	h.hb(0, "alice", all3, list)
	h.hb(0, "carol", all3, []WorkloadEpoch{{ID: "r", Epoch: 1}})
	// Carol keeps r alive; alice goes silent and bob takes over two of
	// her four, whose answers never come.
	var d time.Duration
	var first []string
	for d = s; d <= 3600*s && first == nil; d += s {
		if d%(60*s) == 0 {
			h.hb(d, "bob", all3, []WorkloadEpoch{})
			h.hb(d, "carol", all3, []WorkloadEpoch{{ID: "r", Epoch: 1}})
		}
		first = claimsPublished(h.tick(d))
	}
	if len(first) != 2 {
		t.Fatalf("first claims: %v, want two", first)
	}
	// Carol revokes r naming bob while the window is full: the claim
	// step waits in its backoff.
	rev := Revocation{Workload: "r", Epoch: 1, Signer: key("carol"), Successor: key("bob"), QuorumAt: at(d)}
	if got := claimsPublished(h.m.ObserveRevocation(at(d), rev)); len(got) != 0 {
		t.Fatalf("claims on the revocation with the window full: %v, want none", got)
	}
	h.checkPublishing()
	// Reboot: the restored machine has the same two claims awaiting
	// answers that will never come (its process is new), and the same
	// full window.
	m, _, err := Restore(at(d), h.m.cfg, h.m.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	h.syncAll(d)
	h.checkPublishing()
	if h.m.publishing != 2 {
		t.Fatalf("restored claims awaiting answers = %d, want 2", h.m.publishing)
	}
	if got := claimsPublished(h.tick(d + s)); len(got) != 0 {
		t.Fatalf("claims right after the reboot: %v, want none (the window is still full)", got)
	}
	// No answer ever comes. The revocation's deadline passes while it
	// waits: it must not claim after it. The lost claims time out and
	// free their slots, and the other takeovers go on.
	by := h.m.RevocationDeadline(rev)
	claimed := map[string]time.Duration{}
	for e := d + 2*s; e <= d+30*time.Minute; e += s {
		if e%(60*s) == 0 {
			h.hb(e, "bob", all3, []WorkloadEpoch{})
			h.hb(e, "carol", all3, []WorkloadEpoch{{ID: "r", Epoch: 1}}) // r's holder stays alive
		}
		for _, id := range claimsPublished(h.tick(e)) {
			if id == "r" && !at(e).Before(by) {
				t.Fatalf("r claimed at %v, after its revocation's deadline %v", at(e), by)
			}
			if _, ok := claimed[id]; !ok {
				claimed[id] = e
			}
		}
		h.checkPublishing()
		if h.m.publishing > 2 {
			t.Fatalf("%d claims awaiting answers at %v, want at most 2", h.m.publishing, e)
		}
	}
	t.Logf("claimed: %v; r's revocation deadline %v", claimed, by.Sub(t0))
	if claimed["r"] == 0 || !at(claimed["r"]).Before(by) {
		t.Fatalf("r claimed at %v, want once a lost claim's slot freed, before its revocation's deadline %v", claimed["r"], by.Sub(t0))
	}
	if h.state("r") != StateStandby {
		t.Fatalf("r in state %v once its claim's answer was lost and its revocation's deadline passed, want standby", h.state("r"))
	}
	if h.state("r") != StateStandby {
		t.Fatalf("r in state %v once its claim's answer was lost and its revocation's deadline passed, want standby", h.state("r"))
	}
	for _, e := range list {
		if _, ok := claimed[e.ID]; !ok && !slices.Contains(first, e.ID) {
			t.Fatalf("%s never claimed after the lost answers and the reboot (claimed %v)", e.ID, claimed)
		}
	}
}

// trackHeldByAlice tracks n warm-standby workloads w0, w1, ... that alice
// holds at epoch 1 with bob standing by, and returns what her heartbeats
// list.
func (h *harness) trackHeldByAlice(n int) []WorkloadEpoch {
	var list []WorkloadEpoch
	for i := range n {
		id := fmt.Sprintf("w%d", i)
		h.track(0, warmSpec(id, "alice", "bob"))
		list = append(list, WorkloadEpoch{ID: id, Epoch: 1})
	}
	return list
}
