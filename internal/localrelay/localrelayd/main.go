// Command localrelayd runs one internal/localrelay relay as a process, with
// its faults chosen by flags. Tests (internal/relaytest) run it as a child
// process built without -race, which also makes killing and restarting a
// relay real. It prints "LISTEN ws://host:port" on stdout once it accepts
// connections and stops on SIGINT, SIGTERM or (with --exit-on-stdin-eof) when
// its standard input closes.
//
// Example:
//
//	localrelayd --listen 127.0.0.1:0 --reject-writes --admin
//	localrelayd --listen 127.0.0.1:7777 --strfry --require-auth
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"provideragent/internal/localrelay"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "localrelayd:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("localrelayd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "localrelayd runs a local Nostr relay (khatru, in-memory) with optional faults.")
		fmt.Fprintln(stderr, "Example: localrelayd --listen 127.0.0.1:0 --send-closed 'error: try again' --closed-times 1")
		fs.PrintDefaults()
	}
	var (
		o         localrelay.Options
		listen    = fs.String("listen", "127.0.0.1:0", "host:port to listen on (port 0 picks a free port)")
		stdinEOF  = fs.Bool("exit-on-stdin-eof", false, "exit when standard input closes (set by test harnesses)")
		verbose   = fs.Bool("v", false, "log at debug level to stderr")
		authAllow = fs.String("auth-allow", "", "comma-separated hex pubkeys allowed after AUTH (needs --require-auth)")
		cpuProf   = fs.String("cpuprofile", "", "write a Go CPU profile of the whole run to this file (written at exit)")
		slowKinds = fs.String("query-delay-kinds", "", "comma-separated kinds --query-delay applies to (default: every REQ)")
	)
	fs.BoolVar(&o.RejectWrites, "reject-writes", false, "answer every EVENT with OK false")
	fs.StringVar(&o.RejectReason, "reject-reason", localrelay.DefaultRejectReason, "OK reason for --reject-writes")
	fs.BoolVar(&o.HoldOK, "hold-ok", false, "never answer an EVENT until the connection closes")
	fs.DurationVar(&o.WriteDelay, "write-delay", 0, "delay every OK by this long")
	fs.DurationVar(&o.QueryDelay, "query-delay", 0, "answer REQs (stored events and EOSE) this long late; live events are not delayed")
	fs.BoolVar(&o.RequireAuth, "require-auth", false, "require NIP-42 AUTH for REQ and EVENT")
	fs.StringVar(&o.ClosedReason, "send-closed", "", "end subscriptions with CLOSED and this reason (e.g. 'blocked: no' or 'error: later')")
	fs.DurationVar(&o.ClosedAfter, "closed-after", 0, "send the CLOSED this long after the REQ (0: reject the REQ at once)")
	fs.IntVar(&o.ClosedTimes, "closed-times", 0, "how many subscriptions get the CLOSED (0: all)")
	fs.BoolVar(&o.ServeStale, "serve-stale", false, "ignore since/until in filters (re-serve old events)")
	fs.DurationVar(&o.ReplayEvery, "replay", 0, "re-broadcast all stored events to subscribers at this period")
	fs.BoolVar(&o.Forge, "forged", false, "send forged copies (id mismatch, bad signature) before every event")
	fs.DurationVar(&o.FutureShift, "future", 0, "send a copy of every event moved this far into the future")
	fs.DurationVar(&o.PastShift, "stale-shift", 0, "send a copy of every event moved this far into the past")
	fs.StringVar(&o.InjectKey, "inject-key", "", "hex secret key that signs the --future/--stale-shift copies")
	fs.IntVar(&o.Limits.MaxMessageLength, "max-message-length", 0, "NIP-11 max_message_length (0: absent)")
	fs.IntVar(&o.Limits.MaxSubscriptions, "max-subscriptions", 0, "NIP-11 max_subscriptions (0: absent)")
	fs.IntVar(&o.Limits.MaxLimit, "max-limit", 0, "NIP-11 max_limit, also enforced (0: absent)")
	fs.IntVar(&o.Limits.MaxContentLength, "max-content-length", 0, "NIP-11 max_content_length (characters), also enforced (0: absent)")
	fs.IntVar(&o.Limits.MaxEventTags, "max-event-tags", 0, "NIP-11 max_event_tags, also enforced (0: absent)")
	fs.DurationVar(&o.WriteTimeout, "write-timeout", 0, "drop a client that accepts no byte for this long (0: 10s; not with --strfry, which has none)")
	fs.IntVar(&o.MaxPendingOutbound, "max-pending-outbound", 0, "drop a client whose unsent backlog would exceed this many bytes (0: 32 MiB)")
	fs.DurationVar(&o.PingInterval, "ping-interval", 0, "keep-alive ping period (0: khatru's 30s, a client without pong for twice that is dropped; strfry's 55s with --strfry, a client silent between two pings is dropped)")
	fs.IntVar(&o.SendBuffer, "send-buffer", 0, "SO_SNDBUF of every client connection (0: the kernel's autotuning); small values make a stalled client's backlog reach the relay as over a real network")
	fs.BoolVar(&o.Strfry, "strfry", false, "behave as strfry with its default limits and message forms (event 65536 B, frame 131072 B, 200 REQs, 255 B filter items, 'ERROR: ' on CLOSED/NOTICE, strfry's NIP-42 and NIP-11)")
	fs.StringVar(&o.ServiceURL, "service-url", "", "public URL that AUTH's relay tag must name (strfry's relay.auth.serviceUrl; default: its own ws://host:port with --strfry, the Host header otherwise)")
	fs.Float64Var(&o.RateLimit.KeyPerSecond, "rate-key-per-sec", 0, "refuse a pubkey's events beyond this rate (OK false '"+localrelay.RateLimitReason+"'; 0: no bound)")
	fs.IntVar(&o.RateLimit.KeyBurst, "rate-key-burst", 0, "the events a pubkey may send at once before --rate-key-per-sec applies")
	fs.Float64Var(&o.RateLimit.ConnPerSecond, "rate-conn-per-sec", 0, "refuse a connection's events beyond this rate (0: no bound)")
	fs.IntVar(&o.RateLimit.ConnBurst, "rate-conn-burst", 0, "the events a connection may send at once before --rate-conn-per-sec applies")
	fs.BoolVar(&o.Admin, "admin", false, "enable "+localrelay.InjectPath+" and "+localrelay.StatsPath)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *authAllow != "" {
		o.AuthAllow = strings.Split(*authAllow, ",")
	}
	if *slowKinds != "" {
		for _, s := range strings.Split(*slowKinds, ",") {
			k, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || k < 0 || k > 65535 {
				return fmt.Errorf("--query-delay-kinds: %q is not a kind (0-65535)", s)
			}
			o.QueryDelayKinds = append(o.QueryDelayKinds, k)
		}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if err := o.Validate(); err != nil {
		return err
	}
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *stdinEOF {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			// Ends with the process; reading stdin cannot be interrupted.
			_, _ = io.Copy(io.Discard, bufio.NewReader(stdin))
			cancel()
		}()
	}

	r := localrelay.New(o)
	if err := r.Start(ctx, *listen); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "LISTEN %s\n", r.URL())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.Shutdown(sctx)
}
