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
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/agent"
	"provideragent/courier"
	"provideragent/internal/atomicfile"
	"provideragent/relay"
)

func init() {
	register(command{
		name:    "courier",
		summary: "operate the durable outbox: send, list, show, resend, flush, dlq",
		run:     courierGroup.run,
	})
}

const courierUsage = `provider-agent courier [--config F | --data-dir D | --db PATH] <subcommand> [flags] [args]

Operates the durable outbox (store-and-forward with retry and a dead-letter
queue) kept in the agent's SQLite file.

Every receipt has a destination: nostr (a signed Nostr event the agent
publishes to its relays: its revocations, claim withdrawals and promotion
announcements) or http (a bundle POSTed to an upstream URL). A receipt is
delivered only to a forwarder of its destination: flush --to URL and
dlq replay --to URL deliver http receipts and refuse nostr ones, naming
them (exit 1). Nostr receipts are re-sent by the running agent ('courier
resend ID' makes one due now), or, while the agent is stopped, by
flush --relays, which publishes them to the agent's relays with its key.

Subcommands:
  send FILE --sender S --destination http|nostr [--key K]
                                   store FILE as a bundle; prints its receipt
  list [--state S] [--destination D]
                                   list receipts (pending, acknowledged, dead)
  show ID                          one receipt with destination, size and last error
  resend ID                        back to pending, attempts reset, due now
  flush --to URL                   POST every due http receipt once
  flush --relays                   publish every due nostr receipt once (agent stopped)
  dlq list                         list dead-lettered receipts
  dlq replay --to URL|--relays [--rate R]
                                   retry every dead receipt of that destination
  dlq drop ID                      delete one dead receipt
  dlq export [--out FILE]          the DLQ as JSON [{receipt, failed_at, attempts}]

Every subcommand takes --config, --data-dir, --db (given before or after the
subcommand) and --help.

` + agentFilesHelp + `

Example:
  provider-agent courier --config /etc/provider-agent.toml send order.json --sender billing --destination http
  provider-agent courier flush --data-dir /var/lib/provider-agent --to https://upstream.example/receipts`

var courierGroup = group{name: "courier", usage: courierUsage, subs: []sub{
	{"send", runCourierSend}, {"list", runCourierList}, {"show", runCourierShow},
	{"resend", runCourierResend}, {"flush", runCourierFlush}, {"dlq", courierDLQGroup.dispatch},
}}

var courierDLQGroup = group{name: "courier dlq", usage: courierDLQUsage, subs: []sub{
	{"list", runCourierDLQList}, {"replay", runCourierReplay}, {"drop", runCourierDrop}, {"export", runCourierExport},
}}

// openCourier opens the database and the courier on it, configured as the
// agent's outbox (the config's [courier] section). Only send may create a
// new database; the other subcommands refuse a missing file.
func openCourier(ctx context.Context, files *agentFiles, create bool, stderr io.Writer) (*courier.Courier, func(), error) {
	cfg, err := files.config()
	if err != nil {
		return nil, nil, err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var c *courier.Courier
	db, _, err := files.openDBWith(ctx, create, func(ctx context.Context, db *sql.DB) (err error) {
		c, err = courier.Open(ctx, db, cfg.CourierConfig(), courier.Deps{Logger: logger})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return c, func() { c.Close(); db.Close() }, nil
}

func parseCourierID(cmd, s string) (courier.ID, error) {
	id, err := courier.ParseID(s)
	if err != nil {
		return 0, usagef("%s: receipt id %q: want 16 hex digits as printed by 'courier list'", cmd, s)
	}
	return id, nil
}

const courierSendUsage = `provider-agent courier send FILE --sender S --destination http|nostr [--key K]
stores the contents of FILE as a bundle in the outbox, for the destination
given, and prints its receipt id and BLAKE3 hash. The bundle is on disk when
the command returns. A nostr bundle must be one signed Nostr event (JSON);
the running agent publishes it to its relays (or 'courier flush --relays'
while it is stopped). An http bundle is POSTed by 'courier flush --to URL'.
With --key, sending again with the same key prints the first receipt
instead of storing a second copy. The database (created if missing) is the
running agent's, so its outbox delivers the bundle.

` + agentFilesHelp + `

Example:
  provider-agent courier send revocation.json --sender operator --destination nostr --key rev-job-7-2 --data-dir /var/lib/provider-agent
  provider-agent courier --config /etc/provider-agent.toml send order.json --sender billing --destination http`

func runCourierSend(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := subFlags("courier send", courierSendUsage, files, stdout)
	sender := fs.String("sender", "", "sender account (required; visible ASCII)")
	key := fs.String("key", "", "idempotency key (optional)")
	dest := fs.String("destination", "", "where the bundle goes (required): nostr (a signed Nostr event for the agent's relays) or http (POSTed by 'courier flush --to URL')")
	pos, err := parseArgs(fs, args, 1, "one FILE")
	if err != nil {
		return err
	}
	if *sender == "" {
		return usagef("courier send: --sender is required")
	}
	if *dest == "" {
		return usagef("courier send: --destination is required: nostr (a signed Nostr event the agent publishes to its relays) or http (POSTed by 'courier flush --to URL')")
	}
	to, err := courier.ParseDestination(*dest)
	if err != nil {
		return usagef("courier send: --destination %q: want nostr or http", *dest)
	}
	bundle, err := os.ReadFile(pos[0])
	if err != nil {
		return fmt.Errorf("courier send: read bundle: %w", err)
	}
	ev, isEvent := signedEvent(bundle)
	switch {
	case to == courier.DestinationNostr && !isEvent:
		return fmt.Errorf("courier send: %s is not one signed Nostr event (JSON with a valid id and signature): a nostr receipt would be dead-lettered at its first delivery", pos[0])
	case to == courier.DestinationHTTP && isEvent:
		fmt.Fprintf(stderr, "provider-agent: warning: %s is a signed Nostr event (kind %d) stored for HTTP delivery: it will be POSTed to an upstream URL, never published to relays (use --destination nostr for that)\n", pos[0], ev.Kind)
	}
	c, closeFn, err := openCourier(ctx, sub, true, stderr)
	if err != nil {
		return fmt.Errorf("courier send: %w", err)
	}
	defer closeFn()
	r, err := c.Send(ctx, bundle, *sender, courier.SendOptions{IdempotencyKey: *key, Destination: to})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s %s %s %d bytes\n", r.ID, r.State, r.Destination, r.BundleHash, r.Size)
	return nil
}

// signedEvent reports whether bundle is one Nostr event with a valid id
// and signature.
func signedEvent(bundle []byte) (nostr.Event, bool) {
	var ev nostr.Event
	if err := json.Unmarshal(bundle, &ev); err != nil || ev.ID == "" || !ev.CheckID() {
		return ev, false
	}
	ok, err := ev.CheckSignature()
	return ev, ok && err == nil
}

const courierListUsage = `provider-agent courier list [--state S] lists receipts ordered by id:
id, state, attempts, created, next attempt, size and last error.

Example:
  provider-agent courier list --state pending --config /etc/provider-agent.toml`

func runCourierList(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := subFlags("courier list", courierListUsage, files, stdout)
	state := fs.String("state", "", "only receipts in this state: pending, acknowledged or dead")
	dest := fs.String("destination", "", "only receipts for this destination: nostr or http")
	limit := fs.Int("limit", 1000, "at most this many receipts")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	if *state != "" && !courier.State(*state).Valid() {
		return usagef("courier list: --state %q: want pending, acknowledged or dead", *state)
	}
	if *dest != "" && !courier.Destination(*dest).Valid() {
		return usagef("courier list: --destination %q: want nostr or http", *dest)
	}
	return courierList(ctx, sub, courier.ListOptions{State: courier.State(*state), Destination: courier.Destination(*dest), Limit: *limit}, stdout, stderr)
}

func courierList(ctx context.Context, files *agentFiles, opts courier.ListOptions, stdout, stderr io.Writer) error {
	c, closeFn, err := openCourier(ctx, files, false, stderr)
	if err != nil {
		return fmt.Errorf("courier list: %w", err)
	}
	defer closeFn()
	rs, err := c.List(ctx, opts)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tDESTINATION\tATTEMPTS\tCREATED\tNEXT ATTEMPT\tSIZE\tLAST ERROR")
	for _, r := range rs {
		next := "-"
		if r.State == courier.StatePending {
			next = r.NextAttemptAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", r.ID, r.State, r.Destination, r.Attempts,
			r.CreatedAt.Format(time.RFC3339), next, r.Size, oneLine(r.LastError, 60))
	}
	return tw.Flush()
}

const courierShowUsage = `provider-agent courier show ID prints one receipt: hash, sender, state,
destination, attempts, times, payload size and last error.

Example:
  provider-agent courier show 3f2a9c0d41b7e655 --config /etc/provider-agent.toml`

func runCourierShow(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := subFlags("courier show", courierShowUsage, files, stdout)
	pos, err := parseArgs(fs, args, 1, "one receipt ID")
	if err != nil {
		return err
	}
	id, err := parseCourierID("courier show", pos[0])
	if err != nil {
		return err
	}
	c, closeFn, err := openCourier(ctx, sub, false, stderr)
	if err != nil {
		return fmt.Errorf("courier show: %w", err)
	}
	defer closeFn()
	r, err := c.Get(ctx, id)
	if err != nil {
		return err
	}
	printReceipt(stdout, r)
	return nil
}

func printReceipt(w io.Writer, r courier.Receipt) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	opt := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Format(time.RFC3339Nano)
	}
	fmt.Fprintf(tw, "id:\t%s\n", r.ID)
	fmt.Fprintf(tw, "state:\t%s\n", r.State)
	fmt.Fprintf(tw, "destination:\t%s\n", r.Destination)
	fmt.Fprintf(tw, "bundle blake3:\t%s\n", r.BundleHash)
	fmt.Fprintf(tw, "payload size:\t%d bytes\n", r.Size)
	fmt.Fprintf(tw, "sender:\t%s\n", r.Sender)
	fmt.Fprintf(tw, "idempotency key:\t%s\n", dashIfEmpty(r.IdempotencyKey))
	fmt.Fprintf(tw, "created:\t%s\n", opt(r.CreatedAt))
	fmt.Fprintf(tw, "attempts:\t%d\n", r.Attempts)
	if r.State == courier.StatePending {
		fmt.Fprintf(tw, "next attempt:\t%s\n", opt(r.NextAttemptAt))
	}
	fmt.Fprintf(tw, "acknowledged:\t%s\n", opt(r.AcknowledgedAt))
	fmt.Fprintf(tw, "failed:\t%s\n", opt(r.FailedAt))
	fmt.Fprintf(tw, "last error:\t%s\n", dashIfEmpty(oneLine(r.LastError, 500)))
	tw.Flush()
}

const courierResendUsage = `provider-agent courier resend ID puts a receipt (dead, pending or
acknowledged) back to pending with its attempts reset, due at once. The next
flush of its destination delivers it again: the running agent for a nostr
receipt, 'courier flush --to URL' for an http one.

Example:
  provider-agent courier resend 3f2a9c0d41b7e655 --config /etc/provider-agent.toml`

func runCourierResend(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := subFlags("courier resend", courierResendUsage, files, stdout)
	pos, err := parseArgs(fs, args, 1, "one receipt ID")
	if err != nil {
		return err
	}
	id, err := parseCourierID("courier resend", pos[0])
	if err != nil {
		return err
	}
	c, closeFn, err := openCourier(ctx, sub, false, stderr)
	if err != nil {
		return fmt.Errorf("courier resend: %w", err)
	}
	defer closeFn()
	r, err := c.Resend(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s, attempts reset, due now\n", r.ID, r.State)
	switch r.Destination {
	case courier.DestinationNostr:
		fmt.Fprintf(stdout, "a nostr receipt: the running agent publishes it to its relays within courier.flush_interval; "+
			"while the agent is stopped, 'provider-agent courier flush --relays' does\n")
	default:
		fmt.Fprintf(stdout, "an http receipt: 'provider-agent courier flush --to URL' delivers it\n")
	}
	return nil
}

const courierFlushUsage = `provider-agent courier flush --to URL | --relays delivers every due receipt
of one destination once.

--to URL POSTs the http receipts (headers X-Courier-Receipt,
X-Courier-Blake3, Idempotency-Key): 2xx acknowledges; 429 honours
Retry-After; other 4xx dead-letters; 5xx and network errors reschedule with
backoff. Due nostr receipts are refused and named, never POSTed: a
revocation is acknowledged only by relays.

--relays publishes the nostr receipts (signed Nostr events) to the agent's
relays (lease.relays, or --relay URL ...), answering NIP-42 AUTH with the
agent's key file; a receipt is acknowledged once lease.quorum (--quorum)
relays answered OK true. It runs only while no agent runs on the data dir
(it holds the data dir's lock meanwhile): a stopped agent's workloads are
stopped too, so every revocation it publishes is fenced, as the running
agent would make sure of. With an agent running, 'courier resend ID' is
enough: the agent publishes the receipt within courier.flush_interval.

Exits 1 if any delivery failed or any receipt of the other destination
was due.

Example:
  provider-agent courier flush --to https://upstream.example/receipts --config /etc/provider-agent.toml
  provider-agent courier flush --relays --config /etc/provider-agent.toml`

func runCourierFlush(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := subFlags("courier flush", courierFlushUsage, files, stdout)
	to := fs.String("to", "", "upstream `URL` to POST http receipts to")
	relays := fs.Bool("relays", false, "publish nostr receipts to the agent's relays with its key (agent stopped)")
	timeout := fs.Duration("timeout", 30*time.Second, "per-request (per-publish) timeout")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	c, fwd, closeFn, err := openCourierFor(ctx, sub, *to, *relays, *timeout, "courier flush", stderr)
	if err != nil {
		return err
	}
	defer closeFn()
	refused, err := dueOfOtherDestination(ctx, c, fwd.Destination(), courier.StatePending)
	if err != nil {
		return err
	}
	res, err := c.Flush(ctx, fwd)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "acknowledged %d, retried %d, dead-lettered %d\n", res.Acknowledged, res.Retried, res.DeadLettered)
	if failed := res.Retried + res.DeadLettered; failed > 0 {
		return fmt.Errorf("courier flush: %d of %d deliveries failed; last error: %s",
			failed, failed+res.Acknowledged, oneLine(res.LastError, 300))
	}
	return refusedError("courier flush", refused, *to)
}

// openCourierFor opens the courier and the forwarder that --to URL (http)
// or --relays (nostr) asks for; exactly one of them must be given.
func openCourierFor(ctx context.Context, files *agentFiles, to string, relays bool, timeout time.Duration, cmd string, stderr io.Writer) (*courier.Courier, courier.Forwarder, func(), error) {
	if (to == "") == !relays {
		return nil, nil, nil, usagef("%s: want either --to URL (http receipts) or --relays (nostr receipts)", cmd)
	}
	if timeout <= 0 {
		return nil, nil, nil, usagef("%s: --timeout %v: must be positive", cmd, timeout)
	}
	if !relays {
		fwd, err := courier.NewHTTPForwarder(to, &http.Client{Timeout: timeout})
		if err != nil {
			return nil, nil, nil, usagef("%s: --to: %v", cmd, err)
		}
		c, closeFn, err := openCourier(ctx, files, false, stderr)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", cmd, err)
		}
		return c, fwd, closeFn, nil
	}
	fwd, closeFwd, err := nostrForwarder(ctx, files, timeout, cmd, stderr)
	if err != nil {
		return nil, nil, nil, err
	}
	c, closeFn, err := openCourier(ctx, files, false, stderr)
	if err != nil {
		closeFwd()
		return nil, nil, nil, fmt.Errorf("%s: %w", cmd, err)
	}
	return c, fwd, func() { closeFn(); closeFwd() }, nil
}

// nostrForwarder is the agent's Nostr forwarder on its own relay pool over
// the agent's relays, with the agent's key for AUTH. It first takes the
// data dir's lock (no agent may run: the running agent publishes its
// receipts itself, after fencing) and kills what a killed agent's
// supervisors left, as run does, so that nothing of this node runs a
// workload whose revocation it publishes.
func nostrForwarder(ctx context.Context, files *agentFiles, timeout time.Duration, cmd string, stderr io.Writer) (courier.Forwarder, func(), error) {
	cfg, err := files.config()
	if err != nil {
		return nil, nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%s --relays: %w", cmd, err)
	}
	dbPath, err := files.dbPath()
	if err != nil {
		return nil, nil, err
	}
	if _, err := os.Stat(dbPath); err != nil {
		return nil, nil, fmt.Errorf("%s --relays: open database %s: %w (pass --data-dir, --config or --db)", cmd, dbPath, err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.Agent.DataDir = filepath.Dir(dbPath)
	held, err := holdDataDir(ctx, cfg, logger)
	if err != nil {
		var locked *dataDirLockedError
		if errors.As(err, &locked) {
			return nil, nil, fmt.Errorf("%s --relays: %w: that agent publishes its nostr receipts itself ('courier resend ID' makes one due now)", cmd, err)
		}
		return nil, nil, fmt.Errorf("%s --relays: %w", cmd, err)
	}
	pool, err := agent.NewRelayPool(relayConfig(cfg), relay.Options{SecretKey: held.secret, Logger: logger})
	if err != nil {
		held.Close()
		return nil, nil, fmt.Errorf("%s --relays: %w", cmd, err)
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); _ = pool.Run(pctx, make(chan relay.Received)) }()
	closeFn := func() {
		cancel()
		<-done
		held.Close()
	}
	// Give the connections a moment to come up, as 'workloads grant
	// --publish' does: a publish goes only to connected relays.
	wait, wcancel := context.WithTimeout(ctx, timeout)
	waitForRelays(wait, cfg.Lease.Quorum, func() int { return pool.Connected() })
	wcancel()
	return &agent.NostrForwarder{Pool: pool, Quorum: cfg.Lease.Quorum, Timeout: timeout}, closeFn, nil
}

// dueOfOtherDestination lists the receipts in state (due now, for pending
// ones) whose destination is not dest: those a flush or replay to a dest
// forwarder leaves alone, and must say so.
func dueOfOtherDestination(ctx context.Context, c *courier.Courier, dest courier.Destination, state courier.State) ([]courier.Receipt, error) {
	now := time.Now()
	var out []courier.Receipt
	for _, other := range courier.Destinations {
		if other == dest {
			continue
		}
		var after courier.ID
		for {
			page, err := c.List(ctx, courier.ListOptions{State: state, Destination: other, After: after, Limit: 1000})
			if err != nil {
				return nil, err
			}
			if len(page) == 0 {
				break
			}
			after = page[len(page)-1].ID
			for _, r := range page {
				if state != courier.StatePending || !r.NextAttemptAt.After(now) {
					out = append(out, r)
				}
			}
		}
	}
	return out, nil
}

// refusedError names the receipts a forwarder of the other destination was
// not given, their destination, and who delivers them instead; nil when
// there are none.
func refusedError(cmd string, refused []courier.Receipt, to string) error {
	if len(refused) == 0 {
		return nil
	}
	ids := make([]string, 0, 5)
	for _, r := range refused[:min(len(refused), 5)] {
		ids = append(ids, r.ID.String())
	}
	list := strings.Join(ids, ", ")
	if len(refused) > len(ids) {
		list += fmt.Sprintf(" and %d more", len(refused)-len(ids))
	}
	noun := "receipt"
	if len(refused) > 1 {
		noun = "receipts"
	}
	if refused[0].Destination == courier.DestinationNostr {
		return fmt.Errorf("%s: refused %s %s: destination nostr (a signed Nostr event such as a revocation), never POSTed to %s: "+
			"only relays acknowledge it; the running agent publishes it, or run '%s --relays' while the agent is stopped",
			cmd, noun, list, to, cmd)
	}
	return fmt.Errorf("%s: refused %s %s: destination %s, never published to relays (--relays delivers nostr receipts only); "+
		"run '%s --to URL'", cmd, noun, list, refused[0].Destination, cmd)
}

const courierDLQUsage = `provider-agent courier dlq <list|replay|drop|export> operates the dead-letter
queue: receipts that got a client error or failed every attempt.

  dlq list                         list dead receipts
  dlq replay --to URL [--rate R]   POST every dead http receipt once, at most R
                                   per second; successes leave the DLQ, failures
                                   stay with the new error (exit 1); dead nostr
                                   receipts are refused and named (exit 1)
  dlq replay --relays [--rate R]   publish every dead nostr receipt once to the
                                   agent's relays (agent stopped; see 'courier
                                   flush --help')
  dlq drop ID                      delete one dead receipt
  dlq export [--out FILE]          JSON [{"receipt": {...}, "failed_at", "attempts"}]

Example:
  provider-agent courier dlq replay --to https://upstream.example/receipts --rate 5 --config /etc/provider-agent.toml`

func runCourierDLQList(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := subFlags("courier dlq list", "provider-agent courier dlq list lists dead-lettered receipts.\n\nExample:\n  provider-agent courier dlq list --config /etc/provider-agent.toml", files, stdout)
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	return courierList(ctx, sub, courier.ListOptions{State: courier.StateDead, Limit: 100000}, stdout, stderr)
}

func runCourierReplay(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := subFlags("courier dlq replay", courierDLQUsage, files, stdout)
	to := fs.String("to", "", "upstream `URL` to POST dead http receipts to")
	relays := fs.Bool("relays", false, "publish dead nostr receipts to the agent's relays with its key (agent stopped)")
	rate := fs.Float64("rate", courier.DefaultConfig().ReplayRate, "at most this many replays per second")
	timeout := fs.Duration("timeout", 30*time.Second, "per-request (per-publish) timeout")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	if !(*rate > 0) {
		return usagef("courier dlq replay: --rate %v: must be positive", *rate)
	}
	c, fwd, closeFn, err := openCourierFor(ctx, sub, *to, *relays, *timeout, "courier dlq replay", stderr)
	if err != nil {
		return err
	}
	defer closeFn()
	refused, err := dueOfOtherDestination(ctx, c, fwd.Destination(), courier.StateDead)
	if err != nil {
		return err
	}
	res, err := c.Replay(ctx, fwd, *rate)
	fmt.Fprintf(stdout, "acknowledged %d, still failing %d\n", res.Acknowledged, res.Failed)
	if err != nil {
		return err
	}
	if res.Failed > 0 {
		return fmt.Errorf("courier dlq replay: %d receipts still failing; last error: %s", res.Failed, oneLine(res.LastError, 300))
	}
	return refusedError("courier dlq replay", refused, *to)
}

func runCourierDrop(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := subFlags("courier dlq drop", "provider-agent courier dlq drop ID deletes one dead-lettered receipt for good.\n\nExample:\n  provider-agent courier dlq drop 3f2a9c0d41b7e655 --config /etc/provider-agent.toml", files, stdout)
	pos, err := parseArgs(fs, args, 1, "one receipt ID")
	if err != nil {
		return err
	}
	id, err := parseCourierID("courier dlq drop", pos[0])
	if err != nil {
		return err
	}
	c, closeFn, err := openCourier(ctx, sub, false, stderr)
	if err != nil {
		return fmt.Errorf("courier dlq drop: %w", err)
	}
	defer closeFn()
	if err := c.Drop(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s dropped\n", id)
	return nil
}

func runCourierExport(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := subFlags("courier dlq export", "provider-agent courier dlq export [--out FILE] writes the dead-letter queue as a JSON\narray of {\"receipt\": {... \"bundle\": base64}, \"failed_at\": ..., \"attempts\": N}.\n\nExample:\n  provider-agent courier dlq export --out dlq.json --config /etc/provider-agent.toml", files, stdout)
	out := fs.String("out", "", "write to `FILE` instead of stdout")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	c, closeFn, err := openCourier(ctx, sub, false, stderr)
	if err != nil {
		return fmt.Errorf("courier dlq export: %w", err)
	}
	defer closeFn()
	if *out == "" {
		_, err := c.ExportDLQ(ctx, stdout)
		return err
	}
	var n int
	if err := atomicfile.Write(*out, func(w io.Writer) (err error) { n, err = c.ExportDLQ(ctx, w); return err }); err != nil {
		return fmt.Errorf("courier dlq export: %w", err)
	}
	fmt.Fprintf(stderr, "exported %d dead receipts to %s\n", n, *out)
	return nil
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
