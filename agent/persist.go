package agent

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"provideragent/agentdb"
	"provideragent/lease"
)

// Migrate applies the agent's migrations (all owned by agentdb,
// including the operator command queue) to db.
func Migrate(ctx context.Context, db *sql.DB) error {
	if _, err := agentdb.Open(ctx, db); err != nil {
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

// dirtySet is a set of workload ids (machine goroutine only).
type dirtySet map[string]struct{}

func (d *dirtySet) add(id string) {
	if *d == nil {
		*d = dirtySet{}
	}
	(*d)[id] = struct{}{}
}

func (d dirtySet) remove(id string) { delete(d, id) }

// LoadWorkloads reads every persisted workload snapshot (used by
// `provider-agent status` when the agent is down).
func LoadWorkloads(ctx context.Context, db *sql.DB) ([]lease.WorkloadSnapshot, error) {
	st, err := agentdb.Open(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("load workloads: %w", err)
	}
	return loadWorkloads(ctx, st)
}

func loadWorkloads(ctx context.Context, st *agentdb.Store) ([]lease.WorkloadSnapshot, error) {
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
	v, err := a.data.tables.Cursor(ctx, cursorKey)
	if errors.Is(err, agentdb.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("load cursor: %w", err)
	}
	now := a.now().Unix()
	if v <= now {
		return v, nil
	}
	got, err := a.data.tables.ClampCursor(ctx, nil, cursorKey, now)
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
	Action    string // agentdb.ActionGrant or agentdb.ActionRelease
	Workload  string
	Spec      *lease.Spec // grant only
	CreatedAt time.Time
	AppliedAt time.Time
	Result    string
}

// QueueGrant queues a local operator lease grant for the agent.
func QueueGrant(ctx context.Context, db *sql.DB, spec lease.Spec, now time.Time) (int64, error) {
	st, err := agentdb.Open(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("queue grant: %w", err)
	}
	return queueGrant(ctx, st, nil, spec, now)
}

// queueGrant queues a grant inside tx (nil: its own transaction).
func queueGrant(ctx context.Context, st *agentdb.Store, tx *sql.Tx, spec lease.Spec, now time.Time) (int64, error) {
	if err := spec.Validate(); err != nil {
		return 0, fmt.Errorf("queue grant: %w", err)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return 0, fmt.Errorf("queue grant: %w", err)
	}
	return st.QueueCommand(ctx, tx, agentdb.ActionGrant, spec.ID, string(b), now)
}

// QueueRelease queues the release (stop and forget) of a workload.
func QueueRelease(ctx context.Context, db *sql.DB, workload string, now time.Time) (int64, error) {
	st, err := agentdb.Open(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("queue release: %w", err)
	}
	return st.QueueCommand(ctx, nil, agentdb.ActionRelease, workload, "", now)
}

// ListCommands returns queued commands, newest last (pendingOnly: those not
// applied yet).
func ListCommands(ctx context.Context, db *sql.DB, pendingOnly bool) ([]Command, error) {
	st, err := agentdb.Open(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("list commands: %w", err)
	}
	return listCommands(ctx, st, pendingOnly, 0)
}

// listCommands reads commands (limit <= 0: all) with their specs decoded.
func listCommands(ctx context.Context, st *agentdb.Store, pendingOnly bool, limit int) ([]Command, error) {
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
