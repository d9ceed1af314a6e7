package lease

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// durableSpec is warmSpec with a checkpoint policy.
func durableSpec(mode RestoreMode, primary string, standbys ...string) Spec {
	sp := warmSpec("w1", primary, standbys...)
	sp.Checkpoint = &CheckpointPolicy{Servers: []string{"https://b1.test"}, Restore: mode, RestoreTimeout: 20 * time.Second}
	return sp
}

// restoreOf returns the RestoreCheckpoint in effs (failing when none).
func restoreOf(t *testing.T, effs []Effect) RestoreCheckpoint {
	t.Helper()
	for _, e := range effs {
		if r, ok := e.(RestoreCheckpoint); ok {
			return r
		}
	}
	t.Fatalf("effects %v: want a RestoreCheckpoint", render(effs))
	return RestoreCheckpoint{}
}

// A primary whose grant has a checkpoint policy restores before it starts,
// and becomes Live only once started, even with quorum before that.
func TestGrantRestoresBeforeStart(t *testing.T) {
	h := newHarness(t, "alice", nil)
	sp := durableSpec(RestoreBestEffort, "alice", "bob")
	sp.StateURI = "blossom:seed.json"
	effs := h.track(0, sp)
	h.wantEffects("Track", effs, "entered w1 (new) -> provisioning epoch=1",
		"restore w1 epoch=1 attempt=1 mode=best-effort timeout=20s")
	r := restoreOf(t, effs)
	if r.Seed != "blossom:seed.json" || r.Hint != "" || !r.GrantAt.Equal(sp.CreatedAt) || len(r.Holders) != 1 ||
		r.Holders[0] != (EpochHolder{Epoch: 1, Holder: key("alice"), From: at(0)}) {
		t.Fatalf("RestoreCheckpoint = %+v, want seed, grant time and alice as holder of epoch 1", r)
	}
	h.beat("alice", 1*s, 10*s, 1*s, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
	h.wantState("w1", StateProvisioning) // quorum, but nothing started yet
	h.wantEffects("Restored(stale attempt)", h.m.Restored(at(11*s), RestoreResult{Workload: "w1", Epoch: 1, Attempt: 2, OK: true}))
	h.wantEffects("Restored(another epoch)", h.m.Restored(at(11*s), RestoreResult{Workload: "w1", Epoch: 2, Attempt: 1, OK: true}))
	h.wantEffects("Restored(an untracked workload)", h.m.Restored(at(11*s), RestoreResult{Workload: "w9", Epoch: 1, Attempt: 1, OK: true}))
	effs = h.m.Restored(at(11*s), RestoreResult{Workload: "w1", Epoch: 1, Attempt: 1, OK: true, From: "record e1"})
	h.wantEffects("Restored(OK)", effs, `restore-report w1 epoch=1 phase=restored reason="restored record e1"`, "start w1 epoch=1")
	h.wantEffects("Restored(again)", h.m.Restored(at(11*s), RestoreResult{Workload: "w1", Epoch: 1, Attempt: 1, OK: true}))
	h.wantEffects("Tick", h.tick(12*s), "entered w1 provisioning -> live epoch=1")
	// How it started stays with the Live workload (status shows it).
	if w, _ := h.m.Workload("w1"); w.Restore != RestoreDone || w.RestoreWhy != "restored record e1" {
		t.Fatalf("Live after its restore: restore %q (%q), want %q (restored record e1)", w.Restore, w.RestoreWhy, RestoreDone)
	}
}

// Nothing ever published starts the workload from nothing in either mode;
// a failed attempt does so under best-effort only.
func TestRestoreOutcomes(t *testing.T) {
	for _, tt := range []struct {
		mode   RestoreMode
		result RestoreResult
		want   []string
	}{
		{RestoreRequired, RestoreResult{Fresh: true, Reason: "no checkpoint was ever published"},
			[]string{`restore-report w1 epoch=1 phase=fresh reason="no checkpoint was ever published"`, "start w1 epoch=1"}},
		{RestoreBestEffort, RestoreResult{Reason: "no server reachable"},
			[]string{`restore-report w1 epoch=1 phase=fresh reason="started without a checkpoint (best-effort): no server reachable"`, "start w1 epoch=1"}},
		{RestoreRequired, RestoreResult{Reason: "no server reachable"},
			[]string{`restore-report w1 epoch=1 phase=waiting reason="restore required: attempt 1 failed, next at +15s: no server reachable"`}},
	} {
		h := newHarness(t, "alice", nil)
		h.track(0, durableSpec(tt.mode, "alice", "bob"))
		r := tt.result
		r.Workload, r.Epoch, r.Attempt = "w1", 1, 1
		h.wantEffects(string(tt.mode)+" "+r.Reason, h.m.Restored(at(5*s), r), tt.want...)
	}
}

// Under required a failed or unanswered attempt is retried after half a
// RestoreTimeout; the workload stays Provisioning (holding its epoch, in
// its heartbeats) until ProvisionTimeout, then is evicted (not failed: a
// Blossom outage must not end the workload for good) and handed over to
// the next standby, and this provider retakes it after takeover_after of
// nobody claiming it, restoring again at the next epoch.
func TestRequiredRestoreRetriesUntilProvisionTimeout(t *testing.T) {
	h := newHarness(t, "alice", nil)
	h.track(0, durableSpec(RestoreRequired, "alice", "bob"))
	h.beat("alice", 1*s, 19*s, 1*s, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
	// No answer within the 20 s timeout: a failure; next attempt 10 s on.
	effs := h.hb(20*s, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
	effs = append(effs, h.tick(20*s)...)
	h.wantEffects("Tick(timeout)", effs, `restore-report w1 epoch=1 phase=waiting reason="restore required: attempt 1 failed, next at +30s: no answer within restore_timeout 20s"`)
	h.wantEffects("Tick(waiting)", h.tick(29*s))
	effs = h.tick(30 * s)
	h.wantEffects("Tick(retry)", effs, "restore w1 epoch=1 attempt=2 mode=required timeout=20s")
	if held := h.m.Held(nil); len(held) != 1 {
		t.Fatalf("Held while restoring = %v, want w1 (it holds its epoch)", held)
	}
	cfg := h.m.Config()
	h.beat("alice", 31*s, cfg.ProvisionTimeout-s, 10*s, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
	effs = h.tick(cfg.ProvisionTimeout)
	if hasEffect[Failed](effs) || !hasEffect[StopWorkload](effs) || !hasEffect[PublishRevocation](effs) || h.state("w1") != StateEvicted {
		t.Fatalf("Tick(provision timeout) = %v, want evicted (not failed), stopped and revoked", render(effs))
	}
	for _, e := range effs {
		if r, ok := e.(PublishRevocation); ok && !strings.Contains(r.Reason, "restore required: no checkpoint restored within provision_timeout") {
			t.Fatalf("revocation reason = %q, want it to say the restore did not succeed", r.Reason)
		}
	}
	if ws, _ := h.m.Workload("w1"); !strings.Contains(ws.RestoreWhy, "handed on") {
		t.Fatalf("RestoreWhy = %q, want it to say the workload was handed on", ws.RestoreWhy)
	}
	// Nobody claims: alice takes it back at epoch 2 and restores again.
	took := h.aliceRetakes(cfg.ProvisionTimeout, "after the restore timed out")
	h.m.ClaimPublished(at(took+s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 3})
	effs = h.m.ClaimsRead(at(took+s+cfg.RelayDelay), ClaimRead{Workload: "w1", Epoch: 2, Relays: 3})
	if !hasEffect[RestoreCheckpoint](effs) || hasEffect[StartWorkload](effs) {
		t.Fatalf("ClaimsRead(retake won) = %v, want a new restore, no start yet", render(effs))
	}
}

// A best-effort restore still running at provision_timeout (its
// restore_timeout is longer) ends as its own timeout would: the workload
// starts without a checkpoint, and is not handed on. It was handed on
// unrun, and so by each next holder: with two of three relays answering
// record queries late, the real binary's epochs climbed every
// provision_timeout and nobody ran the counter.
func TestBestEffortRestoreEndsAtProvisionTimeout(t *testing.T) {
	h := newHarness(t, "alice", nil)
	cfg := h.m.Config()
	sp := durableSpec(RestoreBestEffort, "alice", "bob")
	sp.Checkpoint.RestoreTimeout = cfg.ProvisionTimeout + 10*time.Minute
	h.track(0, sp)
	h.beat("alice", 1*s, cfg.ProvisionTimeout-s, 10*s, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
	h.wantEffects("Tick(provision timeout)", h.tick(cfg.ProvisionTimeout),
		`restore-report w1 epoch=1 phase=fresh reason="started without a checkpoint (best-effort): no checkpoint restored within provision_timeout 5m0s: "`,
		"start w1 epoch=1", "entered w1 provisioning -> live epoch=1")
	if hasEffect[PublishRevocation](h.tick(cfg.ProvisionTimeout+s)) || h.state("w1") != StateLive {
		t.Fatalf("after the provision timeout: state %s, want live and no revocation", h.state("w1"))
	}
	// The attempt's answer arriving late (a slow relay, a delivery held
	// up) changes nothing: the run started without it.
	h.wantEffects("Restored(late)", h.m.Restored(at(cfg.ProvisionTimeout+2*s), RestoreResult{Workload: "w1", Epoch: 1, Attempt: 1, OK: true, From: "a late record"}))
	if ws, _ := h.m.Workload("w1"); ws.State != StateLive || ws.Restore != RestoreFresh {
		t.Fatalf("after the late answer: %s, restore %s; want live, fresh", ws.State, ws.Restore)
	}
}

// A standby's won claim restores from the revocation's state_uri and the
// epochs it knows the holders of, then announces; the start waits.
func TestWonClaimRestores(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, durableSpec(RestoreBestEffort, "alice", "bob", "carol"))
	h.m.ObserveRevocation(at(100*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"),
		QuorumAt: at(100 * s), StateURI: "blossom:final.json"})
	effs := claimStep(h, 101*s, 2)
	h.wantEffects("claim step", effs, "read-claims w1 epoch=2 at=+1m51s", "entered w1 promoting -> provisioning epoch=2",
		"restore w1 epoch=2 attempt=1 mode=best-effort timeout=20s", "announce w1 epoch=2")
	r := restoreOf(t, effs)
	want := []EpochHolder{{1, key("alice"), at(0)}, {2, key("bob"), at(100 * s)}}
	if r.Hint != "blossom:final.json" || len(r.Holders) != 2 || r.Holders[0] != want[0] || r.Holders[1] != want[1] {
		t.Fatalf("RestoreCheckpoint = %+v, want hint blossom:final.json and holders %v", r, want)
	}
	h.wantEffects("Restored", h.m.Restored(at(115*s), RestoreResult{Workload: "w1", Epoch: 2, Attempt: 1, OK: true, From: "x"}),
		`restore-report w1 epoch=2 phase=restored reason="restored x"`, "start w1 epoch=2")
}

// A fence while restoring stops at once; the restore's late report is
// refused, and nothing starts.
func TestFenceWhileRestoring(t *testing.T) {
	h := newHarness(t, "alice", nil)
	h.track(0, durableSpec(RestoreRequired, "alice", "bob"))
	effs := h.m.ObserveClaim(at(5*s), PromotionClaim{Workload: "w1", Claimer: key("bob"), Epoch: 2, Active: true})
	h.wantEffects("ObserveClaim(epoch 2)", effs, "entered w1 provisioning -> fenced epoch=1", `stop w1 epoch=1 reason="epoch 2 claimed by bob"`)
	h.wantEffects("Restored(late)", h.m.Restored(at(6*s), RestoreResult{Workload: "w1", Epoch: 1, Attempt: 1, OK: true}))
	w, _ := h.m.Workload("w1")
	if w.Restore != RestoreNone {
		t.Fatalf("restore phase after the fence = %q, want none", w.Restore)
	}
}

// Across a restart a restore in progress is asked again once M relays
// synced (not before), and after a held commit through Outstanding.
func TestRestoreAcrossRestart(t *testing.T) {
	h := newHarness(t, "alice", nil)
	h.track(0, durableSpec(RestoreRequired, "alice", "bob"))
	effs := restoreJSON(t, h, 5*s)
	if hasEffect[RestoreCheckpoint](effs) || hasEffect[StartWorkload](effs) || len(h.m.Outstanding()) != 0 {
		t.Fatalf("Restore() = %v, Outstanding = %v: want no restore before relay sync", render(effs), render(h.m.Outstanding()))
	}
	h.m.RelaySynced(at(6*s), "wss://r1.test")
	effs = h.m.RelaySynced(at(6*s), "wss://r2.test")
	h.wantEffects("RelaySynced(M)", effs, "restore w1 epoch=1 attempt=2 mode=required timeout=20s")
	h.wantEffects("Outstanding", h.m.Outstanding(), "restore w1 epoch=1 attempt=2 mode=required timeout=20s")
	h.wantEffects("AfterHeld(held restore)", h.m.AfterHeld(effs), "restore w1 epoch=1 attempt=2 mode=required timeout=20s")
	h.wantEffects("Restored(attempt 1)", h.m.Restored(at(7*s), RestoreResult{Workload: "w1", Epoch: 1, Attempt: 1, OK: true}))
	h.wantEffects("Restored(attempt 2)", h.m.Restored(at(7*s), RestoreResult{Workload: "w1", Epoch: 1, Attempt: 2, OK: true, From: "r"}),
		`restore-report w1 epoch=1 phase=restored reason="restored r"`, "start w1 epoch=1")
	// Restored, then restarted before quorum: started again, not restored.
	effs = restoreJSON(t, h, 8*s)
	h.m.RelaySynced(at(9*s), "wss://r1.test")
	h.wantEffects("RelaySynced after the restore", h.m.RelaySynced(at(9*s), "wss://r2.test"), "start w1 epoch=1")
}

// A planned handover: only from Live or Suspect at the epoch, to a member
// standing by; stop, then a revocation carrying the final checkpoint.
func TestHandOver(t *testing.T) {
	h := liveAlice(t, warmSpec("w1", "alice", "bob", "carol"), 100*s, nil)
	h.hb(100*s, "carol", all3, []WorkloadEpoch{})
	for _, bad := range []Handover{
		{Workload: "nope", Epoch: 1},
		{Workload: "w1", Epoch: 2},
		{Workload: "w1", Epoch: 1, Successor: key("dave")},
		{Workload: "w1", Epoch: 1, Successor: key("alice")},
	} {
		if _, err := h.m.HandOver(at(101*s), bad); !errors.Is(err, ErrCannotHandOver) {
			t.Errorf("HandOver(%+v) = %v, want ErrCannotHandOver", bad, err)
		}
	}
	effs, err := h.m.HandOver(at(101*s), Handover{Workload: "w1", Epoch: 1, StateURI: "blossom:final.json"})
	if err != nil {
		t.Fatal(err)
	}
	h.wantEffects("HandOver", effs, "entered w1 live -> evicted epoch=1", `stop w1 epoch=1 reason="planned handover"`,
		`revoke w1 epoch=1 successor=carol standbys=[bob,carol] quorum_at=+1m0s reason="planned handover"`)
	if r := effs[2].(PublishRevocation); r.StateURI != "blossom:final.json" {
		t.Fatalf("revocation StateURI = %q, want the final checkpoint", r.StateURI)
	}
	if _, err := h.m.HandOver(at(102*s), Handover{Workload: "w1", Epoch: 1}); !errors.Is(err, ErrCannotHandOver) {
		t.Fatalf("second HandOver = %v, want ErrCannotHandOver (evicted)", err)
	}
}

// While draining a node starts no claim step: no takeover, no claim on a
// revocation naming it, no retake; it keeps running what it holds.
func TestDrainingStartsNoClaim(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob"))
	h.m.SetDraining(at(0), true)
	effs := h.m.ObserveRevocation(at(100*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(100 * s)})
	h.wantEffects("ObserveRevocation(draining)", effs)
	cfg := h.m.Config()
	effs = h.beat("bob", 1*s, cfg.TakeoverAfter+200*s, 30*s, []WorkloadEpoch{})
	if hasEffect[PublishClaim](effs) {
		t.Fatalf("draining standby claimed: %v", render(effs))
	}
	snap := roundTrip(t, h.m.Snapshot())
	if !snap.Draining {
		t.Fatalf("Snapshot().Draining = false while draining")
	}
	h.m.SetDraining(at(cfg.TakeoverAfter+201*s), false)
	effs = h.beat("bob", cfg.TakeoverAfter+210*s, cfg.TakeoverAfter+240*s, 30*s, []WorkloadEpoch{})
	if !hasEffect[PublishClaim](effs) {
		t.Fatalf("after the drain ended: %v, want the takeover's claim", render(effs))
	}
}

func TestSelectCheckpoints(t *testing.T) {
	granted := at(0)
	req := RestoreCheckpoint{ID: "w1", Epoch: 3, GrantAt: granted, Holders: []EpochHolder{
		{1, key("alice"), at(0)}, {2, key("bob"), at(1000 * s)}, {3, key("carol"), at(2000 * s)},
	}}
	c := func(id, signer string, epoch, seq uint64, created time.Duration) CheckpointCandidate {
		return CheckpointCandidate{EventID: id, Signer: key(signer), Workload: "w1", Epoch: epoch, Seq: seq, CreatedAt: at(created), GrantAt: granted}
	}
	other := c("other", "bob", 2, 9, 1500*s)
	other.Workload = "w2"
	regrant := c("regrant", "bob", 2, 9, 1500*s)
	regrant.GrantAt = at(-time.Hour)
	cands := []CheckpointCandidate{
		c("a1", "alice", 1, 5, 900*s),
		c("a-late", "alice", 1, 6, 1000*s+2*time.Minute), // after epoch 2 began (max_skew 30 s)
		c("a-skew", "alice", 1, 7, 1000*s+20*s),          // within max_skew of it
		c("b1", "bob", 2, 1, 1100*s),
		c("b2", "bob", 2, 2, 1200*s),
		c("b-forged", "alice", 2, 3, 1300*s), // alice never held epoch 2
		c("b-late", "bob", 2, 4, 2100*s),     // after epoch 3 began
		c("z0", "zed", 0, 1, 10*s),           // who held epoch 0 is unknown
		c("c-own", "carol", 3, 0, 2001*s),    // the restorer's own base record
		c("c-other", "bob", 3, 1, 2002*s),    // epoch 3 by someone else
		c("d", "dave", 4, 1, 3000*s),
		other, regrant,
	}
	usable, refused := SelectCheckpoints(req, key("carol"), 30*s, cands)
	var got []string
	for _, u := range usable {
		got = append(got, u.EventID)
	}
	if want := "c-own b2 b1 a-skew a1"; strings.Join(got, " ") != want {
		t.Errorf("usable = %v, want %s", got, want)
	}
	wantRefused := map[string]string{
		"a-late": RefuseAfterSuccessorStart, "b-forged": RefuseWrongSigner, "b-late": RefuseAfterSuccessorStart,
		"z0": RefuseUnknownHolder, "c-other": RefuseLaterEpoch, "d": RefuseLaterEpoch,
		"other": RefuseOtherWorkload, "regrant": RefuseOtherGrant,
	}
	// The details a log line shows: the epoch whose start a late record
	// missed, and signers as the first 8 characters of their keys.
	wantDetail := map[string]string{
		"a-late":   "after epoch 2 began at",
		"b-late":   "after epoch 3 began at",
		"b-forged": "signed by " + key("alice")[:8] + ", epoch 2 was held by " + key("bob")[:8],
	}
	for _, r := range refused {
		if wantRefused[r.EventID] != r.Reason {
			t.Errorf("refused %s as %s (%s), want %q", r.EventID, r.Reason, r.Detail, wantRefused[r.EventID])
		}
		if d := wantDetail[r.EventID]; !strings.Contains(r.Detail, d) || strings.Contains(r.Detail, key("alice")) {
			t.Errorf("refused %s: detail %q, want it to say %q (keys shortened)", r.EventID, r.Detail, d)
		}
		delete(wantRefused, r.EventID)
	}
	for id, reason := range wantRefused {
		t.Errorf("%s not refused, want %s", id, reason)
	}
}

func TestCheckpointPolicyValidate(t *testing.T) {
	for _, tt := range []struct {
		p    CheckpointPolicy
		want string
	}{
		{CheckpointPolicy{}, ""},
		{CheckpointPolicy{Servers: []string{"https://a.test", "http://b.test:3000"}, MinServers: 2, Restore: RestoreRequired, RestoreTimeout: time.Minute}, ""},
		{CheckpointPolicy{Servers: []string{"ftp://a.test"}}, `checkpoint: servers[0] "ftp://a.test", want an http(s) base URL`},
		{CheckpointPolicy{Servers: []string{"https://a.test", "https://a.test"}}, `checkpoint: servers[1] "https://a.test" listed twice`},
		{CheckpointPolicy{Servers: []string{"https://a.test"}, MinServers: 2}, "checkpoint.min_servers = 2"},
		{CheckpointPolicy{MinServers: -1}, "checkpoint.min_servers = -1"},
		{CheckpointPolicy{Restore: "maybe"}, `checkpoint.restore = "maybe"`},
		{CheckpointPolicy{RestoreTimeout: time.Millisecond}, "checkpoint.restore_timeout = 1ms"},
		{CheckpointPolicy{Servers: make([]string, 17)}, "checkpoint: 17 servers, want 0 to 16"},
		// No servers of its own: the holder's configured ones, whose number
		// the grant cannot know, so any min_servers is taken.
		{CheckpointPolicy{MinServers: 2}, ""},
		{CheckpointPolicy{RestoreTimeout: time.Second}, ""},
		{CheckpointPolicy{RestoreTimeout: time.Hour}, ""},
		{CheckpointPolicy{RestoreTimeout: time.Hour + 1}, "checkpoint.restore_timeout = 1h0m0.000000001s"},
	} {
		err := tt.p.Validate()
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.p, err, tt.want)
		}
	}
	sp := durableSpec(RestoreRequired, "alice", "bob")
	sp.Checkpoint.Restore = "sometimes"
	if err := sp.Validate(); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("Spec.Validate(bad checkpoint) = %v, want ErrInvalidSpec", err)
	}
}

// TestSelectCheckpointsRequiredDoesNotGoBack: a provider that missed epoch
// 2 (it knows only epoch 1's holder) refuses bob's records of epoch 2 as
// unknown_holder; a best-effort restore then takes alice's record of epoch
// 1, but a required one refuses it too (behind_unknown_epoch) rather than
// lose what epoch 2 did, and takes only records not behind it.
func TestSelectCheckpointsRequiredDoesNotGoBack(t *testing.T) {
	granted := at(0)
	req := RestoreCheckpoint{ID: "w1", Epoch: 4, GrantAt: granted, Holders: []EpochHolder{{1, key("alice"), at(0)}, {4, key("carol"), at(3000 * s)}}}
	c := func(id, signer string, epoch, seq uint64) CheckpointCandidate {
		return CheckpointCandidate{EventID: id, Signer: key(signer), Workload: "w1", Epoch: epoch, Seq: seq, CreatedAt: at(time.Duration(epoch) * 1000 * s), GrantAt: granted}
	}
	cands := []CheckpointCandidate{c("a1", "alice", 1, 5), c("b2", "bob", 2, 9), c("c4", "carol", 4, 0), c("a0", "alice", 1, 4)}
	ids := func(us []CheckpointCandidate) string {
		var got []string
		for _, u := range us {
			got = append(got, u.EventID)
		}
		return strings.Join(got, " ")
	}
	reasons := func(rs []CheckpointRefusal) map[string]string {
		m := map[string]string{}
		for _, r := range rs {
			m[r.EventID] = r.Reason
		}
		return m
	}
	req.Mode = RestoreBestEffort
	usable, refused := SelectCheckpoints(req, key("carol"), 30*s, cands)
	if got := ids(usable); got != "c4 a1 a0" {
		t.Errorf("best-effort: usable = %s, want c4 a1 a0", got)
	}
	if got := reasons(refused); len(got) != 1 || got["b2"] != RefuseUnknownHolder {
		t.Errorf("best-effort: refused %v, want b2 unknown_holder", got)
	}
	req.Mode = RestoreRequired
	usable, refused = SelectCheckpoints(req, key("carol"), 30*s, cands)
	if got := ids(usable); got != "c4" {
		t.Errorf("required: usable = %s, want c4 (the restorer's own base record, not behind epoch 2)", got)
	}
	if got := reasons(refused); len(got) != 3 || got["b2"] != RefuseUnknownHolder || got["a1"] != RefuseBehindUnknownEpoch || got["a0"] != RefuseBehindUnknownEpoch {
		t.Errorf("required: refused %v, want b2 unknown_holder, a1 and a0 behind_unknown_epoch (every record behind it is reported)", got)
	}
	usable, _ = SelectCheckpoints(req, key("carol"), 30*s, cands[:2])
	if len(usable) != 0 {
		t.Errorf("required without a base record: usable = %s, want none", ids(usable))
	}
}

// TestValidateCheckpointServersEdges: the limits of a server list are
// inclusive (16 servers, a URL of 256 bytes), and "required" asks for at
// least one server, not for none.
func TestValidateCheckpointServersEdges(t *testing.T) {
	servers := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("https://s%d.test", i))
		}
		return out
	}
	long := func(n int) string { // an https URL of exactly n bytes
		u := "https://a.test/"
		return u + strings.Repeat("p", n-len(u))
	}
	for _, tt := range []struct {
		name     string
		servers  []string
		required bool
		want     string
	}{
		{"16 servers", servers(MaxCheckpointServers), false, ""},
		{"17 servers", servers(MaxCheckpointServers + 1), false, "17 servers, want 0 to 16"},
		{"none, not required", nil, false, ""},
		{"none, required", nil, true, "0 servers, want 1 to 16"},
		{"one, required", servers(1), true, ""},
		{"16, required", servers(MaxCheckpointServers), true, ""},
		{"a URL of 256 bytes", []string{long(MaxServerURLBytes)}, true, ""},
		{"a URL of 257 bytes", []string{long(MaxServerURLBytes + 1)}, true, "is 257 bytes, max 256"},
	} {
		err := ValidateCheckpointServers(tt.servers, tt.required)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: ValidateCheckpointServers = %v, want %q", tt.name, err, tt.want)
		}
	}
}

// TestNoteHolder: the holders a provider records per epoch (checkpoint
// records are checked against them) follow a reused epoch to its new
// holder, keep when an epoch began for the holder already known, and keep
// the newest maxHolders epochs.
func TestNoteHolder(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob", "carol"))
	w := h.m.byID["w1"]
	h.m.noteHolder(w, 1, key("alice"), at(5*s))
	if want := []EpochHolder{{1, key("alice"), at(0)}}; !slices.Equal(w.Holders, want) {
		t.Fatalf("alice heard again at epoch 1: holders %v, want %v (from the grant)", w.Holders, want)
	}
	h.m.noteHolder(w, 1, key("carol"), at(9*s))
	if want := []EpochHolder{{1, key("carol"), at(9 * s)}}; !slices.Equal(w.Holders, want) {
		t.Fatalf("carol heard holding epoch 1: holders %v, want %v", w.Holders, want)
	}
	for e := uint64(2); e <= maxHolders+1; e++ {
		h.m.noteHolder(w, e, key("alice"), at(time.Duration(e)*100*s))
	}
	if len(w.Holders) != maxHolders || w.Holders[0].Epoch != 2 || w.Holders[maxHolders-1].Epoch != maxHolders+1 {
		t.Fatalf("after epochs 1 to %d: %d holders, epochs %d to %d; want %d, epochs 2 to %d", maxHolders+1,
			len(w.Holders), w.Holders[0].Epoch, w.Holders[len(w.Holders)-1].Epoch, maxHolders, maxHolders+1)
	}
}
