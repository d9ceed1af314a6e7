package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"provideragent/courier"
)

func init() {
	register(command{
		name:    "courier",
		summary: "operate the durable outbox: send, list, show, resend, flush, dlq",
		run:     runCourier,
	})
}

const courierUsage = `provider-agent courier [--config F | --data-dir D | --db PATH] <subcommand> [flags] [args]

Operates the durable outbox (store-and-forward with retry and a dead-letter
queue) kept in the agent's SQLite file.

Subcommands:
  send FILE --sender S [--key K]   store FILE as a bundle; prints its receipt
  list [--state S]                 list receipts (pending, acknowledged, dead)
  show ID                          one receipt with payload size and last error
  resend ID                        back to pending, attempts reset, due now
  flush --to URL                   deliver every due receipt by HTTP POST once
  dlq list                         list dead-lettered receipts
  dlq replay --to URL [--rate R]   retry every dead receipt (successes leave)
  dlq drop ID                      delete one dead receipt
  dlq export [--out FILE]          the DLQ as JSON [{receipt, failed_at, attempts}]

Every subcommand takes --config, --data-dir, --db (given before or after the
subcommand) and --help.

` + agentFilesHelp + `

Example:
  provider-agent courier --config /etc/provider-agent.toml send revocation.json --sender agent
  provider-agent courier flush --data-dir /var/lib/provider-agent --to https://upstream.example/receipts`

func runCourier(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("courier", courierUsage, stdout)
	files := bindAgentFiles(fs, nil)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usagef("courier: missing subcommand (send, list, show, resend, flush, dlq); see --help")
	}
	sub, subArgs := rest[0], rest[1:]
	run := map[string]func(context.Context, *agentFiles, []string, io.Writer, io.Writer) error{
		"send":   runCourierSend,
		"list":   runCourierList,
		"show":   runCourierShow,
		"resend": runCourierResend,
		"flush":  runCourierFlush,
		"dlq":    runCourierDLQ,
	}[sub]
	if run == nil {
		return usagef("courier: unknown subcommand %q (send, list, show, resend, flush, dlq)", sub)
	}
	return run(ctx, files, subArgs, stdout, stderr)
}

// courierArgs parses flags given before or after positional arguments and
// checks the number of positional ones.
func courierArgs(fs *flag.FlagSet, args []string, want int, what string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		consumed := len(args) - len(fs.Args())
		if consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, fs.Args()...)
			break
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) != want {
		if want == 0 {
			return nil, usagef("%s: unexpected argument %q", fs.Name(), pos[0])
		}
		return nil, usagef("%s: want %s, got %d arguments", fs.Name(), what, len(pos))
	}
	return pos, nil
}

// courierFlags returns a flag set with the agent's config flags and --db,
// falling back to those given to 'courier' itself.
func courierFlags(name, usage string, parent *agentFiles, stdout io.Writer) (*flag.FlagSet, *agentFiles) {
	fs := newFlagSet("courier "+name, usage, stdout)
	return fs, bindAgentFiles(fs, parent)
}

// openCourier opens the database and the courier on it. Only send may
// create a new database; the other subcommands refuse a missing file.
func openCourier(ctx context.Context, files *agentFiles, create bool, stderr io.Writer) (*courier.Courier, func(), error) {
	db, _, err := files.openDB(ctx, create)
	if err != nil {
		return nil, nil, err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := courier.Open(ctx, db, courier.DefaultConfig(), courier.Deps{Logger: logger})
	if err != nil {
		db.Close()
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

const courierSendUsage = `provider-agent courier send FILE --sender S [--key K] stores the contents of
FILE as a bundle in the outbox and prints its receipt id and BLAKE3 hash. The
bundle is on disk when the command returns; 'courier flush' (or the running
agent) delivers it. With --key, sending again with the same key prints the
first receipt instead of storing a second copy. The database (created if
missing) is the running agent's, so its outbox delivers the bundle.

` + agentFilesHelp + `

Example:
  provider-agent courier send revocation.json --sender agent --key rev-job-7-2 --data-dir /var/lib/provider-agent
  provider-agent courier --config /etc/provider-agent.toml send revocation.json --sender agent`

func runCourierSend(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := courierFlags("send", courierSendUsage, files, stdout)
	sender := fs.String("sender", "", "sender account (required; visible ASCII)")
	key := fs.String("key", "", "idempotency key (optional)")
	pos, err := courierArgs(fs, args, 1, "one FILE")
	if err != nil {
		return err
	}
	if *sender == "" {
		return usagef("courier send: --sender is required")
	}
	bundle, err := os.ReadFile(pos[0])
	if err != nil {
		return fmt.Errorf("courier send: read bundle: %w", err)
	}
	c, closeFn, err := openCourier(ctx, sub, true, stderr)
	if err != nil {
		return fmt.Errorf("courier send: %w", err)
	}
	defer closeFn()
	r, err := c.Send(ctx, bundle, *sender, courier.SendOptions{IdempotencyKey: *key})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s %s %d bytes\n", r.ID, r.State, r.BundleHash, r.Size)
	return nil
}

const courierListUsage = `provider-agent courier list [--state S] lists receipts ordered by id:
id, state, attempts, created, next attempt, size and last error.

Example:
  provider-agent courier list --state pending --config /etc/provider-agent.toml`

func runCourierList(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := courierFlags("list", courierListUsage, files, stdout)
	state := fs.String("state", "", "only receipts in this state: pending, acknowledged or dead")
	limit := fs.Int("limit", 1000, "at most this many receipts")
	if _, err := courierArgs(fs, args, 0, ""); err != nil {
		return err
	}
	if *state != "" && !courier.State(*state).Valid() {
		return usagef("courier list: --state %q: want pending, acknowledged or dead", *state)
	}
	return courierList(ctx, sub, courier.State(*state), *limit, stdout, stderr)
}

func courierList(ctx context.Context, files *agentFiles, state courier.State, limit int, stdout, stderr io.Writer) error {
	c, closeFn, err := openCourier(ctx, files, false, stderr)
	if err != nil {
		return fmt.Errorf("courier list: %w", err)
	}
	defer closeFn()
	rs, err := c.List(ctx, courier.ListOptions{State: state, Limit: limit})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tATTEMPTS\tCREATED\tNEXT ATTEMPT\tSIZE\tLAST ERROR")
	for _, r := range rs {
		next := "-"
		if r.State == courier.StatePending {
			next = r.NextAttemptAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\n", r.ID, r.State, r.Attempts,
			r.CreatedAt.Format(time.RFC3339), next, r.Size, oneLine(r.LastError, 60))
	}
	return tw.Flush()
}

const courierShowUsage = `provider-agent courier show ID prints one receipt: hash, sender, state,
attempts, times, payload size and last error.

Example:
  provider-agent courier show 3f2a9c0d41b7e655 --config /etc/provider-agent.toml`

func runCourierShow(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := courierFlags("show", courierShowUsage, files, stdout)
	pos, err := courierArgs(fs, args, 1, "one receipt ID")
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
flush delivers it again.

Example:
  provider-agent courier resend 3f2a9c0d41b7e655 --config /etc/provider-agent.toml`

func runCourierResend(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := courierFlags("resend", courierResendUsage, files, stdout)
	pos, err := courierArgs(fs, args, 1, "one receipt ID")
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
	return nil
}

const courierFlushUsage = `provider-agent courier flush --to URL delivers every due receipt once by
HTTP POST (headers X-Courier-Receipt, X-Courier-Blake3, Idempotency-Key).
2xx acknowledges; 429 honours Retry-After; other 4xx dead-letters; 5xx and
network errors reschedule with backoff. Exits 1 if any delivery failed.

Example:
  provider-agent courier flush --to https://upstream.example/receipts --config /etc/provider-agent.toml`

func runCourierFlush(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := courierFlags("flush", courierFlushUsage, files, stdout)
	to := fs.String("to", "", "upstream `URL` to POST bundles to (required)")
	timeout := fs.Duration("timeout", 30*time.Second, "per-request timeout")
	if _, err := courierArgs(fs, args, 0, ""); err != nil {
		return err
	}
	fwd, err := courierForwarder(*to, *timeout, "courier flush")
	if err != nil {
		return err
	}
	c, closeFn, err := openCourier(ctx, sub, false, stderr)
	if err != nil {
		return fmt.Errorf("courier flush: %w", err)
	}
	defer closeFn()
	res, err := c.Flush(ctx, fwd)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "acknowledged %d, retried %d, dead-lettered %d\n", res.Acknowledged, res.Retried, res.DeadLettered)
	if failed := res.Retried + res.DeadLettered; failed > 0 {
		return fmt.Errorf("courier flush: %d of %d deliveries failed; last error: %s",
			failed, failed+res.Acknowledged, oneLine(res.LastError, 300))
	}
	return nil
}

func courierForwarder(to string, timeout time.Duration, cmd string) (*courier.HTTPForwarder, error) {
	if to == "" {
		return nil, usagef("%s: --to URL is required", cmd)
	}
	if timeout <= 0 {
		return nil, usagef("%s: --timeout %v: must be positive", cmd, timeout)
	}
	fwd, err := courier.NewHTTPForwarder(to, &http.Client{Timeout: timeout})
	if err != nil {
		return nil, usagef("%s: --to: %v", cmd, err)
	}
	return fwd, nil
}

const courierDLQUsage = `provider-agent courier dlq <list|replay|drop|export> operates the dead-letter
queue: receipts that got a client error or failed every attempt.

  dlq list                         list dead receipts
  dlq replay --to URL [--rate R]   POST every dead receipt once, at most R per
                                   second; successes leave the DLQ, failures
                                   stay with the new error (exit 1)
  dlq drop ID                      delete one dead receipt
  dlq export [--out FILE]          JSON [{"receipt": {...}, "failed_at", "attempts"}]

Example:
  provider-agent courier dlq replay --to https://upstream.example/receipts --rate 5 --config /etc/provider-agent.toml`

func runCourierDLQ(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("courier dlq: missing subcommand (list, replay, drop, export); see --help")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, courierDLQUsage)
		return flag.ErrHelp
	case "list":
		fs, sub := courierFlags("dlq list", "provider-agent courier dlq list lists dead-lettered receipts.\n\nExample:\n  provider-agent courier dlq list --config /etc/provider-agent.toml", files, stdout)
		if _, err := courierArgs(fs, args[1:], 0, ""); err != nil {
			return err
		}
		return courierList(ctx, sub, courier.StateDead, 100000, stdout, stderr)
	case "replay":
		return runCourierReplay(ctx, files, args[1:], stdout, stderr)
	case "drop":
		return runCourierDrop(ctx, files, args[1:], stdout, stderr)
	case "export":
		return runCourierExport(ctx, files, args[1:], stdout, stderr)
	}
	return usagef("courier dlq: unknown subcommand %q (list, replay, drop, export)", args[0])
}

func runCourierReplay(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := courierFlags("dlq replay", courierDLQUsage, files, stdout)
	to := fs.String("to", "", "upstream `URL` to POST bundles to (required)")
	rate := fs.Float64("rate", courier.DefaultConfig().ReplayRate, "at most this many replays per second")
	timeout := fs.Duration("timeout", 30*time.Second, "per-request timeout")
	if _, err := courierArgs(fs, args, 0, ""); err != nil {
		return err
	}
	if !(*rate > 0) {
		return usagef("courier dlq replay: --rate %v: must be positive", *rate)
	}
	fwd, err := courierForwarder(*to, *timeout, "courier dlq replay")
	if err != nil {
		return err
	}
	c, closeFn, err := openCourier(ctx, sub, false, stderr)
	if err != nil {
		return fmt.Errorf("courier dlq replay: %w", err)
	}
	defer closeFn()
	res, err := c.Replay(ctx, fwd, *rate)
	fmt.Fprintf(stdout, "acknowledged %d, still failing %d\n", res.Acknowledged, res.Failed)
	if err != nil {
		return err
	}
	if res.Failed > 0 {
		return fmt.Errorf("courier dlq replay: %d receipts still failing; last error: %s", res.Failed, oneLine(res.LastError, 300))
	}
	return nil
}

func runCourierDrop(ctx context.Context, files *agentFiles, args []string, stdout, stderr io.Writer) error {
	fs, sub := courierFlags("dlq drop", "provider-agent courier dlq drop ID deletes one dead-lettered receipt for good.\n\nExample:\n  provider-agent courier dlq drop 3f2a9c0d41b7e655 --config /etc/provider-agent.toml", files, stdout)
	pos, err := courierArgs(fs, args, 1, "one receipt ID")
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
	fs, sub := courierFlags("dlq export", "provider-agent courier dlq export [--out FILE] writes the dead-letter queue as a JSON\narray of {\"receipt\": {... \"bundle\": base64}, \"failed_at\": ..., \"attempts\": N}.\n\nExample:\n  provider-agent courier dlq export --out dlq.json --config /etc/provider-agent.toml", files, stdout)
	out := fs.String("out", "", "write to `FILE` instead of stdout")
	if _, err := courierArgs(fs, args, 0, ""); err != nil {
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
	if err := writeFileAtomic(*out, func(w io.Writer) (err error) { n, err = c.ExportDLQ(ctx, w); return err }); err != nil {
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
