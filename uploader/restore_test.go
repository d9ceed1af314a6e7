package uploader_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"provideragent/internal/devblossom"
	"provideragent/internal/devblossom/devblossomtest"
	"provideragent/uploader"
	"provideragent/uploader/uploadertest"
)

// devBlossomDir starts a dev-blossom server keeping its blobs as files in
// a directory it returns.
func devBlossomDir(t *testing.T) (*devblossom.Server, string) {
	t.Helper()
	dir := t.TempDir()
	return devblossomtest.Start(t, devblossom.Options{Dir: dir}), dir
}

// uploadFile tiles data (tileSize bytes a tile) for workload and uploads
// every pending tile to servers; it returns the manifest.
func uploadFile(t *testing.T, f *blossomFixture, workload string, data []byte, tileSize int) uploader.Manifest {
	t.Helper()
	ctx := context.Background()
	m, _, err := f.store.AddFile(ctx, workload, bytes.NewReader(data), tileSize)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := f.up.UploadPending(ctx, uploader.Request{Workload: workload}); err != nil || rep.Outcome != uploader.OutcomeSuccess {
		t.Fatalf("UploadPending = %+v, %v, want success", rep, err)
	}
	return m
}

// TestRestoreTellsTruncatedFromCorrupted: a tile cut short on the server's
// disk is ErrTruncatedTile, one with a flipped byte ErrHashMismatch; both
// are ErrCorrupt (and the tile unavailable), neither is the other, and a
// restore into a file that fails leaves no file and no temporary behind.
func TestRestoreTellsTruncatedFromCorrupted(t *testing.T) {
	ctx := context.Background()
	srv, blobs := devBlossomDir(t)
	f := newBlossomFixture(t, []string{srv.URL()}, func(c *uploader.Config) { c.DisableRetry = true })
	data := randomBytes(t, 3*1000+17)
	m := uploadFile(t, f, "job-7", data, 1000)
	out := filepath.Join(t.TempDir(), "state.ckpt")

	for _, tc := range []struct {
		name    string
		tile    int
		damage  func(b []byte) []byte
		want    error
		notWant error
	}{
		{"truncated", 1, func(b []byte) []byte { return b[:len(b)-10] }, uploader.ErrTruncatedTile, uploader.ErrHashMismatch},
		{"corrupted", 2, func(b []byte) []byte { b[5] ^= 0x01; return b }, uploader.ErrHashMismatch, uploader.ErrTruncatedTile},
		{"longer", 0, func(b []byte) []byte { return append(b, 'x') }, uploader.ErrHashMismatch, uploader.ErrTruncatedTile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(blobs, m.Tiles[tc.tile].SHA256)
			orig, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(bytes.Clone(orig)), 0o600); err != nil {
				t.Fatal(err)
			}
			defer os.WriteFile(path, orig, 0o600)

			err = uploader.RestoreFile(ctx, nil, m, []string{srv.URL()}, out)
			if !errors.Is(err, tc.want) || errors.Is(err, tc.notWant) || !errors.Is(err, uploader.ErrCorrupt) ||
				!errors.Is(err, uploader.ErrTileUnavailable) || !strings.Contains(err.Error(), m.Tiles[tc.tile].SHA256) {
				t.Fatalf("RestoreFile(%s tile %d) = %v, want %v (ErrCorrupt) naming the tile, not %v", tc.name, tc.tile, err, tc.want, tc.notWant)
			}
			if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 0 {
				t.Fatalf("a failed restore left %v behind, want nothing", entries)
			}
		})
	}

	// Undamaged again: the file appears whole, replacing what was there.
	if err := os.WriteFile(out, []byte("older state"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := uploader.RestoreFile(ctx, nil, m, []string{srv.URL()}, out); err != nil {
		t.Fatalf("RestoreFile = %v", err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatalf("restored file has %d bytes differing from the %d uploaded", len(got), len(data))
	}
	// A failed restore leaves an existing file as it was.
	path := filepath.Join(blobs, m.Tiles[0].SHA256)
	if err := os.Truncate(path, 1); err != nil {
		t.Fatal(err)
	}
	if err := uploader.RestoreFile(ctx, nil, m, []string{srv.URL()}, out); !errors.Is(err, uploader.ErrTruncatedTile) {
		t.Fatalf("RestoreFile(truncated) = %v, want ErrTruncatedTile", err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatalf("a failed restore changed the existing file")
	}
}

// TestRestoreUnavailableIsNotCorrupt: a tile no server has is unavailable,
// never corrupt; one server's wrong bytes do not hide another's good ones.
func TestRestoreUnavailableIsNotCorrupt(t *testing.T) {
	ctx := context.Background()
	a, b := uploadertest.NewServer(t), uploadertest.NewServer(t)
	f := newBlossomFixture(t, []string{a.URL}, func(c *uploader.Config) { c.DisableRetry = true })
	m := uploadFile(t, f, "job-7", randomBytes(t, 2500), 1000)
	var out bytes.Buffer
	err := uploader.Restore(ctx, nil, m, []string{b.URL}, &out)
	if !errors.Is(err, uploader.ErrTileUnavailable) || errors.Is(err, uploader.ErrCorrupt) {
		t.Fatalf("Restore(server without the tiles) = %v, want ErrTileUnavailable and not ErrCorrupt", err)
	}
	a.Corrupt(m.Tiles[0].SHA256)
	err = uploader.Restore(ctx, nil, m, []string{a.URL, b.URL}, &out)
	if !errors.Is(err, uploader.ErrHashMismatch) {
		t.Fatalf("Restore(one corrupt, one without) = %v, want ErrHashMismatch to win over absence", err)
	}
}

// TestFetchManifest: the manifest blob is fetched from the first server
// that returns it intact and parsed; wrong bytes are ErrHashMismatch, a
// blob that is no manifest or is over the bound ErrBadManifest, a blob no
// server has ErrTileUnavailable alone.
func TestFetchManifest(t *testing.T) {
	ctx := context.Background()
	good, bad := uploadertest.NewServer(t), uploadertest.NewServer(t)
	f := newBlossomFixture(t, []string{good.URL, bad.URL}, func(c *uploader.Config) { c.DisableRetry = true })
	m := uploadFile(t, f, "job-7", randomBytes(t, 2500), 1000)
	mj, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	_ = uploadFile(t, f, "job-7", mj, uploader.DefaultTileSize) // the manifest is one tile
	msha := sha(mj)
	notManifest := randomBytes(t, 300)
	_ = uploadFile(t, f, "job-7", notManifest, uploader.DefaultTileSize)
	bad.Corrupt(msha)

	got, raw, err := uploader.FetchManifest(ctx, nil, msha, []string{bad.URL, good.URL}, 0)
	if err != nil || !bytes.Equal(raw, mj) || got.SHA256 != m.SHA256 || len(got.Tiles) != len(m.Tiles) {
		t.Fatalf("FetchManifest(corrupt server first) = %+v, %v, want the manifest from the good server", got, err)
	}
	for _, tc := range []struct {
		name    string
		sha     string
		servers []string
		max     int64
		want    error
		notWant error
	}{
		{"wrong-hash blob", msha, []string{bad.URL}, 0, uploader.ErrHashMismatch, uploader.ErrBadManifest},
		{"nowhere", strings.Repeat("0", 64), []string{good.URL, bad.URL}, 0, uploader.ErrTileUnavailable, uploader.ErrCorrupt},
		{"not a manifest", sha(notManifest), []string{good.URL}, 0, uploader.ErrBadManifest, uploader.ErrCorrupt},
		{"over the bound", msha, []string{good.URL}, int64(len(mj) - 1), uploader.ErrBadManifest, uploader.ErrCorrupt},
	} {
		_, _, err := uploader.FetchManifest(ctx, nil, tc.sha, tc.servers, tc.max)
		if !errors.Is(err, tc.want) || errors.Is(err, tc.notWant) || !strings.Contains(err.Error(), tc.sha) {
			t.Errorf("FetchManifest(%s) = %v, want %v naming the blob, not %v", tc.name, err, tc.want, tc.notWant)
		}
	}
	if _, _, err := uploader.FetchManifest(ctx, nil, "ABC", []string{good.URL}, 0); err == nil || !strings.Contains(err.Error(), `"ABC"`) {
		t.Errorf("FetchManifest(bad sha) = %v, want an error naming it", err)
	}
	if _, _, err := uploader.FetchManifest(ctx, nil, msha, nil, 0); err == nil {
		t.Errorf("FetchManifest(no servers) = nil error, want one")
	}
}

// TestRestoreErrorNamesTheRightServer: with no corrupt copy the error is
// the last server's; with several corrupt copies it is the first one's
// (Restore's documented choice, so an operator looks where it says).
func TestRestoreErrorNamesTheRightServer(t *testing.T) {
	ctx := context.Background()
	a, b := uploadertest.NewServer(t), uploadertest.NewServer(t)
	empty1, empty2 := uploadertest.NewServer(t), uploadertest.NewServer(t)
	f := newBlossomFixture(t, []string{a.URL, b.URL}, func(c *uploader.Config) { c.DisableRetry = true })
	m := uploadFile(t, f, "job-7", randomBytes(t, 1500), 1000)
	var out bytes.Buffer
	err := uploader.Restore(ctx, nil, m, []string{empty1.URL, empty2.URL}, &out)
	if err == nil || !strings.Contains(err.Error(), empty2.URL+"/") || strings.Contains(err.Error(), empty1.URL+"/") {
		t.Errorf("Restore(two servers without the tile) = %v, want the last server's error (%s)", err, empty2.URL)
	}
	a.Corrupt(m.Tiles[0].SHA256)
	b.Corrupt(m.Tiles[0].SHA256)
	err = uploader.Restore(ctx, nil, m, []string{a.URL, empty1.URL, b.URL}, &out)
	if !errors.Is(err, uploader.ErrHashMismatch) || !strings.Contains(err.Error(), a.URL+"/") || strings.Contains(err.Error(), b.URL+"/") {
		t.Errorf("Restore(corrupt, absent, corrupt) = %v, want the first corrupt server's error (%s)", err, a.URL)
	}
}
