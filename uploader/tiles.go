package uploader

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"provideragent/internal/sqlitedb"
)

// Tiling limits.
const (
	// DefaultTileSize is the tile size used when none is configured (1 MiB).
	DefaultTileSize = 1 << 20
	// MaxTileSize bounds the tile size (64 MiB): a tile is held in memory
	// while it is uploaded or downloaded.
	MaxTileSize = 64 << 20
	// MaxManifestTiles bounds the number of tiles a manifest may list.
	MaxManifestTiles = 1 << 20
	// ManifestVersion is the manifest format written by Split.
	ManifestVersion = 1
)

// Tiling errors.
var (
	// ErrBadManifest means a manifest failed validation.
	ErrBadManifest = errors.New("bad manifest")
	// ErrBadTileSize means a tile size is outside [1, MaxTileSize].
	ErrBadTileSize = errors.New("bad tile size")
	// ErrTileUnavailable means no server returned a tile (or a manifest
	// blob) with the right hash.
	ErrTileUnavailable = errors.New("tile unavailable")
	// ErrCorrupt means downloaded or reassembled data does not match what
	// the manifest says (ErrTruncatedTile, ErrHashMismatch wrap it).
	ErrCorrupt = errors.New("restored data does not match manifest")
)

// ManifestTile is one entry of a manifest, in file order.
type ManifestTile struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Manifest lists the tiles of one file in order so the file can be restored
// from any Blossom server that holds them (the workload's state_uri points at
// it).
type Manifest struct {
	Version  int            `json:"version"`
	Workload string         `json:"workload"`
	Size     int64          `json:"size"`   // total bytes
	SHA256   string         `json:"sha256"` // of the whole file
	TileSize int            `json:"tile_size"`
	Tiles    []ManifestTile `json:"tiles"`
}

// Split reads r to the end, cutting it into tiles of tileSize bytes (the last
// may be shorter), and calls fn with each tile's content and hash in order.
// fn must not keep the content slice. It returns the manifest of the file.
func Split(r io.Reader, workload string, tileSize int, fn func(content []byte, sha string) error) (Manifest, error) {
	if tileSize <= 0 || tileSize > MaxTileSize {
		return Manifest{}, fmt.Errorf("split: tile size %d: %w", tileSize, ErrBadTileSize)
	}
	m := Manifest{Version: ManifestVersion, Workload: workload, TileSize: tileSize, Tiles: []ManifestTile{}}
	whole := sha256.New()
	buf := make([]byte, tileSize)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			sum := sha256.Sum256(buf[:n])
			sha := hex.EncodeToString(sum[:])
			whole.Write(buf[:n])
			m.Size += int64(n)
			m.Tiles = append(m.Tiles, ManifestTile{SHA256: sha, Size: int64(n)})
			if len(m.Tiles) > MaxManifestTiles {
				return Manifest{}, fmt.Errorf("split: more than %d tiles: %w", MaxManifestTiles, ErrBadTileSize)
			}
			if err := fn(buf[:n], sha); err != nil {
				return Manifest{}, fmt.Errorf("split: tile %d: %w", len(m.Tiles)-1, err)
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return Manifest{}, fmt.Errorf("split: read: %w", err)
		}
	}
	m.SHA256 = hex.EncodeToString(whole.Sum(nil))
	return m, nil
}

// addBatchBytes bounds the tile bytes AddFile writes per transaction, so a
// large file never holds the database's write lock for long.
const addBatchBytes = 8 << 20

// AddFile splits r into tiles of tileSize bytes and stores them as pending
// tiles of workload, committing about every 8 MiB so that other writers of
// the database (the running agent) are not blocked for the whole file. Tiles
// the workload already has (same sha256) are not stored twice, so an uploaded
// tile is never re-sent and re-running AddFile after an error is safe. It
// returns the manifest and how many new tiles were stored.
func (s *Store) AddFile(ctx context.Context, workload string, r io.Reader, tileSize int) (Manifest, int, error) {
	if workload == "" {
		return Manifest{}, 0, errors.New("add file: empty workload")
	}
	type row struct {
		sha     string
		content []byte
	}
	var batch []row
	batchBytes := 0
	added := 0
	now := s.nowMillis()
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := sqlitedb.InTx(ctx, s.db, func(tx *sql.Tx) error {
			stmt, err := tx.PrepareContext(ctx, `INSERT INTO tiles (workload, sha256, size, content, status, created_at, updated_at)
				VALUES (?, ?, ?, ?, 'pending', ?, ?) ON CONFLICT (workload, sha256) DO NOTHING`)
			if err != nil {
				return err
			}
			defer stmt.Close()
			n := 0
			for _, rw := range batch {
				res, err := stmt.ExecContext(ctx, workload, rw.sha, len(rw.content), rw.content, now, now)
				if err != nil {
					return err
				}
				k, err := res.RowsAffected()
				if err != nil {
					return err
				}
				n += int(k)
			}
			added += n
			return nil
		})
		batch, batchBytes = batch[:0], 0
		return err
	}
	m, err := Split(r, workload, tileSize, func(content []byte, sha string) error {
		batch = append(batch, row{sha: sha, content: bytes.Clone(content)})
		batchBytes += len(content)
		if batchBytes >= addBatchBytes {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return Manifest{}, added, fmt.Errorf("add file to workload %s: %w", workload, err)
	}
	return m, added, nil
}

// ParseManifest decodes and validates a manifest (untrusted input): known
// version, lowercase hex hashes, tile sizes in [1, tile_size], at most
// MaxManifestTiles tiles, and sizes that add up to the total.
func ParseManifest(data []byte) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("parse manifest: %w: %w", ErrBadManifest, err)
	}
	if dec.More() {
		return Manifest{}, fmt.Errorf("parse manifest: trailing data: %w", ErrBadManifest)
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, fmt.Errorf("parse manifest: %w", err)
	}
	return m, nil
}

// Validate checks the manifest's fields; errors wrap ErrBadManifest.
func (m Manifest) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrBadManifest)
	}
	if m.Version != ManifestVersion {
		return bad("version %d: want %d", m.Version, ManifestVersion)
	}
	if m.TileSize <= 0 || m.TileSize > MaxTileSize {
		return bad("tile_size %d: want 1..%d", m.TileSize, MaxTileSize)
	}
	if !isSHA256Hex(m.SHA256) {
		return bad("sha256 %q: want 64 lowercase hex characters", truncate(m.SHA256, 80))
	}
	if len(m.Tiles) > MaxManifestTiles {
		return bad("%d tiles: at most %d", len(m.Tiles), MaxManifestTiles)
	}
	var total int64
	for i, t := range m.Tiles {
		if !isSHA256Hex(t.SHA256) {
			return bad("tile %d sha256 %q: want 64 lowercase hex characters", i, truncate(t.SHA256, 80))
		}
		if t.Size <= 0 || t.Size > int64(m.TileSize) {
			return bad("tile %d size %d: want 1..%d", i, t.Size, m.TileSize)
		}
		total += t.Size
	}
	if total != m.Size {
		return bad("size %d: tiles add up to %d", m.Size, total)
	}
	return nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
