package uploader

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"provideragent/internal/sqlitedb"
)

// PruneUploaded deletes the uploaded tiles of workload whose sha256 is not
// in keep, with their placements, and returns how many tiles went: a
// durable workload keeps only the blobs of the checkpoints it may still
// name (the servers keep theirs). Pending and given-up tiles stay; a later
// checkpoint that needs a pruned tile stores and uploads it again.
func (s *Store) PruneUploaded(ctx context.Context, workload string, keep []string) (int64, error) {
	if keep == nil {
		keep = []string{}
	}
	k, err := json.Marshal(keep)
	if err != nil {
		return 0, fmt.Errorf("prune tiles of workload %s: %w", workload, err)
	}
	var n int64
	err = sqlitedb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM tiles WHERE workload = ? AND status = 'uploaded'
			AND sha256 NOT IN (SELECT value FROM json_each(?))`, workload, string(k))
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM blob_placements WHERE workload = ?
			AND sha256 NOT IN (SELECT value FROM json_each(?))
			AND sha256 NOT IN (SELECT sha256 FROM tiles WHERE workload = ?)`, workload, string(k), workload)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune tiles of workload %s: %w", workload, err)
	}
	return n, nil
}
