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

With --strfry it behaves as strfry with its default configuration: events of
at most 65,536 bytes ("invalid: event too large: N"), frames of at most
131,072, 200 subscriptions per connection ("ERROR: too many concurrent
REQs"), filter items of at most 255 bytes, every CLOSED and NOTICE wrapped
in "ERROR: ", and NIP-11 advertising max_message_length 131072,
max_subscriptions 200 and max_limit 500. With --require-auth it asks for
NIP-42 AUTH and checks the AUTH relay tag against --service-url (default:
its own address), as strfry checks relay.auth.serviceUrl.

Example:
  provider-agent dev-relay --listen 127.0.0.1:7447
  # then point the agent's relays at ws://127.0.0.1:7447
  provider-agent dev-relay --listen 127.0.0.1:7777 --strfry --require-auth`

func runDevRelay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dev-relay", devRelayUsage, stdout)
	listen := fs.String("listen", "127.0.0.1:7447", "host:port to listen on (port 0 picks a free port)")
	verbose := fs.Bool("v", false, "log every relay action at debug level to stderr")
	admin := fs.Bool("admin", false, "enable the test endpoints "+localrelay.InjectPath+" and "+localrelay.StatsPath)
	strfry := fs.Bool("strfry", false, "behave as strfry with its default limits and message forms")
	requireAuth := fs.Bool("require-auth", false, "require NIP-42 AUTH for REQ and EVENT")
	serviceURL := fs.String("service-url", "", "public URL that AUTH's relay tag must name (default: the relay's own address with --strfry, the Host header otherwise)")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	opts := localrelay.Options{
		Admin:       *admin,
		Strfry:      *strfry,
		RequireAuth: *requireAuth,
		ServiceURL:  *serviceURL,
		Logger:      slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
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
