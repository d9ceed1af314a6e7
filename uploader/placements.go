package uploader

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"provideragent/internal/sqlitedb"
)

// ServerKey is the form in which a Blossom server's base URL is stored and
// compared: without trailing slashes, as the uploader sends requests.
func ServerKey(server string) string { return strings.TrimRight(server, "/") }

// RecordPlacements records that each of servers stored blob sha of
// workload and confirmed its hash (now: the store's clock), in one
// transaction; a placement recorded before gets the new time.
func (s *Store) RecordPlacements(ctx context.Context, workload, sha string, servers []string) error {
	if len(servers) == 0 {
		return nil
	}
	now := s.nowMillis()
	err := sqlitedb.InTx(ctx, s.db, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO blob_placements (workload, sha256, server, placed_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (workload, sha256, server) DO UPDATE SET placed_at = excluded.placed_at`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, srv := range servers {
			if _, err := stmt.ExecContext(ctx, workload, sha, ServerKey(srv), now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record placements of blob %s of workload %s: %w", sha, workload, err)
	}
	return nil
}

// Placed returns the smallest number of the given servers that any of the
// given blobs of workload is placed on: 0 when one of them is on none of
// those servers, len(servers) (after removing repeats) when all are on all.
// Servers compare as ServerKey; placements on other servers do not count.
// A checkpoint is stored on K servers once Placed over its manifest and
// tiles is at least K.
func (s *Store) Placed(ctx context.Context, workload string, shas []string, servers []string) (int, error) {
	if len(shas) == 0 {
		return 0, errors.New("placed: no blobs given")
	}
	if len(servers) == 0 {
		return 0, nil
	}
	keys := make([]string, len(servers))
	for i, srv := range servers {
		keys[i] = ServerKey(srv)
	}
	shaJSON, err := json.Marshal(shas)
	if err != nil {
		return 0, fmt.Errorf("placed: %w", err)
	}
	srvJSON, err := json.Marshal(keys)
	if err != nil {
		return 0, fmt.Errorf("placed: %w", err)
	}
	var least int
	err = s.db.QueryRowContext(ctx, `SELECT MIN(n) FROM (
			SELECT (SELECT COUNT(*) FROM blob_placements p
				WHERE p.workload = ? AND p.sha256 = b.value AND p.server IN (SELECT value FROM json_each(?))) AS n
			FROM (SELECT DISTINCT value FROM json_each(?)) b)`,
		workload, string(srvJSON), string(shaJSON)).Scan(&least)
	if err != nil {
		return 0, fmt.Errorf("placed: %d blobs of workload %s on %d servers: %w", len(shas), workload, len(servers), err)
	}
	return least, nil
}

// Placement is one server that acknowledged one blob of a workload.
type Placement struct {
	SHA256   string
	Server   string // as ServerKey
	PlacedAt time.Time
}

// Placements lists the placements of workload's blobs, by blob then server.
func (s *Store) Placements(ctx context.Context, workload string) ([]Placement, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT sha256, server, placed_at FROM blob_placements WHERE workload = ? ORDER BY sha256, server`, workload)
	if err != nil {
		return nil, fmt.Errorf("placements of workload %s: %w", workload, err)
	}
	defer rows.Close()
	var out []Placement
	for rows.Next() {
		var p Placement
		var at int64
		if err := rows.Scan(&p.SHA256, &p.Server, &at); err != nil {
			return nil, fmt.Errorf("placements of workload %s: %w", workload, err)
		}
		p.PlacedAt = time.UnixMilli(at).UTC()
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("placements of workload %s: %w", workload, err)
	}
	return out, nil
}
