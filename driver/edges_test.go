package driver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"provideragent/driver"
	"provideragent/lease"
)

// TestEmptyStepsWithAPayloadOrAReleaseCommit: a step without effects is
// still committed when it carries the caller's payload (Extra) or a release,
// also while held steps wait for their next retry; one with neither only
// finishes its tokens.
func TestEmptyStepsWithAPayloadOrAReleaseCommit(t *testing.T) {
	w := newWorld(t, nil)
	var extras []any
	w.store.Wrote = func(b *batch) { extras = append(extras, b.Extra) }
	st := w.d.Begin(t0)
	st.Extra("command 1")
	if err := st.Commit(context.Background()); err != nil || len(extras) != 1 || extras[0] != "command 1" {
		t.Fatalf("step with only a payload: err %v, committed payloads %v; want command 1 committed", err, extras)
	}
	// (The first commit also saved the machine's metadata: until it is in
	// the database every step commits, so that a crash restores.)
	commits := w.store.Commits
	st = w.d.Begin(t0)
	st.Token(1)
	if err := st.Commit(context.Background()); err != nil || w.store.Commits != commits || len(w.done) != 1 {
		t.Fatalf("empty step: err %v, commits %d (before %d), tokens %v; want no commit, token 1 finished", err, w.store.Commits, commits, w.done)
	}
	// With the metadata saved, a payload alone still commits.
	extras = nil
	st = w.d.Begin(t0)
	st.Extra("command 1b")
	if err := st.Commit(context.Background()); err != nil || w.store.Commits != commits+1 || len(extras) != 1 || extras[0] != "command 1b" {
		t.Fatalf("step with only a payload, metadata saved: err %v, commits %d (before %d), payloads %v; want command 1b committed", err, w.store.Commits, commits, extras)
	}
	if err := w.grant(0, spec("w1", other, self)); err != nil { // a standby: no effect to perform
		t.Fatal(err)
	}
	st = w.d.Begin(t0.Add(time.Second))
	if !st.Release("w1") || len(st.Effects()) != 0 {
		t.Fatalf("Release(w1) of a standby: effects %v, want none", st.Effects())
	}
	if err := st.Commit(context.Background()); err != nil || w.store.State("w1") != "" {
		t.Fatalf("release of a standby: err %v, row %q; want the row deleted", err, w.store.State("w1"))
	}
	if _, ok := w.d.Machine().State("w1"); ok {
		t.Fatal("after the release committed: w1 still tracked")
	}

	// Held steps: a payload is committed at once, not at the next retry.
	w.refuse(true)
	_ = w.grant(2*time.Second, spec("w2", self, other))
	if !w.d.Held() {
		t.Fatal("grant with writes refused: not held")
	}
	w.refuse(false)
	extras = nil
	st = w.d.Begin(t0.Add(2*time.Second + time.Millisecond))
	st.Extra("command 2")
	if err := st.Commit(context.Background()); err != nil || len(extras) != 1 || extras[0] != "command 2" || w.d.Held() {
		t.Fatalf("payload while held before the retry: err %v, payloads %v, held %v; want it and the held step committed", err, extras, w.d.Held())
	}
}

// TestReleaseWithOtherWorkloadsInItsStep: a step that releases one workload
// and changes others writes the others' rows.
func TestReleaseWithOtherWorkloadsInItsStep(t *testing.T) {
	w := newWorld(t, nil)
	if err := w.grant(0, spec("w1", self, other)); err != nil {
		t.Fatal(err)
	}
	st := w.d.Begin(t0.Add(time.Second))
	st.Release("w1")
	if err := st.Grant(spec("w2", self, other)); err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w.store.State("w1") != "" || w.store.State("w2") != lease.StateProvisioning {
		t.Fatalf("rows w1 %q, w2 %q; want w1 deleted, w2 provisioning", w.store.State("w1"), w.store.State("w2"))
	}
}

// TestEveryClaimOfAStepGetsItsTime: each claim a step publishes, whatever
// effects come before it, is performed with the created_at committed for
// it.
func TestEveryClaimOfAStepGetsItsTime(t *testing.T) {
	w := newWorld(t, nil)
	if err := w.grant(0, spec("w2", other, self)); err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Minute)
	st := w.d.Begin(at)
	if err := st.Grant(spec("w1", self, other)); err != nil { // a start first
		t.Fatal(err)
	}
	st.Revocation(lease.Revocation{Workload: "w2", Signer: other, Epoch: 1, Successor: self, QuorumAt: at})
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("claim w2 at %d", at.Unix()); w.log.index(want) < 0 || w.store.ClaimTimes["w2"] != at.Unix() {
		t.Fatalf("log %q, committed claim time %d; want %q and %d", w.log, w.store.ClaimTimes["w2"], want, at.Unix())
	}
	// The claim failed: its withdrawn marker is queued in the outbox with
	// the step, after another workload's start.
	st = w.d.Begin(at.Add(time.Second))
	if err := st.Grant(spec("w3", self, other)); err != nil {
		t.Fatal(err)
	}
	st.ClaimPublished(lease.ClaimAck{Workload: "w2", Epoch: 2, Accepted: 0})
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(w.store.Outbox); n != 1 || !strings.HasPrefix(w.store.Outbox[0].Key, "lease.WithdrawClaim:w2:") {
		t.Fatalf("outbox %v, want w2's withdrawn marker", w.store.Outbox)
	}
}

// TestDrainCommitsOneBatch: each DrainBacklog commits CommitBatch
// workloads of the backlog, no more.
func TestDrainCommitsOneBatch(t *testing.T) {
	w := newWorld(t, nil) // CommitBatch 4
	st := w.d.Begin(t0)
	for i := range 10 {
		if err := st.Grant(spec(fmt.Sprintf("w%d", i), self, other)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int{2, 0} {
		if err := w.d.DrainBacklog(context.Background(), t0); err != nil {
			t.Fatal(err)
		}
		if got := w.d.BacklogLen(); got != want {
			t.Fatalf("backlog after a drain = %d, want %d", got, want)
		}
	}
}

// TestDefaultConfigIsAsDocumented: the zero Config means the defaults its
// fields document.
func TestDefaultConfigIsAsDocumented(t *testing.T) {
	want := driver.Config{CommitWait: 250 * time.Millisecond, ProbeWait: 20 * time.Millisecond, CloseWait: 5 * time.Second, RetryEvery: time.Second, CommitBatch: 256}
	if got := driver.DefaultConfig(); got != want {
		t.Fatalf("DefaultConfig() = %+v, want %+v", got, want)
	}
	store := &memStore{}
	d, err := driver.Open(context.Background(), t0, driver.Config{}, leaseConfig(), self, driver.Deps[time.Time, string]{Store: store, Outbox: recOutbox{}, Performer: recPerformer{&log{}}})
	if err != nil {
		t.Fatal(err)
	}
	st := d.Begin(t0)
	for i := range 10 {
		if err := st.Grant(spec(fmt.Sprintf("w%d", i), self, other)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Commit(context.Background()); err != nil || len(store.Rows) != 10 || d.Backlogged() {
		t.Fatalf("a step of 10 workloads with the zero Config: err %v, rows %d, backlogged %v; want all 10 committed at once", err, len(store.Rows), d.Backlogged())
	}
}

// TestRestoredStopsArePerformedFirst: a driver opened on a database that
// holds workloads not held here performs their stops (lease.Restore's) in
// CommitRestored.
func TestRestoredStopsArePerformedFirst(t *testing.T) {
	w := newWorld(t, nil)
	if err := w.grant(0, spec("w1", other, self)); err != nil {
		t.Fatal(err)
	}
	restarted := newWorld(t, w.store.Clone())
	if !restarted.d.Restored() {
		t.Fatal("Restored() = false after opening a database with rows")
	}
	if err := restarted.d.CommitRestored(context.Background(), t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if restarted.log.index("stop w1") < 0 || restarted.d.Restored() {
		t.Fatalf("after CommitRestored: log %q, restored %v; want w1 stopped, nothing left to perform", restarted.log, restarted.d.Restored())
	}
}

// heldEvents records what the driver reports about held steps.
type heldEvents struct {
	driver.NopEvents
	log *log
}

func (e heldEvents) Held(_ error, steps int, first bool) {
	e.log.add(fmt.Sprintf("held %d first=%v", steps, first))
}

func (e heldEvents) Persisted(steps int, since, now time.Time) {
	e.log.add(fmt.Sprintf("persisted %d after %v", steps, now.Sub(since)))
}

// TestHeldStepsAreCounted: the driver reports how many steps are held as
// they accumulate and when they are persisted; a step with nothing to hold
// (a payload whose commit failed, which the caller retries) holds nothing.
func TestHeldStepsAreCounted(t *testing.T) {
	w := newWorld(t, nil)
	events := &log{}
	d, err := driver.Open(context.Background(), t0, driver.Config{}, leaseConfig(), self, driver.Deps[time.Time, string]{
		Store: w.store, Outbox: recOutbox{}, Performer: recPerformer{w.log}, Events: heldEvents{log: events},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.refuse(true)
	st := d.Begin(t0)
	st.Extra("command")
	if err := st.Commit(context.Background()); err == nil || d.Held() {
		t.Fatalf("payload-only step with writes refused: err %v, held %v; want an error and nothing held", err, d.Held())
	}
	for i, id := range []string{"w1", "w2"} {
		st := d.Begin(t0.Add(time.Duration(i+1) * 2 * time.Second))
		if err := st.Grant(spec(id, self, other)); err != nil {
			t.Fatal(err)
		}
		st.Token(driver.Token(i + 1)) // Deps.Finished is optional: nobody is told
		_ = st.Commit(context.Background())
	}
	w.refuse(false)
	if err := d.Begin(t0.Add(10 * time.Second)).Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := events.String(), "held 1 first=true\nheld 2 first=false\npersisted 2 after 8s"; got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// TestSaveKeepsWritingWorkloadsWithRivals: a workload with a rival claim
// may follow that rival at a later Tick without any effect, so every Save
// writes its row until it has no rival: the row then shows whom it
// follows.
func TestSaveKeepsWritingWorkloadsWithRivals(t *testing.T) {
	w := newWorld(t, nil)
	third := key("third")
	s := spec("w1", other, self)
	s.Standbys = append(s.Standbys, third)
	if err := w.grant(0, s); err != nil {
		t.Fatal(err)
	}
	st := w.d.Begin(t0.Add(time.Second))
	st.Claim(lease.PromotionClaim{Workload: "w1", Claimer: third, Epoch: 2, Active: true, CreatedAt: t0})
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.d.Save(context.Background(), t0.Add(2*time.Second), 0); err != nil {
		t.Fatal(err)
	}
	st = w.d.Begin(t0.Add(time.Hour)) // long after the settle time: w1 follows third
	st.Tick()
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w.d.Save(context.Background(), t0.Add(time.Hour+time.Second), 0); err != nil {
		t.Fatal(err)
	}
	if row := w.store.Rows["w1"]; row.Holder != third || row.Epoch != 2 {
		t.Fatalf("saved w1 follows %s at %d, want the third provider at 2", row.Holder, row.Epoch)
	}
}

// TestSaveWritesEveryWorkloadWithRivals: each Save writes the rows of all
// workloads with rival claims, also when an input changed some of them
// since the last save (listed once).
func TestSaveWritesEveryWorkloadWithRivals(t *testing.T) {
	w := newWorld(t, nil)
	third := key("third")
	const n = 20
	st := w.d.Begin(t0)
	for i := range n {
		s := spec(fmt.Sprintf("w%02d", i), other, self)
		s.Standbys = append(s.Standbys, third)
		if err := st.Grant(s); err != nil {
			t.Fatal(err)
		}
		st.Claim(lease.PromotionClaim{Workload: s.ID, Claimer: third, Epoch: 2, Active: true, CreatedAt: t0})
	}
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	for w.d.Backlogged() {
		if err := w.d.DrainBacklog(context.Background(), t0); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.d.Save(context.Background(), t0.Add(time.Second), 0); err != nil {
		t.Fatal(err)
	}
	st = w.d.Begin(t0.Add(2 * time.Second))
	st.Claim(lease.PromotionClaim{Workload: "w00", Claimer: other, Epoch: 1, Active: true, CreatedAt: t0.Add(time.Second)})
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rows int
	w.store.Wrote = func(b *batch) { rows = len(b.Workloads) }
	if err := w.d.Save(context.Background(), t0.Add(3*time.Second), 0); err != nil {
		t.Fatal(err)
	}
	if rows != n {
		t.Fatalf("Save wrote %d rows, want all %d workloads with rivals", rows, n)
	}
}

// TestMetadataWithoutWorkloadsIsRestored: a database whose workloads were
// all released still holds the machine's metadata; Open restores it
// rather than starting afresh.
func TestMetadataWithoutWorkloadsIsRestored(t *testing.T) {
	w := newWorld(t, nil)
	if err := w.grant(0, spec("w1", self, other)); err != nil {
		t.Fatal(err)
	}
	st := w.d.Begin(t0.Add(time.Second))
	st.Release("w1")
	if err := st.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(w.store.Rows) != 0 || w.store.Meta == nil {
		t.Fatalf("after the release: %d rows, metadata %v; want none and some", len(w.store.Rows), w.store.Meta != nil)
	}
	if restarted := newWorld(t, w.store.Clone()); !restarted.d.MetaSaved() {
		t.Fatal("reopened on metadata without workloads: MetaSaved() = false, want the metadata restored")
	}
	if fresh := newWorld(t, nil); fresh.d.MetaSaved() {
		t.Fatal("opened on an empty database: MetaSaved() = true")
	}
}
