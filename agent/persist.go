package agent

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"time"

	"provideragent/agent/store"
	"provideragent/lease"
)

// Migrate applies the agent's migrations (all owned by agent/store,
// including the operator command queue) to db.
func Migrate(ctx context.Context, db *sql.DB) error {
	if _, err := store.Open(ctx, db); err != nil {
		return fmt.Errorf("migrate agent tables: %w", err)
	}
	return nil
}

// kvMachine is the store key of the machine snapshot without its workloads
// (relay tables, clock, sync flags); cursorKey is the relay label under
// which the subscription cursor (one for all relays) is stored.
const (
	kvMachine = "lease_machine"
	cursorKey = "*"
)

// workloadRow is one marshalled workload snapshot; hash identifies its
// JSON (saveMeta skips a row whose hash was saved).
type workloadRow struct {
	store.WorkloadRow
	hash uint64
}

// saveSeed seeds the hashes that detect unchanged workload rows.
var saveSeed = maphash.MakeSeed()

func rowOf(w *lease.WorkloadSnapshot) (workloadRow, error) {
	b, err := json.Marshal(w)
	if err != nil {
		return workloadRow{}, fmt.Errorf("save workload %s: %w", w.Spec.ID, err)
	}
	spec, err := json.Marshal(w.Spec)
	if err != nil {
		return workloadRow{}, fmt.Errorf("save workload %s: %w", w.Spec.ID, err)
	}
	return workloadRow{
		WorkloadRow: store.WorkloadRow{ID: w.Spec.ID, State: string(w.State), Epoch: w.Epoch, Spec: spec, Snapshot: b},
		hash:        maphash.Bytes(saveSeed, b),
	}, nil
}

// dirtySet holds the workloads whose state an input may have changed
// without an effect (a holder's heartbeat refreshing a standby's claim
// times, a claim adding a rival), for saveMeta: it encodes these, not the
// whole table (machine goroutine only).
type dirtySet map[string]struct{}

func (d *dirtySet) add(id string) {
	if *d == nil {
		*d = dirtySet{}
	}
	(*d)[id] = struct{}{}
}

func (d dirtySet) remove(id string) { delete(d, id) }

// storeRows is the store's part of rows.
func storeRows(rows []workloadRow) []store.WorkloadRow {
	out := make([]store.WorkloadRow, len(rows))
	for i, r := range rows {
		out[i] = r.WorkloadRow
	}
	return out
}

// loadSnapshot reads the persisted machine; ok is false on a fresh database
// (no machine metadata and no workload row). Workload rows without the
// metadata (written by a step that committed before the first save of an
// agent older than this one) come back with an empty Snapshot.Self: the
// caller restores them with empty relay tables, since every committed
// workload row must be restored (a crash in the first seconds of a run
// once forgot the workloads it held).
func loadSnapshot(ctx context.Context, st *store.Store) (lease.Snapshot, bool, error) {
	var snap lease.Snapshot
	meta, err := st.KV(ctx, kvMachine)
	switch {
	case errors.Is(err, store.ErrNotFound):
		meta = nil
	case err != nil:
		return snap, false, fmt.Errorf("load machine: %w", err)
	}
	if meta != nil {
		if err := json.Unmarshal(meta, &snap); err != nil {
			return snap, false, fmt.Errorf("load machine: %w", err)
		}
	}
	ws, err := loadWorkloads(ctx, st)
	if err != nil {
		return snap, false, err
	}
	if meta == nil && len(ws) == 0 {
		return snap, false, nil
	}
	if meta == nil {
		snap.Version = lease.SnapshotVersion
	}
	snap.Workloads = ws
	return snap, true, nil
}

// LoadWorkloads reads every persisted workload snapshot (used by
// `provider-agent status` when the agent is down).
func LoadWorkloads(ctx context.Context, db *sql.DB) ([]lease.WorkloadSnapshot, error) {
	st, err := store.Open(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("load workloads: %w", err)
	}
	return loadWorkloads(ctx, st)
}

func loadWorkloads(ctx context.Context, st *store.Store) ([]lease.WorkloadSnapshot, error) {
	rows, err := st.LoadAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("load workloads: %w", err)
	}
	out := make([]lease.WorkloadSnapshot, 0, len(rows))
	for _, r := range rows {
		var w lease.WorkloadSnapshot
		if err := json.Unmarshal(r.Snapshot, &w); err != nil {
			return nil, fmt.Errorf("load workload %s: %w", r.ID, err)
		}
		out = append(out, w)
	}
	return out, nil
}

// loadCursor reads the persisted subscription cursor and heals one that
// lies in the future (an older agent let a rejected future-dated event set
// it, after which every subscription asked only for events after it): it
// is clamped to now, in the database too, with a warning.
func (a *Agent) loadCursor(ctx context.Context) (int64, error) {
	v, err := a.st.Cursor(ctx, cursorKey)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("load cursor: %w", err)
	}
	now := a.now().Unix()
	if v <= now {
		return v, nil
	}
	got, err := a.st.ClampCursor(ctx, nil, cursorKey, now)
	if err != nil {
		return 0, fmt.Errorf("heal cursor: %w", err)
	}
	a.logger.Warn("persisted subscription cursor was in the future; clamped to now",
		"cursor", time.Unix(v, 0).UTC(), "now", time.Unix(now, 0).UTC())
	return got, nil
}

// Command is one operator request queued in the database for the agent
// (`provider-agent workloads grant|release`). A running agent applies
// pending commands within a second; a stopped one applies them at start.
type Command struct {
	Seq       int64
	Action    string // store.ActionGrant or store.ActionRelease
	Workload  string
	Spec      *lease.Spec // grant only
	CreatedAt time.Time
	AppliedAt time.Time
	Result    string
}

// QueueGrant queues a local operator lease grant for the agent.
func QueueGrant(ctx context.Context, db *sql.DB, spec lease.Spec, now time.Time) (int64, error) {
	st, err := store.Open(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("queue grant: %w", err)
	}
	return queueGrant(ctx, st, nil, spec, now)
}

// queueGrant queues a grant inside tx (nil: its own transaction).
func queueGrant(ctx context.Context, st *store.Store, tx *sql.Tx, spec lease.Spec, now time.Time) (int64, error) {
	if err := spec.Validate(); err != nil {
		return 0, fmt.Errorf("queue grant: %w", err)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return 0, fmt.Errorf("queue grant: %w", err)
	}
	return st.QueueCommand(ctx, tx, store.ActionGrant, spec.ID, string(b), now)
}

// QueueRelease queues the release (stop and forget) of a workload.
func QueueRelease(ctx context.Context, db *sql.DB, workload string, now time.Time) (int64, error) {
	st, err := store.Open(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("queue release: %w", err)
	}
	return st.QueueCommand(ctx, nil, store.ActionRelease, workload, "", now)
}

// ListCommands returns queued commands, newest last (pendingOnly: those not
// applied yet).
func ListCommands(ctx context.Context, db *sql.DB, pendingOnly bool) ([]Command, error) {
	st, err := store.Open(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("list commands: %w", err)
	}
	return listCommands(ctx, st, pendingOnly, 0)
}

// listCommands reads commands (limit <= 0: all) with their specs decoded.
func listCommands(ctx context.Context, st *store.Store, pendingOnly bool, limit int) ([]Command, error) {
	rows, err := st.Commands(ctx, pendingOnly, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Command, len(rows))
	for i, r := range rows {
		out[i] = Command{Seq: r.Seq, Action: r.Action, Workload: r.Workload, CreatedAt: r.CreatedAt, AppliedAt: r.AppliedAt, Result: r.Result}
		if r.Spec != "" {
			var s lease.Spec
			if err := json.Unmarshal([]byte(r.Spec), &s); err != nil {
				return nil, fmt.Errorf("command %d: %w", r.Seq, err)
			}
			out[i].Spec = &s
		}
	}
	return out, nil
}

// outRow is one event to queue in the outbox with a machine step (a
// revocation, withdrawn marker or announcement: lease.DurabilityOf Outbox).
type outRow struct {
	bundle []byte
	key    string // idempotency key, e.g. one revocation per (workload, epoch)
	// claimTime names the workload whose claim created_at (claimTimes) the
	// commit saves with the row: set for withdrawn markers.
	claimTime string
}

// unpersisted is what the machine did in steps whose commit failed (disk
// full, I/O error, or the write lock held elsewhere past CommitWait), kept
// until a commit succeeds (machine goroutine only). Their stops, state
// changes and reports were performed at once (lease.BeforeCommit); what
// needs the persisted state waits here:
//   - ids: workloads whose rows the next commit writes (their current
//     snapshots, which include these steps);
//   - rows: the outbox events (revocations, withdrawn markers,
//     announcements) to queue in that commit;
//   - effs: the steps' effects in order. They are not replayed as they were:
//     after the commit lease.Machine.AfterHeld derives what to perform from
//     the machine's state then (the outbox effects as queued, starts only of
//     workloads still held running, outstanding claim-step and respawn
//     requests), so a start a later step stopped or superseded never runs;
//   - toks: cursor tokens of the steps' inputs, finished only after that
//     commit (the subscription cursor never passes an input whose step is
//     not persisted).
type unpersisted struct {
	ids     []string
	seen    map[string]bool
	rows    []outRow
	keys    map[string]bool
	effs    []lease.Effect
	toks    []store.Token
	steps   int       // steps held
	since   time.Time // first failed commit of this episode
	retryAt time.Time // next commit attempt without new effects
}

func (u *unpersisted) empty() bool { return u.steps == 0 }

// add folds one step (its effects in order, outbox rows and cursor tokens)
// into the held steps.
func (u *unpersisted) add(effs []lease.Effect, rows []outRow, toks []store.Token) {
	if len(effs) == 0 && len(rows) == 0 && len(toks) == 0 {
		return
	}
	if u.seen == nil {
		u.seen, u.keys = map[string]bool{}, map[string]bool{}
	}
	u.steps++
	for _, e := range effs {
		if id := e.Workload(); !u.seen[id] {
			u.seen[id] = true
			u.ids = append(u.ids, id)
		}
	}
	u.effs = append(u.effs, effs...)
	for _, r := range rows {
		if !u.keys[r.key] {
			u.keys[r.key] = true
			u.rows = append(u.rows, r)
		}
	}
	u.toks = append(u.toks, toks...)
}

// effects are the effects to perform once the held steps are committed
// (lease.Machine.AfterHeld).
func (u *unpersisted) effects(m *lease.Machine) []lease.Effect { return m.AfterHeld(u.effs) }
