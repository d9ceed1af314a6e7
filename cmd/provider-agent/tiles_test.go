package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nbd-wtf/go-nostr"
	"github.com/nbd-wtf/go-nostr/nip19"

	"provideragent/uploader/uploadertest"
)

// tilesRun runs provider-agent with args and returns exit code, stdout, stderr.
func tilesRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runMain(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestTilesHelp(t *testing.T) {
	if code, out, _ := tilesRun(t, "tiles", "--help"); code != 0 || !strings.Contains(out, "Example:") {
		t.Errorf("tiles --help = %d, %q, want 0 with an example", code, out)
	}
	for _, sub := range []string{"add", "list", "upload", "reset", "audit", "restore"} {
		code, out, _ := tilesRun(t, "tiles", sub, "--help")
		if code != 0 || !strings.Contains(out, "Example:") || !strings.Contains(out, "provider-agent tiles "+sub) {
			t.Errorf("tiles %s --help = %d, %q, want 0 with an example", sub, code, out)
		}
	}
	if code, out, _ := tilesRun(t, "help", "tiles"); code != 0 || !strings.Contains(out, "Subcommands:") {
		t.Errorf("help tiles = %d, want 0 with the subcommand list", code)
	}
}

func TestTilesUsageErrors(t *testing.T) {
	db := filepath.Join(t.TempDir(), "a.db")
	for _, args := range [][]string{
		{"tiles"},
		{"tiles", "nope"},
		{"tiles", "add", "--db", db, "somefile"}, // no --workload
		{"tiles", "add", "--db", db, "--workload", "w"}, // no FILE
		{"tiles", "add", "f", "--workload", "w", "--tile-size", "0"},
		{"tiles", "list", "--db", db, "--status", "bogus"},
		{"tiles", "upload", "--db", db}, // no --server
		{"tiles", "upload", "--db", db, "--server", "ftp://x"},
		{"tiles", "reset", "--db", db, "abc"},
		{"tiles", "reset", "--db", db},
		{"tiles", "restore", "m.json", "--server", "http://x"}, // no --out
		{"tiles", "list", "--bogus-flag"},
	} {
		if code, _, _ := tilesRun(t, args...); code != 2 {
			t.Errorf("%v: exit = %d, want 2", args, code)
		}
	}
}

func TestTilesAddUploadRestore(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "agent.db")
	srv := uploadertest.NewServer(t)
	data := make([]byte, 50_000)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "ckpt.bin")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// Flags after the positional argument work too.
	code, out, errb := tilesRun(t, "tiles", "add", file, "--workload", "job-7", "--tile-size", "8192", "--db", db)
	if code != 0 || !strings.Contains(out, "7 tiles (7 new)") {
		t.Fatalf("tiles add = %d, %q, %q, want 0 and 7 new tiles", code, out, errb)
	}
	manifest := file + ".manifest.json"
	if _, err := os.Stat(manifest); err != nil {
		t.Fatalf("manifest not written: %v", err)
	}
	code, out, _ = tilesRun(t, "tiles", "list", "--db", db, "--status", "pending")
	if code != 0 || strings.Count(out, "job-7") != 7 {
		t.Fatalf("tiles list --status pending = %d, %q, want 7 rows", code, out)
	}
	keyFile := filepath.Join(dir, "id.key")
	nsec, _ := nip19.EncodePrivateKey(nostr.GeneratePrivateKey())
	if err := os.WriteFile(keyFile, []byte(nsec+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errb = tilesRun(t, "tiles", "upload", "--db", db, "--server", srv.URL, "--key", keyFile)
	if code != 0 || !strings.Contains(out, "outcome: success") || !strings.Contains(out, "accepted: 7") {
		t.Fatalf("tiles upload = %d, %q, %q, want success with 7 accepted", code, out, errb)
	}
	if strings.Contains(out+errb, nsec) {
		t.Fatal("tiles upload printed the secret key")
	}
	code, out, _ = tilesRun(t, "tiles", "list", "--db", db, "--status", "uploaded")
	if code != 0 || strings.Count(out, "job-7") != 7 {
		t.Fatalf("tiles list --status uploaded = %d, %q, want 7 rows", code, out)
	}
	restored := filepath.Join(dir, "restored.bin")
	code, out, errb = tilesRun(t, "tiles", "restore", manifest, "--out", restored, "--server", srv.URL)
	if code != 0 {
		t.Fatalf("tiles restore = %d, %q, %q, want 0", code, out, errb)
	}
	got, err := os.ReadFile(restored)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("restored file differs from the original (%v)", err)
	}
	// Refuses to overwrite without --force; a bad key file fails without
	// echoing the key.
	if code, _, _ := tilesRun(t, "tiles", "restore", manifest, "--out", restored, "--server", srv.URL); code != 1 {
		t.Errorf("tiles restore onto an existing file = %d, want 1", code)
	}
	if code, _, _ := tilesRun(t, "tiles", "restore", manifest, "--out", restored, "--server", srv.URL, "--force"); code != 0 {
		t.Errorf("tiles restore --force = %d, want 0", code)
	}
	bad := filepath.Join(dir, "bad.key")
	os.WriteFile(bad, []byte("nsec1notakey"), 0o600)
	code, out, errb = tilesRun(t, "tiles", "upload", "--db", db, "--server", srv.URL, "--key", bad)
	if code != 1 || strings.Contains(out+errb, "nsec1notakey") {
		t.Errorf("tiles upload --key bad = %d, %q, want 1 without the key", code, errb)
	}
}

func TestTilesGiveupAndReset(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "agent.db")
	srv := uploadertest.NewServer(t)
	file := filepath.Join(dir, "ckpt.bin")
	data := []byte(strings.Repeat("a", 100) + strings.Repeat("b", 100) + strings.Repeat("c", 100))
	os.WriteFile(file, data, 0o600)
	if code, _, errb := tilesRun(t, "tiles", "add", "--db", db, "--workload", "w", "--tile-size", "100", file); code != 0 {
		t.Fatalf("tiles add = %d, %s", code, errb)
	}
	poison := sha256Hex([]byte(strings.Repeat("b", 100)))
	srv.Reject(poison, 1, 422, "tile failed ingest validation")
	t.Setenv("PROVIDER_AGENT_KEY", "")
	code, out, _ := tilesRun(t, "tiles", "upload", "--db", db, "--server", srv.URL, "--max-retries", "0", "--max-tile-attempts", "1")
	if code != 1 || !strings.Contains(out, "outcome: partial") || !strings.Contains(out, "gave up tile 2") ||
		!strings.Contains(out, "tile failed ingest validation") {
		t.Fatalf("tiles upload = %d, %q, want exit 1, partial, tile 2 given up with the server's reason", code, out)
	}
	code, out, _ = tilesRun(t, "tiles", "list", "--db", db, "--status", "upload_giveup")
	if code != 0 || !strings.Contains(out, poison) {
		t.Fatalf("tiles list --status upload_giveup = %d, %q, want the poison tile", code, out)
	}
	if code, _, _ := tilesRun(t, "tiles", "reset", "--db", db, "1"); code != 1 {
		t.Errorf("tiles reset of an uploaded tile = %d, want 1", code)
	}
	code, out, _ = tilesRun(t, "tiles", "reset", "2", "--db", db, "--note", "validator fixed")
	if code != 0 || !strings.Contains(out, "upload_giveup -> pending") {
		t.Fatalf("tiles reset = %d, %q, want 0", code, out)
	}
	code, out, _ = tilesRun(t, "tiles", "audit", "--db", db)
	if code != 0 || !strings.Contains(out, "upload.giveup") || !strings.Contains(out, "operator.reset") || !strings.Contains(out, "validator fixed") {
		t.Fatalf("tiles audit = %d, %q, want the give-up and the reset", code, out)
	}
	code, out, _ = tilesRun(t, "tiles", "upload", "--db", db, "--server", srv.URL)
	if code != 0 || !strings.Contains(out, "accepted: 1") {
		t.Fatalf("tiles upload after reset = %d, %q, want success with the reset tile", code, out)
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// The agent-file flags may come before the subcommand, as for courier and
// workloads: the subcommand falls back to them.
func TestTilesTakesAgentFilesBeforeTheSubcommand(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ckpt.bin")
	if err := os.WriteFile(file, []byte("checkpoint"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errb := tilesRun(t, "tiles", "--data-dir", dir, "add", file, "--workload", "w"); code != 0 {
		t.Fatalf("tiles --data-dir D add = %d, %q %q, want 0", code, out, errb)
	}
	if _, err := os.Stat(filepath.Join(dir, "provider-agent.db")); err != nil {
		t.Fatalf("tiles --data-dir D add did not use D's database: %v", err)
	}
	if code, out, errb := tilesRun(t, "tiles", "--data-dir", dir, "list"); code != 0 || !strings.Contains(out, "pending") {
		t.Fatalf("tiles --data-dir D list = %d, %q %q, want the pending tile", code, out, errb)
	}
}
