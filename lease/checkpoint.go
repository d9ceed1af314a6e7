package lease

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// CheckpointCandidate is a checkpoint record (kind 38387) a restorer found
// on the relays, after its signature and encoding were checked: the
// fields the lease rules judge. Ref is the driver's own (the decoded
// record), carried through untouched.
type CheckpointCandidate struct {
	EventID   string
	Signer    string
	Workload  string
	Epoch     uint64
	Seq       uint64
	CreatedAt time.Time
	// GrantAt is the created_at of the lease grant the record says it
	// belongs to.
	GrantAt time.Time
	Ref     any
}

// Why a checkpoint record is refused (CheckpointRefusal.Reason); also the
// label values of the agent's refusal metric. The restorer adds the ones
// it finds while fetching (hash_mismatch, truncated_tile, bad_manifest).
const (
	RefuseOtherWorkload       = "other_workload"
	RefuseOtherGrant          = "other_grant"
	RefuseLaterEpoch          = "later_epoch"
	RefuseUnknownHolder       = "unknown_holder"
	RefuseWrongSigner         = "wrong_signer"
	RefuseAfterSuccessorStart = "after_successor_start"
	// RefuseBehindUnknownEpoch: a required restore does not go back to a
	// record older than a record of an epoch whose holder is not known
	// here (see SelectCheckpoints).
	RefuseBehindUnknownEpoch = "behind_unknown_epoch"
	// RefuseBehindEvidence: a required restore does not go back to a
	// record older than the newest checkpoint a holder's heartbeat named
	// (RestoreCheckpoint.Evidence).
	RefuseBehindEvidence = "behind_evidence"
)

// EvidenceRefusalID is the EventID of a refusal of req.Evidence itself
// (SelectCheckpoints).
const EvidenceRefusalID = "evidence"

// CheckpointEvidence is the newest checkpoint a holder's heartbeats named
// (WorkloadEpoch.Checkpoint), with its epoch. Heartbeats are signed by the
// holder and travel with its quorum: a standby hears them on the live
// streams of the relays whatever the relays keep, so the evidence outlives
// a record that relays lost.
type CheckpointEvidence struct {
	Epoch    uint64 `json:"epoch"`
	Seq      uint64 `json:"seq"`
	Manifest string `json:"sha256"`
}

// IsZero reports whether there is no evidence.
func (e CheckpointEvidence) IsZero() bool { return e.Epoch == 0 }

// newer reports whether e names a later checkpoint than o.
func (e CheckpointEvidence) newer(o CheckpointEvidence) bool {
	return e.Epoch > o.Epoch || (e.Epoch == o.Epoch && e.Seq > o.Seq)
}

// Ahead reports whether e names a later checkpoint than every record in
// usable (SelectCheckpoints' results), and was not refused itself: the
// driver then restores the manifest e names directly (its blobs are on the
// lease's servers), since the relays lost or never served its record.
func (e CheckpointEvidence) Ahead(usable []CheckpointCandidate, refused []CheckpointRefusal) bool {
	if e.IsZero() || e.Manifest == "" {
		return false
	}
	for _, r := range refused {
		if r.EventID == EvidenceRefusalID {
			return false
		}
	}
	for _, c := range usable {
		if c.Epoch > e.Epoch || (c.Epoch == e.Epoch && c.Seq >= e.Seq) {
			return false
		}
	}
	return true
}

// CheckpointRefusal is a record SelectCheckpoints refused, and why.
type CheckpointRefusal struct {
	EventID string
	Reason  string
	Detail  string
}

// SelectCheckpoints applies the lease's rules to the checkpoint records a
// restorer found for req and returns the usable ones, newest first (epoch,
// then seq, then created_at), and the refused ones with their reason. A
// record is usable only when:
//
//   - it is of req's workload and its grant (GrantAt equal to req.GrantAt
//     to the second: records stay on relays across re-grants, whose
//     epochs start again);
//   - its epoch is below req.Epoch, or is req.Epoch and signed by self (a
//     restorer's own base record, after a restart): nobody restores a
//     checkpoint of an epoch later than its claim's predecessor;
//   - its signer held that epoch, as this provider knows from req.Holders
//     (an epoch whose holder it never learned is refused: unknown_holder);
//   - it was made before the next epoch began (created_at at most MaxSkew
//     after the From of the holder of epoch+1 in req.Holders): a record of
//     epoch e published after epoch e+1 started comes from a holder that
//     was fenced by then, and is ignored.
//
// A required restore also refuses, as behind_evidence, records older than
// req.Evidence, the newest checkpoint a holder's heartbeat named; when no
// usable record reaches it, the driver restores the manifest it names
// (CheckpointEvidence.Ahead).
//
// A provider that missed whole epochs (cut off or down while others held
// the workload) does not know their holders and refuses their records
// (unknown_holder): it cannot tell the holder's record from one a member
// signed for an epoch it never held. For a required restore (req.Mode) the
// usable records older than such a record are refused too
// (behind_unknown_epoch): the state the lease requires is newer than any
// it can verify, and going back to an older epoch's would lose what the
// missed epochs did. The restore then fails and is retried, and after
// provision_timeout the workload is handed to a standby that may know. A
// best-effort restore takes the newest usable record.
func SelectCheckpoints(req RestoreCheckpoint, self string, maxSkew time.Duration, cands []CheckpointCandidate) (usable []CheckpointCandidate, refused []CheckpointRefusal) {
	holder := func(e uint64) (EpochHolder, bool) {
		for _, h := range req.Holders {
			if h.Epoch == e {
				return h, true
			}
		}
		return EpochHolder{}, false
	}
	refuse := func(c CheckpointCandidate, reason, format string, args ...any) {
		refused = append(refused, CheckpointRefusal{EventID: c.EventID, Reason: reason, Detail: fmt.Sprintf(format, args...)})
	}
	var unknownEpoch uint64 // newest epoch of a record refused as unknown_holder
	for _, c := range cands {
		switch {
		case c.Workload != req.ID:
			refuse(c, RefuseOtherWorkload, "record of workload %q", c.Workload)
			continue
		case c.GrantAt.Unix() != req.GrantAt.Unix():
			refuse(c, RefuseOtherGrant, "record of the grant made at %s, this lease was granted at %s",
				c.GrantAt.UTC().Format(time.RFC3339), req.GrantAt.UTC().Format(time.RFC3339))
			continue
		case c.Epoch > req.Epoch || (c.Epoch == req.Epoch && c.Signer != self):
			refuse(c, RefuseLaterEpoch, "record of epoch %d by %s, restoring for epoch %d", c.Epoch, short(c.Signer), req.Epoch)
			continue
		}
		h, ok := holder(c.Epoch)
		if !ok {
			refuse(c, RefuseUnknownHolder, "who held epoch %d is not known here", c.Epoch)
			unknownEpoch = max(unknownEpoch, c.Epoch)
			continue
		}
		if h.Holder != c.Signer {
			refuse(c, RefuseWrongSigner, "signed by %s, epoch %d was held by %s", short(c.Signer), c.Epoch, short(h.Holder))
			continue
		}
		if next, ok := holder(c.Epoch + 1); ok && c.Epoch < req.Epoch && c.CreatedAt.After(next.From.Add(maxSkew)) {
			refuse(c, RefuseAfterSuccessorStart, "made at %s, after epoch %d began at %s",
				c.CreatedAt.UTC().Format(time.RFC3339), c.Epoch+1, next.From.UTC().Format(time.RFC3339))
			continue
		}
		usable = append(usable, c)
	}
	slices.SortStableFunc(usable, func(a, b CheckpointCandidate) int {
		return -cmp.Or(cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.Seq, b.Seq), a.CreatedAt.Compare(b.CreatedAt))
	})
	if ev := req.Evidence; req.Mode == RestoreRequired && !ev.IsZero() {
		kept := usable[:0]
		for _, c := range usable {
			if c.Epoch < ev.Epoch || (c.Epoch == ev.Epoch && c.Seq < ev.Seq) {
				refuse(c, RefuseBehindEvidence, "record of epoch %d seq %d, behind epoch %d seq %d that its holder's heartbeat named: a required restore does not go back",
					c.Epoch, c.Seq, ev.Epoch, ev.Seq)
				continue
			}
			kept = append(kept, c)
		}
		usable = kept
	}
	if ev := req.Evidence; req.Mode == RestoreRequired && unknownEpoch > 0 && !ev.IsZero() && ev.Epoch < unknownEpoch {
		refused = append(refused, CheckpointRefusal{EventID: EvidenceRefusalID, Reason: RefuseBehindUnknownEpoch,
			Detail: fmt.Sprintf("the heartbeats' epoch %d seq %d, behind a record of epoch %d whose holder is not known here: a required restore does not go back", ev.Epoch, ev.Seq, unknownEpoch)})
	}
	if req.Mode == RestoreRequired && unknownEpoch > 0 {
		kept := usable[:0]
		for _, c := range usable {
			if c.Epoch < unknownEpoch {
				refuse(c, RefuseBehindUnknownEpoch, "record of epoch %d, behind a record of epoch %d whose holder is not known here: a required restore does not go back", c.Epoch, unknownEpoch)
				continue
			}
			kept = append(kept, c)
		}
		usable = kept
	}
	return usable, refused
}
