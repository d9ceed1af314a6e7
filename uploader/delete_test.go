package uploader_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"provideragent/identity"
	"provideragent/uploader"
)

// TestDeleterDeletesOwnBlobs (BUD-12 against dev-blossom): a blob the
// deleter's key uploaded is gone after Delete (GET 404), Delete of a blob
// the server does not hold succeeds, another key's delete is refused
// (ErrDeleteRefused), and a blob two keys uploaded stays until both
// deleted it.
func TestDeleterDeletesOwnBlobs(t *testing.T) {
	ctx := context.Background()
	srv, dir := devBlossomDir(t)
	upload := func(secret string, data []byte) string {
		t.Helper()
		store := newStore(t, newFakeClock())
		cfg := uploader.DefaultConfig()
		cfg.Servers, cfg.DisableRetry = []string{srv.URL()}, true
		up, err := uploader.BuildUploader(cfg, uploader.Deps{Store: store, SecretKey: secret})
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := store.AddFile(ctx, "w", bytes.NewReader(data), len(data))
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := up.UploadPending(ctx, uploader.Request{}); err != nil || rep.Outcome != uploader.OutcomeSuccess {
			t.Fatalf("upload = %+v, %v", rep, err)
		}
		return m.Tiles[0].SHA256
	}
	aSecret, bSecret := newKey(t), newKey(t)
	a, _ := identity.NewKeys(aSecret)
	b, _ := identity.NewKeys(bSecret)
	da, db := uploader.Deleter{Keys: a}, uploader.Deleter{Keys: b}

	mine := upload(aSecret, []byte("a's superseded tile"))
	if err := db.Delete(ctx, srv.URL(), mine); !errors.Is(err, uploader.ErrDeleteRefused) || !srv.Has(mine) {
		t.Errorf("another key's Delete = %v (held %v), want ErrDeleteRefused and the blob kept", err, srv.Has(mine))
	}
	if err := da.Delete(ctx, srv.URL()+"/", mine); err != nil || srv.Has(mine) {
		t.Errorf("Delete = %v (held %v), want the blob gone", err, srv.Has(mine))
	}
	if _, err := os.Stat(filepath.Join(dir, mine)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted blob's file: %v, want it removed from the server's directory", err)
	}
	if err := da.Delete(ctx, srv.URL(), mine); err != nil {
		t.Errorf("Delete of a blob no longer held = %v, want nil", err)
	}
	shared := upload(aSecret, []byte("a tile both uploaded"))
	if again := upload(bSecret, []byte("a tile both uploaded")); again != shared {
		t.Fatal("the same bytes, two hashes")
	}
	if err := da.Delete(ctx, srv.URL(), shared); err != nil || !srv.Has(shared) {
		t.Errorf("Delete by one of two uploaders = %v (held %v), want the blob kept for the other", err, srv.Has(shared))
	}
	if err := db.Delete(ctx, srv.URL(), shared); err != nil || srv.Has(shared) {
		t.Errorf("Delete by the last uploader = %v (held %v), want it gone", err, srv.Has(shared))
	}
	if err := da.Delete(ctx, "http://127.0.0.1:1", mine); err == nil || errors.Is(err, uploader.ErrDeleteRefused) {
		t.Errorf("Delete on an unreachable server = %v, want an error worth retrying", err)
	}
}
