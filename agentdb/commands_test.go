package agentdb

import (
	"context"
	"testing"
	"time"
)

func TestCommandQueue(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	t0 := time.UnixMilli(1_700_000_000_000).UTC()
	for i, c := range []struct{ action, workload, spec string }{
		{ActionGrant, "a", `{"id":"a"}`}, {ActionRelease, "a", ""}, {ActionGrant, "b", `{"id":"b"}`},
	} {
		seq, err := s.QueueCommand(ctx, nil, c.action, c.workload, c.spec, t0.Add(time.Duration(i)*time.Second))
		if err != nil || seq != int64(i+1) {
			t.Fatalf("QueueCommand(%s %s) = %d, %v, want %d, nil", c.action, c.workload, seq, err, i+1)
		}
	}
	if _, err := s.QueueCommand(ctx, nil, "delete", "a", "", t0); err == nil {
		t.Fatal("QueueCommand(delete) = nil, want the table's CHECK to refuse it")
	}
	if err := s.MarkCommand(ctx, nil, 1, t0.Add(time.Minute), "ok"); err != nil {
		t.Fatal(err)
	}

	all, err := s.Commands(ctx, false, 0)
	if err != nil || len(all) != 3 {
		t.Fatalf("Commands(all) = %d rows, %v, want 3", len(all), err)
	}
	if c := all[0]; c.Action != ActionGrant || c.Workload != "a" || c.Spec != `{"id":"a"}` || !c.CreatedAt.Equal(t0) ||
		!c.AppliedAt.Equal(t0.Add(time.Minute)) || c.Result != "ok" {
		t.Errorf("Commands()[0] = %+v, want grant a applied ok at t0+1m", c)
	}
	if c := all[1]; c.Action != ActionRelease || c.Spec != "" || !c.AppliedAt.IsZero() {
		t.Errorf("Commands()[1] = %+v, want a pending release", c)
	}
	pending, err := s.Commands(ctx, true, 1)
	if err != nil || len(pending) != 1 || pending[0].Seq != 2 {
		t.Fatalf("Commands(pending, limit 1) = %+v, %v, want seq 2 only", pending, err)
	}
}
