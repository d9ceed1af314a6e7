package lease

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Tests of checkpoint evidence: the newest checkpoint the holder's
// heartbeats named, which a required restore never goes behind.

func mark(seq uint64) CheckpointMark {
	return CheckpointMark{Seq: seq, Manifest: strings.Repeat("0", 63) + string(rune('0'+seq%10))}
}

// TestHeartbeatsCarryCheckpointEvidence: a standby keeps the newest mark
// its holder's heartbeats named at the followed epoch (not an older one a
// relay re-served, not one of a provider the lease does not name, not for
// a lease without a checkpoint policy); it survives a restart and goes in
// the restore request of the epoch the standby begins.
func TestHeartbeatsCarryCheckpointEvidence(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, durableSpec(RestoreRequired, "alice", "bob", "carol"))
	h.track(0, warmSpec("plain", "alice", "bob"))
	beat := func(d time.Duration, from string, seq uint64) {
		h.hb(d, from, all3, []WorkloadEpoch{{ID: "w1", Epoch: 1, Checkpoint: mark(seq)}, {ID: "plain", Epoch: 1, Checkpoint: mark(seq)}})
	}
	beat(10*s, "alice", 3)
	beat(20*s, "alice", 5)
	beat(30*s, "alice", 4) // older than one already named
	beat(40*s, "dave", 9)  // not named by the lease
	want := CheckpointEvidence{Epoch: 1, Seq: 5, Manifest: mark(5).Manifest}
	if ws, _ := h.m.Workload("w1"); ws.Evidence != want {
		t.Fatalf("evidence = %+v, want %+v", ws.Evidence, want)
	}
	if ws, _ := h.m.Workload("plain"); !ws.Evidence.IsZero() {
		t.Fatalf("evidence of a lease without a checkpoint policy = %+v, want none", ws.Evidence)
	}
	restoreJSON(t, h, 41*s)
	h.syncAll(41 * s)
	if ws, _ := h.m.Workload("w1"); ws.Evidence != want {
		t.Fatalf("evidence after a restart = %+v, want %+v", ws.Evidence, want)
	}
	h.m.ObserveRevocation(at(50*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(40 * s)})
	effs := claimStep(h, 51*s, 2)
	if r := restoreOf(t, effs); r.Evidence != want {
		t.Fatalf("restore request evidence = %+v, want %+v", r.Evidence, want)
	}
}

// TestSelectCheckpointsNeverBehindEvidence: a required restore refuses
// records older than the evidence (behind_evidence) and one at it or newer
// is fine; a best-effort one keeps them; Ahead tells the driver to fetch
// the evidence's manifest when no usable record reaches it.
func TestSelectCheckpointsNeverBehindEvidence(t *testing.T) {
	granted := at(0)
	req := RestoreCheckpoint{ID: "w1", Epoch: 3, GrantAt: granted, Holders: []EpochHolder{{1, key("alice"), at(0)}, {2, key("bob"), at(1000 * s)}},
		Evidence: CheckpointEvidence{Epoch: 2, Seq: 7, Manifest: mark(7).Manifest}}
	c := func(id, signer string, epoch, seq uint64) CheckpointCandidate {
		return CheckpointCandidate{EventID: id, Signer: key(signer), Workload: "w1", Epoch: epoch, Seq: seq, CreatedAt: at(time.Duration(epoch)*1000*s + time.Duration(seq)*s), GrantAt: granted}
	}
	old := []CheckpointCandidate{c("a9", "alice", 1, 9), c("b6", "bob", 2, 6)}
	req.Mode = RestoreRequired
	usable, refused := SelectCheckpoints(req, key("carol"), 30*s, old)
	if len(usable) != 0 || len(refused) != 2 || refused[0].Reason != RefuseBehindEvidence || refused[1].Reason != RefuseBehindEvidence {
		t.Fatalf("required: usable %v refused %v, want both behind_evidence", usable, refused)
	}
	if !req.Evidence.Ahead(usable, refused) {
		t.Fatalf("Ahead(none usable) = false, want true")
	}
	usable, _ = SelectCheckpoints(req, key("carol"), 30*s, append(old, c("b7", "bob", 2, 7)))
	if len(usable) != 1 || usable[0].EventID != "b7" || req.Evidence.Ahead(usable, refused) {
		t.Fatalf("required with the named record: usable %v (ahead %v), want b7 and not ahead", usable, req.Evidence.Ahead(usable, refused))
	}
	req.Mode = RestoreBestEffort
	usable, refused = SelectCheckpoints(req, key("carol"), 30*s, old)
	if len(usable) != 2 || len(refused) != 0 || !req.Evidence.Ahead(usable, refused) {
		t.Fatalf("best-effort: usable %v refused %v ahead %v, want both usable and the evidence ahead", usable, refused, req.Evidence.Ahead(usable, refused))
	}
}

// TestEvidenceSnapshotRoundTrip: evidence is persisted with the workload.
func TestEvidenceSnapshotRoundTrip(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, durableSpec(RestoreRequired, "alice", "bob"))
	h.hb(10*s, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1, Checkpoint: mark(2)}})
	b, err := json.Marshal(h.m.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"evidence":{"epoch":1,"seq":2,"sha256":"`+mark(2).Manifest+`"}`) {
		t.Fatalf("snapshot %s lacks the evidence", b)
	}
}

// TestEvidenceBehindAnUnknownEpochIsRefused: evidence older than a record
// of an epoch whose holder is not known here is refused with the records
// behind it, for a required restore: it must not bring back the state
// those refused records would have (props'
// TestSuccessorThatMissedAnEpochDoesNotGoBack restored the evidence of
// epoch 1 beside a refused record of epoch 2, until this).
func TestEvidenceBehindAnUnknownEpochIsRefused(t *testing.T) {
	granted := at(0)
	req := RestoreCheckpoint{ID: "w1", Epoch: 4, GrantAt: granted, Mode: RestoreRequired,
		Holders:  []EpochHolder{{1, key("alice"), at(0)}, {3, key("carol"), at(3000 * s)}},
		Evidence: CheckpointEvidence{Epoch: 1, Seq: 6, Manifest: mark(6).Manifest}}
	cands := []CheckpointCandidate{{EventID: "b2", Signer: key("bob"), Workload: "w1", Epoch: 2, Seq: 1, CreatedAt: at(2000 * s), GrantAt: granted}}
	usable, refused := SelectCheckpoints(req, key("dave"), 30*s, cands)
	if len(usable) != 0 || req.Evidence.Ahead(usable, refused) {
		t.Fatalf("usable %v, evidence ahead %v, want nothing to restore (refused %v)", usable, req.Evidence.Ahead(usable, refused), refused)
	}
	found := false
	for _, r := range refused {
		found = found || (r.EventID == EvidenceRefusalID && r.Reason == RefuseBehindUnknownEpoch)
	}
	if !found {
		t.Fatalf("refused %v, want the evidence refused as behind_unknown_epoch", refused)
	}
}
