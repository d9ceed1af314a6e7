package agentdb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"provideragent/courier"
	"provideragent/internal/sqlitedb"
)

func openTest(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "provider-agent.db")
	db, err := sqlitedb.Open(context.Background(), path, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return s, path
}

func row(id, state string, epoch uint64) WorkloadRow {
	return WorkloadRow{
		ID: id, State: state, Epoch: epoch,
		Spec:     json.RawMessage(`{"id":"` + id + `","command":["sleep","60"]}`),
		Snapshot: json.RawMessage(`{"state":"` + state + `","epoch":` + json.Number(itoa(epoch)).String() + `}`),
	}
}

func itoa(n uint64) string { b, _ := json.Marshal(n); return string(b) }

func TestSaveStepAndReload(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t)
	fixed := time.UnixMilli(1_700_000_000_123)
	s.now = func() time.Time { return fixed }
	err := s.SaveStep(ctx, nil, Step{
		Workloads: []WorkloadRow{row("b", "live", 2), row("a", "standby", 1)},
		Cursors:   map[string]int64{"wss://r1.example": 100, "wss://r2.example": 90},
		KV:        map[string][]byte{"machine": []byte(`{"now":1}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Update one, delete the other, in one step.
	if err := s.SaveStep(ctx, nil, Step{Workloads: []WorkloadRow{row("b", "suspect", 2)}, Deleted: []string{"a"}}); err != nil {
		t.Fatal(err)
	}

	// Reopen the file: everything is there.
	db2, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	s2, err := Open(ctx, db2)
	if err != nil {
		t.Fatal(err)
	}
	all, err := s2.LoadAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := row("b", "suspect", 2)
	want.UpdatedAt = fixed
	if len(all) != 1 || !reflect.DeepEqual(all[0], want) {
		t.Fatalf("LoadAll() = %+v, want [%+v]", all, want)
	}
	if got, err := s2.Workload(ctx, "b"); err != nil || got.State != "suspect" {
		t.Errorf("Workload(b) = %+v, %v, want suspect", got, err)
	}
	if _, err := s2.Workload(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Workload(deleted) = %v, want ErrNotFound", err)
	}
	curs, err := s2.Cursors(ctx)
	if err != nil || !reflect.DeepEqual(curs, map[string]int64{"wss://r1.example": 100, "wss://r2.example": 90}) {
		t.Errorf("Cursors() = %v, %v, want both cursors", curs, err)
	}
	if v, err := s2.KV(ctx, "machine"); err != nil || string(v) != `{"now":1}` {
		t.Errorf("KV(machine) = %q, %v, want the saved value", v, err)
	}
}

func TestCursorNeverGoesBackwards(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	const relay = "wss://relay.example"
	if got, err := s.Cursor(ctx, relay); err != nil || got != 0 {
		t.Fatalf("Cursor(unsaved) = %d, %v, want 0, nil", got, err)
	}
	steps := []struct{ save, want int64 }{{100, 100}, {150, 150}, {120, 150}, {0, 150}, {151, 151}}
	for _, st := range steps {
		got, err := s.SaveCursor(ctx, nil, relay, st.save)
		if err != nil || got != st.want {
			t.Errorf("SaveCursor(%d) = %d, %v, want %d", st.save, got, err, st.want)
		}
		if c, _ := s.Cursor(ctx, relay); c != st.want {
			t.Errorf("Cursor() after SaveCursor(%d) = %d, want %d", st.save, c, st.want)
		}
	}
	// A step with a lower cursor does not lower it either.
	if err := s.SaveStep(ctx, nil, Step{Cursors: map[string]int64{relay: 5}}); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Cursor(ctx, relay); c != 151 {
		t.Errorf("Cursor() after SaveStep(5) = %d, want 151", c)
	}
}

// TestClampCursorLowersOnlyAboveTheLimit: ClampCursor heals a cursor pushed
// into the future and leaves one at or below the limit (or none) alone.
func TestClampCursorLowersOnlyAboveTheLimit(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	const relay = "*"
	if got, err := s.ClampCursor(ctx, nil, relay, 100); err != nil || got != 0 {
		t.Fatalf("ClampCursor(no cursor) = %d, %v, want 0, nil", got, err)
	}
	steps := []struct{ save, limit, want int64 }{
		{4102444800, 1000, 1000}, // the year 2100, healed to the limit
		{900, 1000, 1000},        // SaveCursor never lowers it; the clamp keeps it
		{1500, 2000, 1500},       // below the limit: untouched
		{1500, 0, 0},             // a limit of 0 is valid: the cursor drops to it
	}
	for _, st := range steps {
		if _, err := s.SaveCursor(ctx, nil, relay, st.save); err != nil {
			t.Fatal(err)
		}
		got, err := s.ClampCursor(ctx, nil, relay, st.limit)
		if err != nil || got != st.want {
			t.Errorf("ClampCursor(%d) after SaveCursor(%d) = %d, %v, want %d", st.limit, st.save, got, err, st.want)
		}
		if c, _ := s.Cursor(ctx, relay); c != st.want {
			t.Errorf("Cursor() after ClampCursor(%d) = %d, want %d", st.limit, c, st.want)
		}
	}
	if _, err := s.ClampCursor(ctx, nil, relay, -1); !errors.Is(err, ErrBadRow) {
		t.Errorf("ClampCursor(-1) = %v, want ErrBadRow", err)
	}
}

func TestBadRowsAreRejected(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	bad := []struct {
		name string
		step Step
	}{
		{"empty id", Step{Workloads: []WorkloadRow{row("", "live", 1)}}},
		{"bad spec json", Step{Workloads: []WorkloadRow{{ID: "x", Spec: json.RawMessage(`{`), Snapshot: json.RawMessage(`{}`)}}}},
		{"bad snapshot json", Step{Workloads: []WorkloadRow{{ID: "x", Spec: json.RawMessage(`{}`), Snapshot: nil}}}},
		{"huge epoch", Step{Workloads: []WorkloadRow{{ID: "x", Epoch: 1 << 63, Spec: json.RawMessage(`{}`), Snapshot: json.RawMessage(`{}`)}}}},
		{"negative cursor", Step{Cursors: map[string]int64{"wss://r": -1}}},
		{"empty relay", Step{Cursors: map[string]int64{"": 1}}},
		{"empty kv key", Step{KV: map[string][]byte{"": []byte("x")}}},
	}
	for _, tc := range bad {
		// A good row first: a bad step must leave nothing behind.
		tc.step.Workloads = append([]WorkloadRow{row("good", "live", 1)}, tc.step.Workloads...)
		if err := s.SaveStep(ctx, nil, tc.step); !errors.Is(err, ErrBadRow) {
			t.Errorf("SaveStep(%s) = %v, want ErrBadRow", tc.name, err)
		}
		if all, _ := s.LoadAll(ctx); len(all) != 0 {
			t.Errorf("LoadAll() after failed SaveStep(%s) = %d rows, want 0", tc.name, len(all))
		}
	}
}

func TestKVDelete(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	if err := s.SetKV(ctx, nil, "k", []byte{}); err != nil {
		t.Fatal(err)
	}
	if v, err := s.KV(ctx, "k"); err != nil || len(v) != 0 {
		t.Errorf("KV(k) = %q, %v, want empty value", v, err)
	}
	if err := s.SetKV(ctx, nil, "k", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.KV(ctx, "k"); !errors.Is(err, ErrNotFound) {
		t.Errorf("KV(deleted) = %v, want ErrNotFound", err)
	}
}

// TestStepAndOutboxCommitTogether shows the daemon's pattern: the machine
// step, the cursor and the courier's outbox row share one transaction on
// the single-connection database.
func TestStepAndOutboxCommitTogether(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	c, err := courier.Open(ctx, s.DB(), courier.DefaultConfig(), courier.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// Rolled back: neither the step nor the receipt exists.
	var rolled courier.Receipt
	boom := errors.New("effect planning failed")
	err = s.WithTx(ctx, func(tx *sql.Tx) error {
		if err := s.SaveStep(ctx, tx, Step{Workloads: []WorkloadRow{row("w", "evicted", 1)}, Cursors: map[string]int64{"wss://r": 10}}); err != nil {
			return err
		}
		r, err := c.SendTx(ctx, tx, []byte(`{"kind":38385}`), "agent", courier.SendOptions{})
		rolled = r
		if err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WithTx() = %v, want %v", err, boom)
	}
	if _, err := s.Workload(ctx, "w"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Workload after rollback = %v, want ErrNotFound", err)
	}
	if cur, _ := s.Cursor(ctx, "wss://r"); cur != 0 {
		t.Errorf("Cursor after rollback = %d, want 0", cur)
	}
	if _, err := c.Get(ctx, rolled.ID); err == nil {
		t.Error("courier Get(rolled back receipt) = nil error, want not found")
	}

	// Committed: both exist.
	var sent courier.Receipt
	err = s.WithTx(ctx, func(tx *sql.Tx) error {
		if err := s.SaveStep(ctx, tx, Step{Workloads: []WorkloadRow{row("w", "evicted", 1)}, Cursors: map[string]int64{"wss://r": 10}}); err != nil {
			return err
		}
		var err error
		sent, err = c.SendTx(ctx, tx, []byte(`{"kind":38385,"n":2}`), "agent", courier.SendOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if w, err := s.Workload(ctx, "w"); err != nil || w.State != "evicted" {
		t.Errorf("Workload after commit = %+v, %v, want evicted", w, err)
	}
	if _, err := c.Get(ctx, sent.ID); err != nil {
		t.Errorf("courier Get(committed receipt) = %v, want nil", err)
	}
}

func TestMigrationsRollBack(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	migs, err := sqlitedb.LoadMigrations(migrationFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlitedb.MigrateDown(ctx, s.DB(), Component, migs, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `SELECT 1 FROM agent_workload_state`); err == nil {
		t.Error("agent_workload_state exists after rollback, want dropped")
	}
	if err := sqlitedb.Migrate(ctx, s.DB(), Component, migs, 0); err != nil {
		t.Fatal(err)
	}
}
