package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/config"
	"provideragent/identity"
	"provideragent/internal/atomicfile"
	"provideragent/uploader"
)

func init() {
	register(command{
		name:    "tiles",
		summary: "checkpoint tiles: add a file, list, upload to Blossom, reset a given-up tile, restore",
		run:     tilesGroup.run,
	})
}

const tilesUsage = `provider-agent tiles manages checkpoint tiles in the agent's SQLite file and
moves them to and from Blossom servers (BUD-01/02).

Usage: provider-agent tiles [--config F | --data-dir D | --db PATH] <subcommand> [flags] [args]

Subcommands:
  add FILE --workload W     split FILE into tiles, store them as pending, write a manifest
  list [--status S]         list tiles (pending, uploaded, upload_giveup, trusted, rejected)
  upload --server URL       upload pending tiles, with bounded retries and per-tile budget
  reset ID                  move a given-up tile back to pending (recorded in the audit table)
  audit [--tile ID]         show the audit records (give-ups, resets)
  restore MANIFEST --out F  download, verify and reassemble a file from its manifest

Every subcommand but restore works on the agent's database and takes
--config, --data-dir and --db:
` + agentFilesHelp + `

Example:
  provider-agent tiles add ckpt.tar --workload job-7 --config /etc/provider-agent.toml
  provider-agent tiles upload --server https://blossom.example --config /etc/provider-agent.toml
  provider-agent tiles restore ckpt.tar.manifest.json --out restored.tar --server https://blossom.example

Run 'provider-agent tiles <subcommand> --help' for its flags.`

var tilesGroup = group{name: "tiles", usage: tilesUsage, subs: []sub{
	{"add", runTilesAdd}, {"list", runTilesList}, {"upload", runTilesUpload},
	{"reset", runTilesReset}, {"audit", runTilesAudit}, {"restore", runTilesRestore},
}}

// openTilesStore opens the agent's SQLite file and the tile store on it.
// Only create (tiles add) makes a missing database.
func openTilesStore(ctx context.Context, files *agentFiles, create bool) (*uploader.Store, func(), error) {
	var s *uploader.Store
	db, _, err := files.openDBWith(ctx, create, func(ctx context.Context, db *sql.DB) (err error) {
		s, err = uploader.NewStore(ctx, db, nil)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return s, func() { db.Close() }, nil
}

const tilesAddUsage = `provider-agent tiles add FILE --workload W splits FILE into fixed-size tiles,
stores every new tile as pending in the database (tiles the workload already
has are not stored twice) and writes a manifest listing the tile hashes in
order, the total size and the file's sha256. The manifest is what 'tiles
restore' (and a workload's state_uri) needs to rebuild the file. The
database (created if missing) is the running agent's, so its upload loop
picks the tiles up.

` + agentFilesHelp + `

Example:
  provider-agent tiles add ckpt.tar --workload job-7 --data-dir /var/lib/provider-agent
  provider-agent tiles add ckpt.tar --workload job-7 --config /etc/provider-agent.toml --tile-size 1048576`

func runTilesAdd(ctx context.Context, parent *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, files := subFlags("tiles add", tilesAddUsage, parent, stdout)
	workload := fs.String("workload", "", "workload id the tiles belong to (required)")
	tileSize := fs.Int("tile-size", uploader.DefaultTileSize, "tile size in bytes")
	manifestPath := fs.String("manifest", "", "where to write the manifest (default FILE.manifest.json)")
	pos, err := parseArgs(fs, args, 1, "one FILE")
	if err != nil {
		return err
	}
	if *workload == "" {
		return usagef("tiles add: --workload is required")
	}
	if *tileSize < 1 || *tileSize > uploader.MaxTileSize {
		return usagef("tiles add: --tile-size %d: want 1..%d", *tileSize, uploader.MaxTileSize)
	}
	file := pos[0]
	if *manifestPath == "" {
		*manifestPath = file + ".manifest.json"
	}
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("tiles add: %w", err)
	}
	defer f.Close()
	store, closeDB, err := openTilesStore(ctx, files, true)
	if err != nil {
		return fmt.Errorf("tiles add: %w", err)
	}
	defer closeDB()
	m, added, err := store.AddFile(ctx, *workload, f, *tileSize)
	if err != nil {
		return fmt.Errorf("tiles add: %w", err)
	}
	j, err := tilesJSON(m)
	if err != nil {
		return fmt.Errorf("tiles add: %w", err)
	}
	if err := atomicfile.Write(*manifestPath, func(w io.Writer) error { _, err := w.Write(j); return err }); err != nil {
		return fmt.Errorf("tiles add: write manifest: %w", err)
	}
	fmt.Fprintf(stdout, "added %s to workload %s: %d tiles (%d new), %d bytes, sha256 %s\nmanifest: %s\n",
		file, *workload, len(m.Tiles), added, m.Size, m.SHA256, *manifestPath)
	return nil
}

const tilesListUsage = `provider-agent tiles list prints the stored tiles with their status, upload
attempts and last rejection reason.

` + agentFilesHelp + `

Example:
  provider-agent tiles list --status upload_giveup --config /etc/provider-agent.toml`

func runTilesList(ctx context.Context, parent *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, files := subFlags("tiles list", tilesListUsage, parent, stdout)
	st := fs.String("status", "", "only tiles in this status: pending, uploaded, upload_giveup, trusted, rejected")
	workload := fs.String("workload", "", "only tiles of this workload")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	if *st != "" && !uploader.Status(*st).Valid() {
		return usagef("tiles list: --status %q: want one of pending, uploaded, upload_giveup, trusted, rejected", *st)
	}
	store, closeDB, err := openTilesStore(ctx, files, false)
	if err != nil {
		return fmt.Errorf("tiles list: %w", err)
	}
	defer closeDB()
	tiles, err := store.List(ctx, uploader.Filter{Workload: *workload, Status: uploader.Status(*st)})
	if err != nil {
		return fmt.Errorf("tiles list: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWORKLOAD\tSTATUS\tATTEMPTS\tSIZE\tSHA256\tLAST REJECTION")
	for _, t := range tiles {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\n", t.ID, t.Workload, t.Status, t.UploadAttempts, t.Size, t.SHA256, t.LastRejectionReason)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("tiles list: %w", err)
	}
	return nil
}

const tilesUploadUsage = `provider-agent tiles upload PUTs the pending tiles to the Blossom servers
(kind 24242 authorisation signed with --key), retrying partial batches in the
call (sleep min(2^n s, 60s)) and giving a tile up after its attempt budget.
Given-up tiles wait for 'tiles reset'. Exits 1 unless every tile got through.

The signing key is read from --key (a key file as written by 'provider-agent
keygen': hex or nsec, mode 0600), else from $PROVIDER_AGENT_KEY, else from
the agent's own key file (--key-file, agent.key_file, else
<data_dir>/identity.key), as 'provider-agent run' does. Only when that file
does not exist is an ephemeral key used (fine for open servers only).

` + agentFilesHelp + `

Example:
  provider-agent tiles upload --server https://a.example --server https://b.example --config /etc/provider-agent.toml
  provider-agent tiles upload --server https://a.example --db ./agent.db --key ./provider.nsec`

func runTilesUpload(ctx context.Context, parent *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, files := subFlags("tiles upload", tilesUploadUsage, parent, stdout)
	def := uploader.DefaultConfig()
	var servers stringList
	fs.Var(&servers, "server", "Blossom server base URL (repeat for several; required)")
	keyFile := fs.String("key", "", "key `file` holding the signing key, mode 0600 (default: the agent's key file)")
	workload := fs.String("workload", "", "only tiles of this workload")
	limit := fs.Int("limit", 0, "at most this many tiles per pass (0 = all pending)")
	noRetry := fs.Bool("no-retry", false, "bypass the retry decorator (uploader.disable_retry)")
	maxRetries := fs.Int("max-retries", def.MaxInCallRetries, "in-call retries of a partial batch")
	maxAttempts := fs.Int("max-tile-attempts", def.MaxPerTileAttempts, "per-tile attempt budget before upload_giveup")
	backoffCap := fs.Duration("backoff-cap", def.BackoffCap, "cap of the sleep between retries")
	concurrency := fs.Int("concurrency", def.Concurrency, "tiles uploaded at once")
	minReplicas := fs.Int("min-replicas", def.MinReplicas, "servers that must store a tile")
	timeout := fs.Duration("timeout", def.RequestTimeout, "timeout of one HTTP request")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	if len(servers) == 0 {
		return usagef("tiles upload: at least one --server is required")
	}
	cfg := def
	cfg.Servers = servers
	cfg.DisableRetry = *noRetry
	cfg.MaxInCallRetries = *maxRetries
	cfg.MaxPerTileAttempts = *maxAttempts
	cfg.BackoffCap = *backoffCap
	cfg.Concurrency = *concurrency
	cfg.MinReplicas = *minReplicas
	cfg.RequestTimeout = *timeout
	if err := cfg.Validate(); err != nil {
		return usagef("tiles upload: %v", err)
	}
	secret, err := loadTilesKey(files, *keyFile, stderr)
	if err != nil {
		return fmt.Errorf("tiles upload: %w", err)
	}
	store, closeDB, err := openTilesStore(ctx, files, false)
	if err != nil {
		return fmt.Errorf("tiles upload: %w", err)
	}
	defer closeDB()
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	up, err := uploader.BuildUploader(cfg, uploader.Deps{Store: store, SecretKey: secret, Logger: logger})
	if err != nil {
		return fmt.Errorf("tiles upload: %w", err)
	}
	rep, upErr := up.UploadPending(ctx, uploader.Request{Workload: *workload, Limit: *limit})
	if upErr != nil {
		// Not a verdict on the tiles (a server that cannot be reached, a
		// local store error): no outcome, only what got through, if anything.
		if rep.Accepted > 0 {
			fmt.Fprintf(stdout, "accepted before the error: %d tiles, %d bytes\n", rep.Accepted, rep.BytesUploaded)
		}
		if errors.Is(upErr, uploader.ErrServerUnreachable) {
			return fmt.Errorf("tiles upload: %w (the tiles stay pending; no upload attempt was counted)", upErr)
		}
		return fmt.Errorf("tiles upload: %w", upErr)
	}
	printTilesReport(stdout, rep)
	if rep.Outcome != uploader.OutcomeSuccess {
		pending, err := store.CountPending(ctx, *workload)
		if err != nil {
			return fmt.Errorf("tiles upload: %w", err)
		}
		return fmt.Errorf("tiles upload: outcome %s: %d tiles still pending, %d given up", rep.Outcome, pending, len(rep.GaveUp))
	}
	return nil
}

func printTilesReport(w io.Writer, rep uploader.Report) {
	fmt.Fprintf(w, "outcome: %s  accepted: %d  rejected: %d  retries: %d  bytes: %d\n",
		rep.Outcome, rep.Accepted, rep.Rejected, rep.RetryCount, rep.BytesUploaded)
	for _, t := range rep.Tiles {
		if t.Verdict == uploader.VerdictRejected {
			fmt.Fprintf(w, "  rejected tile %d (%s): %s\n", t.TileID, t.SHA256, t.Reason)
		}
	}
	for _, id := range rep.GaveUp {
		fmt.Fprintf(w, "  gave up tile %d: review it, then 'provider-agent tiles reset %d'\n", id, id)
	}
	if !rep.NextRetryAt.IsZero() {
		fmt.Fprintf(w, "next retry hint: %s\n", rep.NextRetryAt.UTC().Format(time.RFC3339))
	}
}

// loadTilesKey reads the signing key from the key file at path (the format
// 'provider-agent keygen' writes; mode 0600 required), else from
// $PROVIDER_AGENT_KEY, else from the agent's key file; only when that does
// not exist it makes an ephemeral one. Errors never contain the key.
func loadTilesKey(files *agentFiles, path string, stderr io.Writer) (string, error) {
	if path != "" {
		return config.LoadKeyFile(path)
	}
	if raw := os.Getenv("PROVIDER_AGENT_KEY"); strings.TrimSpace(raw) != "" {
		sk, err := identity.ParseSecretKey(raw)
		if err != nil {
			return "", fmt.Errorf("key from $PROVIDER_AGENT_KEY: %w", err)
		}
		return sk, nil
	}
	agentKey, err := files.keyFile()
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(agentKey); !errors.Is(err, os.ErrNotExist) {
		return config.LoadKeyFile(agentKey)
	}
	sk := nostr.GeneratePrivateKey()
	pub, _ := nostr.GetPublicKey(sk)
	fmt.Fprintf(stderr, "tiles upload: no --key, no $PROVIDER_AGENT_KEY and no agent key file at %s: using an ephemeral key (pubkey %s)\n", agentKey, pub)
	return sk, nil
}

const tilesResetUsage = `provider-agent tiles reset ID moves a tile from upload_giveup back to pending
after an operator has looked into it. The reset is recorded in the audit
table with --note. The attempt counter is kept, so the tile gets one more
upload; if that is rejected too it is given up again.

` + agentFilesHelp + `

Example:
  provider-agent tiles reset 42 --note "server quota raised" --config /etc/provider-agent.toml`

func runTilesReset(ctx context.Context, parent *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, files := subFlags("tiles reset", tilesResetUsage, parent, stdout)
	note := fs.String("note", "", "why the tile is reset (kept in the audit record)")
	pos, err := parseArgs(fs, args, 1, "one tile ID")
	if err != nil {
		return err
	}
	id, err := strconv.ParseInt(pos[0], 10, 64)
	if err != nil || id <= 0 {
		return usagef("tiles reset: tile ID %q: want a positive integer", pos[0])
	}
	store, closeDB, err := openTilesStore(ctx, files, false)
	if err != nil {
		return fmt.Errorf("tiles reset: %w", err)
	}
	defer closeDB()
	if err := store.Reset(ctx, id, *note); err != nil {
		return fmt.Errorf("tiles reset: %w", err)
	}
	t, err := store.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("tiles reset: %w", err)
	}
	fmt.Fprintf(stdout, "tile %d: upload_giveup -> pending (upload_attempts %d kept; audited)\n", id, t.UploadAttempts)
	return nil
}

const tilesAuditUsage = `provider-agent tiles audit prints the append-only audit records: tiles given
up after their attempt budget and operator resets.

` + agentFilesHelp + `

Example:
  provider-agent tiles audit --tile 42 --config /etc/provider-agent.toml`

func runTilesAudit(ctx context.Context, parent *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, files := subFlags("tiles audit", tilesAuditUsage, parent, stdout)
	tile := fs.Int64("tile", 0, "only records of this tile ID")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	store, closeDB, err := openTilesStore(ctx, files, false)
	if err != nil {
		return fmt.Errorf("tiles audit: %w", err)
	}
	defer closeDB()
	recs, err := store.Audit(ctx, *tile)
	if err != nil {
		return fmt.Errorf("tiles audit: %w", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tKIND\tTILE\tDETAIL")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", r.At.Format(time.RFC3339), r.Kind, r.TileID, r.Detail)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("tiles audit: %w", err)
	}
	return nil
}

const tilesRestoreUsage = `provider-agent tiles restore MANIFEST --out FILE downloads every tile the
manifest lists (GET <server>/<sha256>, trying the servers in order), checks
each tile's hash and the whole file's sha256, and writes FILE atomically
(a temporary file renamed into place only when everything matched).

Example:
  provider-agent tiles restore ckpt.tar.manifest.json --out ckpt.tar --server https://blossom.example`

// maxTilesManifestBytes bounds the manifest file read by restore.
const maxTilesManifestBytes = 256 << 20

func runTilesRestore(ctx context.Context, _ *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tiles restore", tilesRestoreUsage, stdout)
	out := fs.String("out", "", "file to write (required)")
	force := fs.Bool("force", false, "replace --out if it exists")
	var servers stringList
	fs.Var(&servers, "server", "Blossom server base URL (repeat for several; required)")
	timeout := fs.Duration("timeout", uploader.DefaultConfig().RequestTimeout, "timeout of one HTTP request")
	pos, err := parseArgs(fs, args, 1, "one MANIFEST")
	if err != nil {
		return err
	}
	if *out == "" {
		return usagef("tiles restore: --out is required")
	}
	if len(servers) == 0 {
		return usagef("tiles restore: at least one --server is required")
	}
	cfg := uploader.DefaultConfig()
	cfg.Servers = servers
	if err := cfg.Validate(); err != nil {
		return usagef("tiles restore: %v", err)
	}
	if _, err := os.Stat(*out); err == nil && !*force {
		return fmt.Errorf("tiles restore: %s exists (use --force to replace it)", *out)
	}
	mf, err := os.Open(pos[0])
	if err != nil {
		return fmt.Errorf("tiles restore: %w", err)
	}
	data, err := io.ReadAll(io.LimitReader(mf, maxTilesManifestBytes+1))
	mf.Close()
	if err != nil {
		return fmt.Errorf("tiles restore: read manifest: %w", err)
	}
	if len(data) > maxTilesManifestBytes {
		return fmt.Errorf("tiles restore: manifest larger than %d bytes", maxTilesManifestBytes)
	}
	m, err := uploader.ParseManifest(data)
	if err != nil {
		return fmt.Errorf("tiles restore: %w", err)
	}
	client := &http.Client{Timeout: *timeout}
	if err := atomicfile.Write(*out, func(w io.Writer) error { return uploader.Restore(ctx, client, m, servers, w) }); err != nil {
		return fmt.Errorf("tiles restore: %w", err)
	}
	fmt.Fprintf(stdout, "restored %s: %d tiles, %d bytes, sha256 %s verified\n", *out, len(m.Tiles), m.Size, m.SHA256)
	return nil
}

// tilesJSON encodes v as indented JSON with a trailing newline.
func tilesJSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
