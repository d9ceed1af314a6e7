package agent

// The driver's database in the agent (dbStore): one SQLite transaction per
// commit, and the agent's instances of the driver's generic types. The
// events a step's outbox effects queue, the performing of effects and what
// an operator is told of commits are in perform.go.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"time"

	"provideragent/agentdb"
	"provideragent/courier"
	"provideragent/driver"
	"provideragent/internal/sqlitedb"
	"provideragent/lease"
)

// claimKVPrefix prefixes the store key holding a workload's last claim
// created_at (unix seconds, decimal); see driver's claim times.
const claimKVPrefix = "claim_created_at:"

// dbStore is the driver's Store over the agent's SQLite file: workload
// rows, the machine's metadata and claim times in agentdb's tables, the
// outbox rows in the courier's, and the subscription cursor, all in one
// transaction per commit.
type dbStore struct {
	db     *sql.DB
	st     *agentdb.Store
	outbox *courier.Courier
	// saved is the hash of each workload's last committed row, to skip
	// writing a row equal to it (the driver's periodic save hands every
	// row an input touched).
	saved map[string]uint64
}

var _ driver.Store[[]byte, commitExtra] = (*dbStore)(nil)

// commitExtra is a step's own rows (driver.Step.Extra, driver.Batch.Extra):
// the agent marks operator commands applied with it, in the step's
// transaction.
type commitExtra func(ctx context.Context, tx *sql.Tx) error

// The agent's instances of the driver's types: an outbox row carries a
// signed Nostr event as JSON, and a step's own rows are a commitExtra.
type (
	agentShell = driver.Shell[[]byte, commitExtra]
	agentTurn  = driver.Turn[[]byte, commitExtra]
	agentStep  = driver.Step[[]byte, commitExtra]
)

func (s *dbStore) Load(ctx context.Context) (driver.Loaded, error) {
	var l driver.Loaded
	meta, err := s.st.KV(ctx, kvMachine)
	switch {
	case errors.Is(err, agentdb.ErrNotFound):
	case err != nil:
		return l, fmt.Errorf("load machine: %w", err)
	default:
		l.Meta = &lease.Snapshot{}
		if err := json.Unmarshal(meta, l.Meta); err != nil {
			return l, fmt.Errorf("load machine: %w", err)
		}
	}
	if l.Workloads, err = loadWorkloads(ctx, s.st); err != nil {
		return l, err
	}
	return l, nil
}

func (s *dbStore) LastClaimTime(ctx context.Context, id string, wait time.Duration) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	v, err := s.st.KV(ctx, claimKVPrefix+id)
	switch {
	case errors.Is(err, agentdb.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	}
	return strconv.ParseInt(string(v), 10, 64)
}

func (s *dbStore) Commit(ctx context.Context, b *driver.Batch[[]byte, commitExtra], wait time.Duration) error {
	step := agentdb.Step{Deleted: b.Deleted}
	hashes := make([]uint64, 0, len(b.Workloads))
	for i := range b.Workloads {
		r, h, err := rowOf(&b.Workloads[i])
		if err != nil {
			return err
		}
		if s.saved[r.ID] == h {
			continue // unchanged since its last commit
		}
		step.Workloads = append(step.Workloads, r)
		hashes = append(hashes, h)
	}
	if b.Meta != nil || len(b.ClaimTimes) > 0 {
		step.KV = make(map[string][]byte, len(b.ClaimTimes)+1)
		if b.Meta != nil {
			meta, err := json.Marshal(b.Meta)
			if err != nil {
				return fmt.Errorf("save machine: %w", err)
			}
			step.KV[kvMachine] = meta
		}
		for id, at := range b.ClaimTimes {
			var v []byte // 0: released, delete the key
			if at != 0 {
				v = []byte(strconv.FormatInt(at, 10))
			}
			step.KV[claimKVPrefix+id] = v
		}
	}
	if b.Cursor != nil {
		step.Cursors = map[string]int64{cursorKey: *b.Cursor}
	}
	err := sqlitedb.InTxWait(ctx, s.db, wait, func(tx *sql.Tx) error {
		if err := s.st.SaveStep(ctx, tx, step); err != nil {
			return fmt.Errorf("save step: %w", err)
		}
		for _, r := range b.Outbox {
			if _, err := s.outbox.SendTx(ctx, tx, r.Payload, "agent", courier.SendOptions{IdempotencyKey: r.Key, Destination: courier.DestinationNostr}); err != nil &&
				!errors.Is(err, courier.ErrIdempotencyConflict) {
				return fmt.Errorf("queue %s: %w", r.Key, err)
			}
		}
		if b.Extra != nil {
			return b.Extra(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if s.saved == nil {
		s.saved = map[string]uint64{}
	}
	for i, r := range step.Workloads {
		s.saved[r.ID] = hashes[i]
	}
	for _, id := range b.Deleted {
		delete(s.saved, id)
	}
	return nil
}

// saveSeed seeds the hashes that detect unchanged workload rows.
var saveSeed = maphash.MakeSeed()

// rowOf encodes one workload's row, and the hash of its snapshot's JSON.
func rowOf(w *lease.WorkloadSnapshot) (agentdb.WorkloadRow, uint64, error) {
	b, err := json.Marshal(w)
	if err != nil {
		return agentdb.WorkloadRow{}, 0, fmt.Errorf("save workload %s: %w", w.Spec.ID, err)
	}
	spec, err := json.Marshal(w.Spec)
	if err != nil {
		return agentdb.WorkloadRow{}, 0, fmt.Errorf("save workload %s: %w", w.Spec.ID, err)
	}
	return agentdb.WorkloadRow{ID: w.Spec.ID, State: string(w.State), Epoch: w.Epoch, Spec: spec, Snapshot: b}, maphash.Bytes(saveSeed, b), nil
}
