package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"provideragent/internal/localrelay"
)

func init() {
	register(command{
		name:    "dev-relay",
		summary: "run a local Nostr relay (in-memory) for trying the agent and any Nostr client",
		run:     runDevRelay,
	})
}

const devRelayUsage = `provider-agent dev-relay runs a local Nostr relay (khatru, in-memory store) so
that operators can try the agent and any Nostr client without installing a
relay. Events live in memory only and are lost when it stops (Ctrl-C).

Example:
  provider-agent dev-relay --listen 127.0.0.1:7447
  # then point the agent's relays at ws://127.0.0.1:7447`

func runDevRelay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dev-relay", devRelayUsage, stdout)
	listen := fs.String("listen", "127.0.0.1:7447", "host:port to listen on (port 0 picks a free port)")
	verbose := fs.Bool("v", false, "log every relay action at debug level to stderr")
	admin := fs.Bool("admin", false, "enable the test endpoints "+localrelay.InjectPath+" and "+localrelay.StatsPath)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("dev-relay: unexpected argument %q", fs.Arg(0))
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	opts := localrelay.Options{
		Admin:  *admin,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	r := localrelay.New(opts)
	if err := r.Start(ctx, *listen); err != nil {
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return fmt.Errorf("dev-relay: %w", err)
	}
	fmt.Fprintf(stdout, "dev-relay: listening on %s (Ctrl-C to stop)\n", r.URL())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Shutdown(sctx); err != nil {
		return fmt.Errorf("dev-relay: %w", err)
	}
	fmt.Fprintf(stdout, "dev-relay: stopped (%d events were held)\n", r.Stats().Events)
	return nil
}
