package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"provideragent/driver"
	"provideragent/lease"
)

// LeaseCheckpoint is the body of a checkpoint record (kind 38387 under
// CheckpointD): the value of a workload's counter at one checkpoint of an
// epoch, published by that epoch's holder once the (simulated) blobs are
// stored. GrantAt is the grant's created_at (unix seconds): records stay on
// relays across re-grants. Final marks the record a planned move publishes
// after the copy stopped: its exact last value.
type LeaseCheckpoint struct {
	Workload string
	Epoch    uint64
	Seq      uint64
	Value    uint64 // for checkers: a restore reads the blob
	GrantAt  int64
	Final    bool
	// Manifest names the blob that holds the value (blobs.go).
	Manifest string
}

// CheckpointD is the d tag of a workload's checkpoint records at an epoch
// (the agent's provider-agent:checkpoint:v1:<workload>:<epoch>): relays keep
// the newest record per author, workload and epoch.
func CheckpointD(workload string, epoch uint64) string {
	return fmt.Sprintf("checkpoint:%s:%d", workload, epoch)
}

// DurableLeaseSpec is LeaseSpec with checkpoint policy p: every epoch that
// begins restores the newest usable checkpoint first.
func DurableLeaseSpec(cfg lease.Config, id string, k int, p lease.CheckpointPolicy) lease.Spec {
	s := LeaseSpec(cfg, id, k)
	s.Checkpoint = &p
	return s
}

// MoveTimeout bounds a planned move (Sim.Move) from the stop to M relays
// accepting its final record (the agent's checkpoint.move_timeout).
const MoveTimeout = 60 * time.Second

// NoteKind says what a CheckpointNote records.
type NoteKind int

const (
	// NoteRestored: a restore placed Record's value as the state of Epoch
	// (the checkpoint file of the new epoch).
	NoteRestored NoteKind = iota + 1
	// NoteStarted: a copy started at Epoch from Value (its base).
	NoteStarted
	// NoteMoved: a planned move handed Epoch over (HandOver accepted it)
	// after M relays accepted its final Record of Value.
	NoteMoved
	// NoteMoveAborted: a planned move stopped the copy and then gave up
	// (Detail says why); the copy was restarted when the machine still held
	// the workload.
	NoteMoveAborted
)

func (k NoteKind) String() string {
	switch k {
	case NoteRestored:
		return "restored"
	case NoteStarted:
		return "started"
	case NoteMoved:
		return "moved"
	case NoteMoveAborted:
		return "move aborted"
	}
	return fmt.Sprintf("note(%d)", int(k))
}

// CheckpointNote is one thing a node did with a workload's state, kept for
// checkers (CheckpointJournal).
type CheckpointNote struct {
	What     NoteKind
	Workload string
	Epoch    uint64
	Value    uint64
	Record   *Event // the record restored, nil for a checkpoint named by heartbeats
	Blob     string // the blob restored
	Detail   string
}

// CheckpointJournal is what a Node tells checkers about the workload
// state it restored, started from and handed over (LeaseNode does). The
// journal only grows, and survives the node's crashes: it is an observer's
// log, not the agent's memory.
type CheckpointJournal interface {
	CheckpointJournal() []CheckpointNote
}

// ckptFile is a workload's checkpoint file on the node's disk (the
// checkpoint of its epoch's directory, design §1 and §4.5) and what was
// published of it: it survives the agent's and the node's crashes. The
// workload writes it at every checkpoint and when stopped (SIGTERM); a
// restore places the restored value in it; a copy started at Epoch (a
// respawn, a restart of the agent, an aborted move) resumes from it.
type ckptFile struct {
	Epoch, Seq, Value uint64
	// PubSeq is the Seq last published at Epoch; PubAt its created_at
	// (records of one epoch have strictly rising created_at, as relays
	// keep the newest per d tag); PubManifest its blob, which the node's
	// heartbeats name while it holds Epoch (the checkpoint mark: sent
	// with the record, where the agent waits for M relays to accept it).
	PubSeq      uint64
	PubAt       int64
	PubManifest string
}

// ckptCopy is a running copy of a workload this node started: a counter
// that adds one per second it runs (on the node's clock) to the value it
// started from. A stop (SIGTERM) freezes it: the workload writes its final
// checkpoint and counts no more while it exits.
type ckptCopy struct {
	epoch   uint64
	base    uint64
	from    time.Time
	stopped bool
	final   uint64
}

func (c *ckptCopy) value(now time.Time) uint64 {
	if c.stopped {
		return c.final
	}
	if d := now.Sub(c.from); d > 0 {
		return c.base + uint64(d/time.Second)
	}
	return c.base
}

// restoreRead is one restore attempt's query of every relay. A relay whose
// query fails (not connected, no answer) is asked again every
// restoreRetry until the read's deadline, as the agent's relay pool waits
// for a connection within its query timeout.
type restoreRead struct {
	req       lease.RestoreCheckpoint
	deadline  time.Time
	answered  int
	read      int
	evs       []*Event
	seen      map[EventID]bool
	completed bool
}

// moveOp is a planned move under way (volatile: the agent's move goroutine
// dies with it; a restarted machine starts the copy again from the file).
type moveOp struct {
	workload string
	epoch    uint64
	value    uint64
	rec      *Event
	acks     int
	answered int
	done     bool
}

type timerCheckpoint struct{}
type timerRestore struct{ req lease.RestoreCheckpoint }
type timerRestoreRetry struct {
	rd *restoreRead
	r  RelayID
}

// restoreReadTimeout bounds a restore attempt's read of the relays; a
// relay whose query failed is asked again every restoreRetry until then.
const (
	restoreReadTimeout = 10 * time.Second
	restoreRetry       = time.Second
)

type timerMove struct {
	workload string
	rec      EventID
}

// CheckpointEvery makes the node checkpoint every copy it started of a
// workload whose lease has a checkpoint policy every d (0: never): the
// copy writes its value to the checkpoint file and, while the machine
// holds the workload Live at the copy's epoch, the node publishes it as a
// record to every relay. Set it before the world boots.
func (n *LeaseNode) CheckpointEvery(d time.Duration) { n.ckptEvery = d }

// CheckpointJournal implements CheckpointJournal.
func (n *LeaseNode) CheckpointJournal() []CheckpointNote { return n.journal }

// durable reports whether the node's lease has a checkpoint policy.
func (n *LeaseNode) durable() bool { return n.spec.Checkpoint != nil }

func (n *LeaseNode) note(c CheckpointNote) { n.journal = append(n.journal, c) }

// armCheckpoints sets the next checkpoint timer.
func (n *LeaseNode) armCheckpoints(now time.Time) {
	if n.durable() && n.ckptEvery > 0 {
		n.env.At(now.Add(n.ckptEvery), timerCheckpoint{})
	}
}

// startCopy starts workload w at epoch from the checkpoint file of that
// epoch (0 without one): the process a StartWorkload, AttemptRespawn or an
// aborted move starts. A copy already running at epoch is left as it is
// (starts are idempotent).
func (n *LeaseNode) startCopy(w string, epoch uint64) {
	env := n.env
	if !n.durable() {
		env.Start(w, epoch)
		return
	}
	if c := n.copies[w]; c != nil && c.epoch == epoch && !c.stopped {
		if e, ok := env.Running(w); ok && e == epoch {
			return
		}
	}
	var base uint64
	if f := n.disk.files[w]; f != nil && f.Epoch == epoch {
		base = f.Value
	}
	n.copies[w] = &ckptCopy{epoch: epoch, base: base, from: n.now}
	n.note(CheckpointNote{What: NoteStarted, Workload: w, Epoch: epoch, Value: base})
	env.Logf("copy of %s starts at epoch %d from value %d", w, epoch, base)
	env.Start(w, epoch)
}

// stopCopy sends the copy SIGTERM: it writes its final checkpoint to the
// file and counts no more. It returns the copy's final value (ok false when
// this node runs no copy it started).
func (n *LeaseNode) stopCopy(w string) (uint64, bool) {
	c := n.copies[w]
	if c == nil || c.stopped {
		return 0, false
	}
	if e, ok := n.env.Running(w); !ok || e != c.epoch {
		delete(n.copies, w)
		return 0, false
	}
	c.final, c.stopped = c.value(n.now), true
	n.writeFile(w, c.epoch, c.final)
	return c.final, true
}

// writeFile is the workload writing its checkpoint file.
func (n *LeaseNode) writeFile(w string, epoch, value uint64) {
	f := n.disk.files[w]
	if f == nil || f.Epoch != epoch {
		f = &ckptFile{Epoch: epoch}
		n.disk.files[w] = f
	}
	f.Seq++
	f.Value = value
}

// checkpoint is the timer's work: every running copy writes its value to
// its file, and the node publishes what changed (the agent's watcher).
func (n *LeaseNode) checkpoint(now time.Time) {
	n.armCheckpoints(now)
	for w, c := range n.copies {
		if e, ok := n.env.Running(w); !ok || e != c.epoch {
			delete(n.copies, w) // it exited, or a stop completed
			continue
		}
		if !c.stopped {
			n.writeFile(w, c.epoch, c.value(now))
		}
	}
	// The file of a copy stopped since (a fence's SIGTERM) is published
	// too if the machine still holds the workload Live at its epoch: it
	// does not once it fenced (design flag F4).
	n.publishCheckpoint(n.spec.ID, now)
}

// publishCheckpoint publishes workload w's checkpoint file as a record
// when it changed since the last one published, only while the machine
// holds w Live at the file's epoch, checked just before publishing (only
// the current holder publishes), and never during a planned move (the
// move publishes the final record itself).
func (n *LeaseNode) publishCheckpoint(w string, now time.Time) {
	f := n.disk.files[w]
	if f == nil || f.Seq <= f.PubSeq || n.moves[w] != nil {
		return
	}
	if e, ok := n.Live(w); !ok || e != f.Epoch {
		return
	}
	n.publishRecord(w, f, now, false)
}

// publishRecord publishes f as workload w's record to every relay, once
// its blob is on the servers (nil, publishing nothing, while they are
// down: a later checkpoint tries again).
func (n *LeaseNode) publishRecord(w string, f *ckptFile, now time.Time, final bool) *Event {
	at := max(now.Unix(), f.PubAt+1)
	manifest := blobID(n.self, w, f.Epoch, f.Seq)
	if !n.env.PutBlob(manifest, w, f.Epoch, f.Value) { // the blobs first, then the record naming them
		n.env.Logf("checkpoint %d of %s at epoch %d not published: the blob servers are down", f.Seq, w, f.Epoch)
		return nil
	}
	ev := Event{Kind: KindCheckpoint, CreatedAt: at, D: CheckpointD(w, f.Epoch), Body: LeaseCheckpoint{
		Workload: w, Epoch: f.Epoch, Seq: f.Seq, Value: f.Value, GrantAt: n.spec.CreatedAt.Unix(), Final: final, Manifest: manifest,
	}}
	ev.ID = n.env.Publish(ev, nil)
	f.PubSeq, f.PubAt, f.PubManifest = f.Seq, at, manifest
	return &ev
}

// blobID names the blob of one checkpoint (the manifest's hash: unique
// per author, workload, epoch and seq, as content would make it).
func blobID(author ProviderID, w string, epoch, seq uint64) string {
	return fmt.Sprintf("blob-%d-%s-%d-%d", author, w, epoch, seq)
}

// marked adds to held, for the durable workload, the mark of the newest
// checkpoint this node published at the epoch it holds (the agent's
// withCheckpointMarks).
func (n *LeaseNode) marked(held []lease.WorkloadEpoch) []lease.WorkloadEpoch {
	if !n.durable() {
		return held
	}
	for i, we := range held {
		if f := n.disk.files[we.ID]; f != nil && f.Epoch == we.Epoch && f.PubSeq > 0 {
			held[i].Checkpoint = lease.CheckpointMark{Seq: f.PubSeq, Manifest: f.PubManifest}
		}
	}
	return held
}

// Restore asks every relay for the workload's checkpoint records (from its
// timer, at once: the agent's restorer runs beside the loop).
func (p performer) Restore(e lease.RestoreCheckpoint) {
	p.env.Logf("restores the state of epoch %d (attempt %d, %s)", e.Epoch, e.Attempt, e.Mode)
	p.env.At(p.now, timerRestore{req: e})
}

// queryRestore sends one restore attempt's queries.
func (n *LeaseNode) queryRestore(now time.Time, req lease.RestoreCheckpoint) {
	rd := &restoreRead{req: req, deadline: now.Add(restoreReadTimeout), seen: map[EventID]bool{}}
	for r := 0; r < n.env.NumRelays(); r++ {
		n.queryRecords(rd, RelayID(r))
	}
}

func (n *LeaseNode) queryRecords(rd *restoreRead, r RelayID) {
	id := rd.req.ID
	q := n.env.Query(r, func(ev *Event) bool {
		b, ok := ev.Body.(LeaseCheckpoint)
		return ok && ev.Kind == KindCheckpoint && b.Workload == id
	})
	n.restores[q] = rd
}

// restoreAnswer takes one relay's answer to a restore read; once N-M+1
// relays were read (a read of them meets every record that reached M), or
// every relay answered, the attempt ends.
func (n *LeaseNode) restoreAnswer(now time.Time, r RelayID, rd *restoreRead, evs []*Event, ok bool) {
	if rd.completed {
		return
	}
	if !ok && now.Add(restoreRetry).Before(rd.deadline) {
		n.env.At(now.Add(restoreRetry), timerRestoreRetry{rd: rd, r: r})
		return
	}
	rd.answered++
	if ok {
		rd.read++
		for _, ev := range evs {
			if !rd.seen[ev.ID] {
				rd.seen[ev.ID] = true
				rd.evs = append(rd.evs, ev)
			}
		}
	}
	if rd.read < n.cfg.N-n.cfg.M+1 && rd.answered < n.env.NumRelays() {
		return
	}
	rd.completed = true
	n.finishRestore(now, rd)
}

// finishRestore judges the records one attempt read, places the chosen one
// and reports to the machine.
func (n *LeaseNode) finishRestore(now time.Time, rd *restoreRead) {
	req, env := rd.req, n.env
	w, ok := n.d.Machine().Workload(req.ID)
	if !ok || w.State != lease.StateProvisioning || w.Epoch != req.Epoch || w.Restore != lease.RestoreRunning || w.RestoreAttempt != req.Attempt {
		env.Logf("restore attempt %d of epoch %d ends after the machine moved on: nothing placed", req.Attempt, req.Epoch)
		return
	}
	res := lease.RestoreResult{Workload: req.ID, Epoch: req.Epoch, Attempt: req.Attempt}
	need := n.cfg.N - n.cfg.M + 1
	var cands []lease.CheckpointCandidate
	for _, ev := range rd.evs {
		// The agent's ingest: signature, a key the lease names, not from
		// the future.
		if !n.admit(now, ev) {
			continue
		}
		b := ev.Body.(LeaseCheckpoint)
		cands = append(cands, lease.CheckpointCandidate{
			EventID: eventID(ev.ID), Signer: ProviderKey(ev.Author), Workload: b.Workload, Epoch: b.Epoch, Seq: b.Seq,
			CreatedAt: time.Unix(ev.CreatedAt, 0), GrantAt: time.Unix(b.GrantAt, 0), Ref: ev,
		})
	}
	usable, refused := lease.SelectCheckpoints(req, n.key, n.cfg.MaxSkew, cands)
	for _, r := range refused {
		env.Logf("  record %s refused: %s (%s)", r.EventID, r.Reason, r.Detail)
	}
	switch {
	case n.restoreHint(req, &res):
		// The revocation's state_uri first, with or without its record,
		// as checkpoint.Restorer tries it: its author held an earlier
		// epoch.
		env.Logf("restored epoch %d from the revocation's state_uri (read %d of %d relays, need %d)", req.Epoch, rd.read, n.cfg.N, need)
	case rd.read < need:
		res.Reason = fmt.Sprintf("read %d of %d relays, need %d", rd.read, n.cfg.N, need)
	case req.Evidence.Ahead(usable, refused):
		// The holder's heartbeats named a checkpoint newer than every
		// record read: fetch it by its manifest (best-effort falls back).
		ev := req.Evidence
		if v, ok := env.FetchBlob(ev.Manifest); ok {
			n.place(req, v)
			res.OK, res.From = true, ev.Manifest
			n.note(CheckpointNote{What: NoteRestored, Workload: req.ID, Epoch: req.Epoch, Value: v, Blob: ev.Manifest})
			env.Logf("restored epoch %d from the checkpoint its holder's heartbeats named (epoch %d seq %d): value %d", req.Epoch, ev.Epoch, ev.Seq, v)
		} else if req.Mode == lease.RestoreRequired || len(usable) == 0 {
			res.Reason = fmt.Sprintf("the blob servers do not serve %s (epoch %d seq %d, named by its holder's heartbeats)", ev.Manifest, ev.Epoch, ev.Seq)
		} else {
			n.restoreRecord(req, usable, &res)
		}
	case len(cands) == 0:
		res.Fresh, res.Reason = true, fmt.Sprintf("no checkpoint record of %s on the %d relays read", req.ID, rd.read)
	case len(usable) == 0:
		reasons := make([]string, 0, len(refused))
		for _, r := range refused {
			reasons = append(reasons, r.Reason)
		}
		slices.Sort(reasons)
		res.Reason = fmt.Sprintf("%d records, none usable (%s)", len(cands), strings.Join(slices.Compact(reasons), ", "))
	default:
		n.restoreRecord(req, usable, &res)
	}
	if !res.OK {
		env.Logf("restore attempt %d of epoch %d: fresh %v: %s", req.Attempt, req.Epoch, res.Fresh, res.Reason)
	}
	n.step(now, driver.Input{Restored: &res}, false)
}

// restoreHint places the blob the revocation's state_uri names when its
// author held an epoch before the restored one, and reports whether it
// did: checkpoint.Restorer tries the hint before any record, and without
// the records when too few relays answer (its rule for a hint no record
// names; a record naming it is the same blob).
func (n *LeaseNode) restoreHint(req lease.RestoreCheckpoint, res *lease.RestoreResult) bool {
	blob, author, ok := stateURIBlob(req.Hint)
	if !ok || !slices.ContainsFunc(req.Holders, func(h lease.EpochHolder) bool { return h.Holder == author && h.Epoch < req.Epoch }) {
		return false
	}
	v, ok := n.env.FetchBlob(blob)
	if !ok {
		return false
	}
	n.place(req, v)
	res.OK, res.From = true, req.Hint
	n.note(CheckpointNote{What: NoteRestored, Workload: req.ID, Epoch: req.Epoch, Value: v, Blob: blob})
	return true
}

// restoreRecord places the value of the newest usable record, fetched
// from the blob servers (res fails when they do not serve it).
func (n *LeaseNode) restoreRecord(req lease.RestoreCheckpoint, usable []lease.CheckpointCandidate, res *lease.RestoreResult) {
	env := n.env
	ev := usable[0].Ref.(*Event)
	b := ev.Body.(LeaseCheckpoint)
	v, ok := env.FetchBlob(b.Manifest)
	if !ok {
		res.Reason = fmt.Sprintf("the blob servers do not serve %s (record of epoch %d seq %d)", b.Manifest, b.Epoch, b.Seq)
		return
	}
	n.place(req, v)
	res.OK, res.From = true, eventID(ev.ID)
	n.note(CheckpointNote{What: NoteRestored, Workload: req.ID, Epoch: req.Epoch, Value: v, Record: ev, Blob: b.Manifest})
	hint := ""
	if req.Hint != "" && req.Hint != stateURI(ev) {
		hint = fmt.Sprintf(" (the revocation named %s)", req.Hint)
	}
	env.Logf("restored epoch %d from %s's record of epoch %d seq %d: value %d%s", req.Epoch, n.name(ProviderKey(ev.Author)), b.Epoch, b.Seq, v, hint)
}

// place writes a restored value as the checkpoint file of the new epoch.
func (n *LeaseNode) place(req lease.RestoreCheckpoint, v uint64) {
	f := &ckptFile{Epoch: req.Epoch, Value: v}
	if old := n.disk.files[req.ID]; old != nil && old.Epoch == req.Epoch {
		f.Seq, f.PubSeq, f.PubAt, f.PubManifest = old.Seq, old.PubSeq, old.PubAt, old.PubManifest // this epoch's records go on rising
	}
	n.disk.files[req.ID] = f
}

// eventID is the hex id of a simulated event, as lease inputs carry it.
func eventID(id EventID) string { return fmt.Sprintf("%016x", uint64(id)) }

// stateURI names a checkpoint record (what a revocation's state_uri
// carries: the agent's BUD-10 URI of its manifest, whose "as" is its
// author): the record's id, its blob and its author's key.
func stateURI(rec *Event) string {
	return "sim:checkpoint:" + eventID(rec.ID) + ":" + rec.Body.(LeaseCheckpoint).Manifest + ":" + ProviderKey(rec.Author)
}

// stateURIBlob is the blob and the author a stateURI names (ok false for
// anything else).
func stateURIBlob(uri string) (blob, author string, ok bool) {
	parts := strings.Split(uri, ":")
	if len(parts) != 5 || parts[0] != "sim" || parts[1] != "checkpoint" {
		return "", "", false
	}
	return parts[3], parts[4], true
}
