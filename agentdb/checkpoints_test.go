package agentdb

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"provideragent/internal/sqlitedb"
)

// TestCheckpointLedger: a workload's row is replaced by a checkpoint of
// the same or a later epoch, never by one of an earlier epoch of the same
// grant (any of another grant), and survives a reopen.
func TestCheckpointLedger(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "agent.db")
	open := func() *Store {
		db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		s, err := Open(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	at := time.UnixMilli(1_700_000_000_000).UTC()
	put := func(r CheckpointRow) {
		t.Helper()
		if err := s.PutCheckpoint(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	grant := time.Unix(1_600_000_000, 0).UTC()
	put(CheckpointRow{Workload: "w1", GrantAt: grant, Epoch: 2, Seq: 1, EventID: "e1", StateURI: "blossom:a.json", CreatedAt: at})
	put(CheckpointRow{Workload: "w1", GrantAt: grant, Epoch: 2, Seq: 2, EventID: "e2", StateURI: "blossom:b.json", CreatedAt: at.Add(time.Second)})
	put(CheckpointRow{Workload: "w1", GrantAt: grant, Epoch: 1, Seq: 9, EventID: "old", StateURI: "blossom:old.json", CreatedAt: at})
	put(CheckpointRow{Workload: "w2", GrantAt: grant, Epoch: 3, Seq: 0, EventID: "", StateURI: "blossom:c.json", CreatedAt: at})
	// A re-grant of w2 starts its epochs again: its epoch 1 replaces the
	// earlier grant's epoch 3.
	put(CheckpointRow{Workload: "w2", GrantAt: grant.Add(time.Hour), Epoch: 1, Seq: 1, EventID: "new", StateURI: "blossom:d.json", CreatedAt: at})
	if err := s.PutCheckpoint(ctx, CheckpointRow{}); err == nil {
		t.Errorf("PutCheckpoint without a workload = nil, want an error")
	}
	want := []CheckpointRow{
		{Workload: "w1", GrantAt: grant, Epoch: 2, Seq: 2, EventID: "e2", StateURI: "blossom:b.json", CreatedAt: at.Add(time.Second)},
		{Workload: "w2", GrantAt: grant.Add(time.Hour), Epoch: 1, Seq: 1, EventID: "new", StateURI: "blossom:d.json", CreatedAt: at},
	}
	got, err := open().Checkpoints(ctx)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Checkpoints = %+v, %v; want %+v", got, err, want)
	}
	if err := s.DeleteCheckpoint(ctx, "w2"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Checkpoints(ctx); len(got) != 1 || got[0].Workload != "w1" {
		t.Errorf("after DeleteCheckpoint(w2): %+v", got)
	}
}
