package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"provideragent/identity"
	"provideragent/internal/devblossom"
)

func init() {
	register(command{
		name:    "dev-blossom",
		summary: "run a local Blossom server (in memory or a directory) for trying checkpoint uploads",
		run:     runDevBlossom,
	})
}

const devBlossomUsage = `provider-agent dev-blossom runs a local Blossom server (BUD-01/02) so that
'provider-agent tiles upload' and 'tiles restore' (and the agent's own
checkpoint uploads, uploader.servers) can be tried without a third-party
server. It serves PUT /upload (with a signed kind 24242 authorisation),
GET and HEAD /<sha256>, GET /list/<pubkey> and DELETE /<sha256> (by an
uploader of the blob), and nothing else: it is not a relay and never
fetches anything. Blobs are kept in memory and lost when it stops, unless
--dir keeps them as files named by their sha256 (served again after a
restart). It is a development tool: it has no TLS and does not rate-limit;
keep it on 127.0.0.1 or a network you trust.

Example:
  provider-agent dev-blossom --listen 127.0.0.1:7448 --dir ./blobs
  provider-agent tiles add ckpt.tar --workload job-7 --data-dir ./data
  provider-agent tiles upload --server http://127.0.0.1:7448 --data-dir ./data
  provider-agent tiles restore ckpt.tar.manifest.json --out restored.tar --server http://127.0.0.1:7448`

func runDevBlossom(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dev-blossom", devBlossomUsage, stdout)
	listen := fs.String("listen", "127.0.0.1:7448", "host:port to listen on (port 0 picks a free port)")
	dir := fs.String("dir", "", "keep blobs as files in this `directory` (created 0700; default: in memory)")
	var allow stringList
	fs.Var(&allow, "allow", "accept uploads only from this public `key` (hex or npub; repeat; default: any key)")
	maxBlob := fs.Int64("max-blob-bytes", devblossom.DefaultMaxBlobBytes, "largest blob accepted (413 above)")
	maxTotal := fs.Int64("max-total-bytes", devblossom.DefaultMaxTotalBytes, "most bytes held in all (507 above)")
	verbose := fs.Bool("v", false, "log every stored blob at INFO to stderr (refusals are always logged)")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	if *maxBlob <= 0 || *maxTotal <= 0 {
		return usagef("dev-blossom: --max-blob-bytes and --max-total-bytes must be positive")
	}
	keys := make([]string, 0, len(allow))
	for _, k := range allow {
		hex, err := identity.ParsePublicKey(k)
		if err != nil {
			return usagef("dev-blossom: --allow %q: want a public key as 64 hex characters or npub", k)
		}
		keys = append(keys, hex)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	s, err := devblossom.New(devblossom.Options{
		Dir: *dir, Allow: keys, MaxBlobBytes: *maxBlob, MaxTotalBytes: *maxTotal,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		return err
	}
	if err := s.Start(ctx, *listen); err != nil {
		return err
	}
	where := "in memory (lost when it stops)"
	if *dir != "" {
		where = "in " + *dir
	}
	st := s.Stats()
	fmt.Fprintf(stdout, "dev-blossom: serving on %s, blobs %s, %d blobs held (Ctrl-C to stop)\n", s.URL(), where, st.Blobs)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		return err
	}
	st = s.Stats()
	fmt.Fprintf(stdout, "dev-blossom: stopped (%d blobs, %d bytes held)\n", st.Blobs, st.Bytes)
	return nil
}
