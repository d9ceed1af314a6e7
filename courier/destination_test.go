package courier

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"provideragent/internal/sqlitedb"
)

// nostrRecorder records deliveries as a Nostr forwarder would get them.
func nostrRecorder(rec *recorder) Forwarder {
	return ForwarderTo(DestinationNostr, rec.Forward)
}

// TestFlushDeliversOnlyItsDestination: a forwarder gets only the receipts
// of its own destination; the others stay pending, untouched (no attempt,
// no error), until a forwarder of their kind flushes them.
func TestFlushDeliversOnlyItsDestination(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	ctx := context.Background()
	web, err := e.c.Send(ctx, []byte("web"), "alice", SendOptions{Destination: DestinationHTTP})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := e.c.Send(ctx, []byte(`{"kind":38385}`), "agent", SendOptions{Destination: DestinationNostr})
	if err != nil {
		t.Fatal(err)
	}
	if rev.Destination != DestinationNostr || web.Destination != DestinationHTTP {
		t.Fatalf("Send destinations = %s, %s, want nostr, http", rev.Destination, web.Destination)
	}

	httpRec := &recorder{}
	res, err := e.c.Flush(ctx, httpRec)
	if err != nil || res.Acknowledged != 1 {
		t.Fatalf("Flush(http) = %+v, %v, want 1 acknowledged", res, err)
	}
	if n := httpRec.count(`{"kind":38385}`); n != 0 {
		t.Errorf("http forwarder got the Nostr receipt %d times, want 0", n)
	}
	if got := e.get(t, rev.ID); got.State != StatePending || got.Attempts != 0 || got.LastError != "" {
		t.Errorf("Nostr receipt after Flush(http) = %s attempts=%d last_error=%q, want pending, 0, none",
			got.State, got.Attempts, got.LastError)
	}
	if next, ok, err := e.c.NextDue(ctx, DestinationHTTP); err != nil || ok {
		t.Errorf("NextDue(http) = %v, %v, %v, want none pending", next, ok, err)
	}
	if _, ok, err := e.c.NextDue(ctx, DestinationNostr); err != nil || !ok {
		t.Errorf("NextDue(nostr) = _, %v, %v, want the Nostr receipt", ok, err)
	}

	nostrRec := &recorder{}
	res, err = e.c.Flush(ctx, nostrRecorder(nostrRec))
	if err != nil || res.Acknowledged != 1 || nostrRec.count(`{"kind":38385}`) != 1 {
		t.Fatalf("Flush(nostr) = %+v, %v (calls %d), want the Nostr receipt acknowledged", res, err, nostrRec.count(`{"kind":38385}`))
	}
	if d := nostrRec.calls[0]; d.Destination != DestinationNostr {
		t.Errorf("Delivery.Destination = %q, want nostr", d.Destination)
	}
}

// TestReplayReplaysOnlyItsDestination: dead receipts of another kind stay
// in the DLQ, untouched, when the DLQ is replayed to a forwarder.
func TestReplayReplaysOnlyItsDestination(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	ctx := context.Background()
	var ids = map[Destination]ID{}
	for _, d := range Destinations {
		r, err := e.c.Send(ctx, []byte("bundle-"+string(d)), "s", SendOptions{Destination: d})
		if err != nil {
			t.Fatal(err)
		}
		ids[d] = r.ID
		fail := &recorder{fail: map[string]error{"bundle-" + string(d): ClientError(errBoom)}}
		if res, err := e.c.Flush(ctx, ForwarderTo(d, fail.Forward)); err != nil || res.DeadLettered != 1 {
			t.Fatalf("Flush(%s) = %+v, %v, want 1 dead-lettered", d, res, err)
		}
	}
	rec := &recorder{}
	res, err := e.c.Replay(ctx, rec, 1000)
	if err != nil || res.Acknowledged != 1 || res.Failed != 0 {
		t.Fatalf("Replay(http) = %+v, %v, want 1 acknowledged", res, err)
	}
	if rec.count("bundle-nostr") != 0 {
		t.Errorf("Replay(http) forwarded the Nostr receipt")
	}
	if got := e.get(t, ids[DestinationNostr]); got.State != StateDead || got.Attempts != 1 {
		t.Errorf("Nostr receipt after Replay(http) = %s attempts=%d, want dead, 1", got.State, got.Attempts)
	}
	dead, err := e.c.List(ctx, ListOptions{State: StateDead, Destination: DestinationNostr})
	if err != nil || len(dead) != 1 || dead[0].ID != ids[DestinationNostr] {
		t.Errorf("List(dead, nostr) = %v, %v, want the Nostr receipt", dead, err)
	}
}

func TestSendDestinationValidation(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	ctx := context.Background()
	if _, err := e.c.Send(ctx, []byte("x"), "s", SendOptions{Destination: "smtp"}); !errors.Is(err, ErrInvalidSend) {
		t.Errorf("Send(destination smtp) = %v, want ErrInvalidSend", err)
	}
	r, err := e.c.Send(ctx, []byte("x"), "s", SendOptions{})
	if err != nil || r.Destination != DestinationHTTP || e.get(t, r.ID).Destination != DestinationHTTP {
		t.Errorf("Send(no destination) = %+v, %v, want http stored", r, err)
	}
	// One idempotency key, one destination.
	if _, err := e.c.Send(ctx, []byte("y"), "s", SendOptions{IdempotencyKey: "k", Destination: DestinationNostr}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Send(ctx, []byte("y"), "s", SendOptions{IdempotencyKey: "k", Destination: DestinationHTTP}); !errors.Is(err, ErrIdempotencyConflict) {
		t.Errorf("Send(same key and bundle, other destination) = %v, want ErrIdempotencyConflict", err)
	}
	if _, err := ParseDestination("nostr"); err != nil {
		t.Errorf("ParseDestination(nostr) = %v", err)
	}
	if _, err := ParseDestination("NOSTR"); !errors.Is(err, ErrInvalidSend) {
		t.Errorf("ParseDestination(NOSTR) = %v, want ErrInvalidSend", err)
	}
}

// TestMigrationClassifiesExistingReceipts: receipts stored before
// migration 0002 get the destination of what they are: the agent's own and
// any signed Nostr event are Nostr receipts, the rest HTTP.
func TestMigrationClassifiesExistingReceipts(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, filepath.Join(t.TempDir(), "old.db"))
	defer db.Close()
	migs, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlitedb.Migrate(ctx, db, Component, migs, 1); err != nil {
		t.Fatal(err)
	}
	event := `{"id":"ab","pubkey":"cd","created_at":1,"kind":38385,"tags":[],"content":"","sig":"ef"}`
	rows := []struct {
		id             int64
		sender, bundle string
		want           Destination
	}{
		{1, "agent", `{"kind":38385}`, DestinationNostr},
		{2, "operator", event, DestinationNostr},
		{3, "operator", `{"order":7}`, DestinationHTTP},
		{4, "operator", "not json", DestinationHTTP},
		{5, "operator", `{"id":"ab","pubkey":"cd","sig":"ef","kind":"x"}`, DestinationHTTP},
	}
	for _, r := range rows {
		if _, err := db.Exec(`INSERT INTO courier_receipts (seq, id, bundle_hash, sender, created_at, state, next_attempt_at, size)
			VALUES (?, ?, 'h', ?, 0, 'pending', 0, 1)`, r.id, r.id, r.sender); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO courier_bundles (seq, bundle) VALUES (?, ?)`, r.id, []byte(r.bundle)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Open(ctx, db, DefaultConfig(), Deps{})
	if err != nil {
		t.Fatalf("Open (migrating to the latest) = %v", err)
	}
	defer c.Close()
	for _, r := range rows {
		got, err := c.Get(ctx, ID(r.id))
		if err != nil {
			t.Fatal(err)
		}
		if got.Destination != r.want {
			t.Errorf("receipt %d (sender %s, bundle %s) destination = %s, want %s", r.id, r.sender, r.bundle, got.Destination, r.want)
		}
	}
}
