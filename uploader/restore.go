package uploader

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"

	"provideragent/internal/atomicfile"
)

// Errors of downloaded blobs, so a restorer can tell a server that lacks a
// blob from one that serves wrong bytes. Both wrap ErrCorrupt.
var (
	// ErrTruncatedTile means a server returned fewer bytes than the
	// manifest gives the tile.
	ErrTruncatedTile = fmt.Errorf("truncated tile: %w", ErrCorrupt)
	// ErrHashMismatch means bytes whose sha256 is not the one asked for: a
	// tile, the manifest blob, or the reassembled file.
	ErrHashMismatch = fmt.Errorf("hash mismatch: %w", ErrCorrupt)
)

// Restore downloads every tile of m (GET <server>/<sha256>, trying servers in
// order), verifies each tile's hash and size, and writes the tiles to out in
// order. It verifies the whole file's sha256 at the end; on any error out may
// hold a prefix of the file (RestoreFile leaves nothing behind). A nil client
// means http.DefaultClient.
//
// A tile no server returned intact is an error wrapping ErrTileUnavailable
// and the reason: when some server returned wrong bytes, the first such
// error (ErrTruncatedTile or ErrHashMismatch, both ErrCorrupt), else the
// last server's. A file whose hash is wrong wraps ErrHashMismatch. Check
// ErrCorrupt before ErrTileUnavailable to tell a refusal from an absence.
func Restore(ctx context.Context, client *http.Client, m Manifest, servers []string, out io.Writer) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if len(servers) == 0 {
		return errors.New("restore: no servers")
	}
	if client == nil {
		client = http.DefaultClient
	}
	whole := sha256.New()
	for i, t := range m.Tiles {
		body, err := fetchAny(ctx, client, servers, t.SHA256, t.Size, t.Size, nil)
		if err != nil {
			return fmt.Errorf("restore tile %d (%s): %w", i, t.SHA256, err)
		}
		whole.Write(body)
		if _, err := out.Write(body); err != nil {
			return fmt.Errorf("restore tile %d: write: %w", i, err)
		}
	}
	if got := hex.EncodeToString(whole.Sum(nil)); got != m.SHA256 {
		return fmt.Errorf("restore: file sha256 %s, manifest says %s: %w", got, m.SHA256, ErrHashMismatch)
	}
	return nil
}

// RestoreFile is Restore into the file path, written whole or not at all:
// a temporary file beside it, synced and renamed over path once every
// hash checked out (mode 0600). A failed restore leaves path as it was and
// no temporary file.
func RestoreFile(ctx context.Context, client *http.Client, m Manifest, servers []string, path string) error {
	err := atomicfile.Write(path, func(w io.Writer) error { return Restore(ctx, client, m, servers, w) })
	if err != nil {
		return fmt.Errorf("restore to %s: %w", path, err)
	}
	return nil
}

// FetchManifest downloads the manifest blob sha256 from the first of
// servers that returns it intact (at most maxBytes; <= 0 means
// MaxTileSize), checks its hash and parses it with ParseManifest. It
// returns the manifest and its bytes. Failing servers are errors as in
// Restore (ErrTileUnavailable, and ErrHashMismatch when a server returned
// other bytes); a blob over maxBytes or that does not parse wraps
// ErrBadManifest.
func FetchManifest(ctx context.Context, client *http.Client, sha256 string, servers []string, maxBytes int64) (Manifest, []byte, error) {
	if !isSHA256Hex(sha256) {
		return Manifest{}, nil, fmt.Errorf("fetch manifest: sha256 %q: want 64 lowercase hex characters", truncate(sha256, 80))
	}
	if len(servers) == 0 {
		return Manifest{}, nil, fmt.Errorf("fetch manifest %s: no servers", sha256)
	}
	if client == nil {
		client = http.DefaultClient
	}
	if maxBytes <= 0 {
		maxBytes = MaxTileSize
	}
	b, err := fetchAny(ctx, client, servers, sha256, -1, maxBytes, nil)
	if err != nil {
		return Manifest{}, nil, fmt.Errorf("fetch manifest %s: %w", sha256, err)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return Manifest{}, nil, fmt.Errorf("fetch manifest %s: %w", sha256, err)
	}
	return m, b, nil
}

// BadCopy hears of a server that served wrong bytes for blob sha: err
// wraps ErrTruncatedTile or ErrHashMismatch (ErrCorrupt), or
// ErrBadManifest for more than the bound of a blob of unknown size.
type BadCopy func(server, sha string, err error)

// FetchBlob gets blob sha from the first of servers (GET <server>/<sha>,
// in order) that returns it intact: exactly size bytes when size >= 0,
// else at most maxBytes (<= 0: MaxTileSize), whose sha256 is sha. A blob
// no server returned intact is an error as in Restore. bad, when not nil,
// is called for every server that served wrong bytes, also when a later
// one then served a good copy. A nil client means http.DefaultClient.
func FetchBlob(ctx context.Context, client *http.Client, sha string, size, maxBytes int64, servers []string, bad BadCopy) ([]byte, error) {
	if !isSHA256Hex(sha) {
		return nil, fmt.Errorf("fetch blob: sha256 %q: want 64 lowercase hex characters", truncate(sha, 80))
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("fetch blob %s: no servers", sha)
	}
	if client == nil {
		client = http.DefaultClient
	}
	if maxBytes <= 0 {
		maxBytes = MaxTileSize
	}
	b, err := fetchAny(ctx, client, servers, sha, size, maxBytes, bad)
	if err != nil {
		return nil, fmt.Errorf("fetch blob %s: %w", sha, err)
	}
	return b, nil
}

// fetchAny gets blob sha from the first server that returns it intact,
// trying them in order, and tells bad (if any) of each server that served
// wrong bytes; see Restore for the error it returns otherwise.
func fetchAny(ctx context.Context, client *http.Client, servers []string, sha string, size, maxBytes int64, bad BadCopy) ([]byte, error) {
	var lastErr, corrupt error
	for _, srv := range servers {
		b, err := fetchBlob(ctx, client, srv, sha, size, maxBytes)
		if err == nil {
			return b, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrBadManifest) {
			if corrupt == nil {
				corrupt = err
			}
			if bad != nil {
				bad(ServerKey(srv), sha, err)
			}
		}
		lastErr = err
	}
	if corrupt != nil {
		lastErr = corrupt
	}
	return nil, fmt.Errorf("%w: %w", ErrTileUnavailable, lastErr)
}

// fetchBlob gets blob sha from one server: GET <server>/<sha>, 200 only,
// then checks its length (size >= 0: exactly size, shorter is
// ErrTruncatedTile; size < 0: at most maxBytes, longer is ErrBadManifest)
// and its hash (ErrHashMismatch).
func fetchBlob(ctx context.Context, client *http.Client, server, sha string, size, maxBytes int64) ([]byte, error) {
	url := ServerKey(server) + "/" + sha
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("get %s: status %d %s", url, resp.StatusCode, truncate(cleanReason(resp.Header.Get("X-Reason")), 200))
	}
	limit := maxBytes
	if size >= 0 {
		limit = size
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	switch n := int64(len(b)); {
	case size >= 0 && n < size:
		return nil, fmt.Errorf("get %s: %d bytes, manifest says %d: %w", url, n, size, ErrTruncatedTile)
	case size >= 0 && n > size:
		return nil, fmt.Errorf("get %s: more than the %d bytes the manifest says: %w", url, size, ErrHashMismatch)
	case size < 0 && n > maxBytes:
		return nil, fmt.Errorf("get %s: more than %d bytes: %w", url, maxBytes, ErrBadManifest)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != sha {
		return nil, fmt.Errorf("get %s: content sha256 %s: %w", url, hex.EncodeToString(sum[:]), ErrHashMismatch)
	}
	return b, nil
}
