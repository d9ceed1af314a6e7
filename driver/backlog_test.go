package driver

import (
	"testing"
	"time"

	"provideragent/lease"
)

// A later step that concerns a workload still in the backlog takes its
// piece along; the piece it leaves in the queue (skipped there) keeps
// nothing, so that the steps of a mass event waiting for their commits
// hold each workload's effects once, not once per step.
func TestBacklogTakenPieceKeepsNoEffects(t *testing.T) {
	var b backlog
	now := time.Unix(1_700_000_000, 0)
	first, _ := b.split(now, []lease.Effect{lease.PublishClaim{ID: "w1", Epoch: 2}, lease.PublishClaim{ID: "w2", Epoch: 2}}, nil)
	b.push(first)
	second, _ := b.split(now.Add(time.Second), []lease.Effect{lease.WithdrawClaim{ID: "w1", Epoch: 2}}, nil)
	b.push(second)
	if len(second) != 1 || len(second[0].effs) != 2 {
		t.Fatalf("the second step's piece of w1 has %d effects, want 2 (the first step's claim and the withdrawal)", len(second[0].effs))
	}
	old := first[0]
	if !old.taken || old.effs != nil || old.groups != nil {
		t.Fatalf("w1's first piece: taken %v, %d effects, %d token groups; want taken with none of either", old.taken, len(old.effs), len(old.groups))
	}
	got := b.next(10)
	if len(got) != 2 || got[0].id != "w2" || got[1].id != "w1" {
		t.Fatalf("next = %d pieces, want w2's then w1's merged piece", len(got))
	}
}
