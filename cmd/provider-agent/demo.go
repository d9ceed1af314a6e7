package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/agent"
	"provideragent/backend"
	"provideragent/internal/cutproxy"
	"provideragent/internal/localrelay"
	"provideragent/internal/sqlitedb"
	"provideragent/lease"
)

func init() {
	register(command{
		name:    "demo",
		summary: "run a real failover locally: 3 relays, a primary and a standby, printed as a timeline",
		run:     runDemo,
	})
}

const demoUsage = `provider-agent demo runs, in one process, 3 Nostr relays on 127.0.0.1, a
primary and a standby agent (each with its own SQLite file in a temporary
directory) and a real workload process. Once the primary is Live it cuts the
primary off from relays 1 and 2 (real sockets: the primary dials those relays
through TCP proxies that the demo closes). The primary loses quorum, turns
Suspect, evicts itself, stops its process and publishes a revocation, which
reaches the standby through relay 3; the standby claims epoch 2 and starts the
workload. It prints the timeline and ends with
"failover: standby Live at epoch 2 after <seconds>s".

Example:
  go run ./cmd/provider-agent demo
  provider-agent demo --verbose     # also every heartbeat and the agents' logs`

// DemoResult is what a demo run measured.
type DemoResult struct {
	Failover time.Duration // cut -> standby Live at epoch 2
	Bound    time.Duration // t1 + t2 + stale + relay_delay + 2 s
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", demoUsage, stdout)
	verbose := fs.Bool("verbose", false, "print every heartbeat and the agents' logs (to stderr)")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	res, err := demo(ctx, stdout, stderr, *verbose)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	fmt.Fprintf(stdout, "failover: standby Live at epoch 2 after %.1fs\n", res.Failover.Seconds())
	return nil
}

// timeline prints events relative to the demo's start.
type timeline struct {
	mu      sync.Mutex
	w       io.Writer
	start   time.Time
	verbose bool
	beats   map[string]int
	closed  bool
}

func (t *timeline) printf(who, kind, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	fmt.Fprintf(t.w, "[%5.1fs] %-8s %-10s %s\n", time.Since(t.start).Seconds(), who, kind, fmt.Sprintf(format, args...))
}

func (t *timeline) event(e agent.Event) {
	if e.Kind == "heartbeat" && !t.verbose {
		t.mu.Lock()
		t.beats[e.Agent]++
		n := t.beats[e.Agent]
		t.mu.Unlock()
		if n > 2 {
			return
		}
	}
	detail := e.Detail
	if e.Workload != "" {
		detail = e.Workload + ": " + detail
	}
	t.printf(e.Agent, e.Kind, "%s", detail)
}

func demo(ctx context.Context, stdout, stderr io.Writer, verbose bool) (DemoResult, error) {
	tl := &timeline{w: stdout, start: time.Now(), verbose: verbose, beats: map[string]int{}}
	logger := slog.New(slog.DiscardHandler)
	if verbose {
		logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}

	// Three relays on 127.0.0.1.
	var relays []*localrelay.Relay
	var urls []string
	defer func() {
		for _, r := range relays {
			sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
			_ = r.Shutdown(sctx)
			c()
		}
	}()
	for i := range 3 {
		r := localrelay.New(localrelay.Options{Logger: logger})
		if err := r.Start(ctx, "127.0.0.1:0"); err != nil {
			return DemoResult{}, fmt.Errorf("start relay %d: %w", i+1, err)
		}
		relays = append(relays, r)
		urls = append(urls, r.URL())
		tl.printf("demo", "relay", "relay %d listening on %s", i+1, r.URL())
	}
	// The primary reaches relays 1 and 2 through proxies the demo can cut.
	var proxies []*cutproxy.Proxy
	defer func() {
		for _, p := range proxies {
			p.Close()
		}
	}()
	dial := map[string]string{}
	for i := range 2 {
		p, err := cutproxy.New(relays[i].Addr())
		if err != nil {
			return DemoResult{}, err
		}
		proxies = append(proxies, p)
		dial[urls[i]] = p.URL()
	}

	dir, err := os.MkdirTemp("", "provider-agent-demo-")
	if err != nil {
		return DemoResult{}, fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)

	lcfg := lease.DemoConfig(urls)
	primaryKey, standbyKey := nostr.GeneratePrivateKey(), nostr.GeneratePrivateKey()
	primaryPub, _ := nostr.GetPublicKey(primaryKey)
	standbyPub, _ := nostr.GetPublicKey(standbyKey)
	spec := lease.Spec{
		ID: "demo-workload", Primary: primaryPub, Standbys: []string{standbyPub},
		Replication: lease.ReplicationWarmStandby, Epoch: 1,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure, MaxAttempts: 3},
		Command:       []string{"sh", "-c", "while :; do sleep 1; done"},
		CreatedAt:     time.Now(), Relays: urls, Quorum: 2,
	}
	tl.printf("demo", "lease", "workload %q: primary %s, standby %s, M=2 of N=3 relays, epoch 1",
		spec.ID, primaryPub[:8], standbyPub[:8])
	tl.printf("demo", "lease", "timings: heartbeat 1s, stale 3s, t1 2s, t2 3s, max_skew 1s, relay_delay 1s, takeover_after 12s")

	var (
		mu           sync.Mutex
		primaryLive  = make(chan struct{})
		standbyLive2 = make(chan struct{})
		liveOnce     sync.Once
		live2Once    sync.Once
		stoppedAt    time.Time
		startedAt    time.Time
	)
	onEvent := func(e agent.Event) {
		tl.event(e)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case e.Agent == "primary" && e.Kind == "state" && e.State == string(lease.StateLive):
			liveOnce.Do(func() { close(primaryLive) })
		case e.Agent == "primary" && e.Kind == "stop":
			stoppedAt = e.Time
		case e.Agent == "standby" && e.Kind == "start" && strings.Contains(e.Detail, "epoch 2"):
			startedAt = e.Time
		case e.Agent == "standby" && e.Kind == "state" && e.State == string(lease.StateLive) && e.Epoch == 2:
			live2Once.Do(func() { close(standbyLive2) })
		}
	}

	type running struct {
		a    *agent.Agent
		done chan error
	}
	runCtx, stopAgents := context.WithCancel(ctx)
	defer stopAgents()
	var agents []running
	defer func() {
		stopAgents()
		for _, r := range agents {
			<-r.done
		}
	}()
	for _, who := range []struct {
		name, key string
		dial      map[string]string
	}{{"primary", primaryKey, dial}, {"standby", standbyKey, nil}} {
		db, err := sqlitedb.Open(ctx, filepath.Join(dir, who.name+".db"), sqlitedb.Options{})
		if err != nil {
			return DemoResult{}, err
		}
		defer db.Close()
		cfg := demoAgentConfig(urls, who.key, who.name)
		cfg.DialAddrs = who.dial
		pcfg := backend.DefaultProcessConfig()
		pcfg.StopGrace = 2 * time.Second
		if os.Geteuid() != 0 {
			// The demo's workload is its own fixed command, not a third
			// party's: where it cannot be isolated (isolation needs root)
			// it runs as the user who runs the demo.
			pcfg.Isolation = backend.IsolateNone
		}
		proc, err := backend.NewProcess(pcfg, logger)
		if err != nil {
			return DemoResult{}, err
		}
		defer func() {
			cctx, c := context.WithTimeout(context.Background(), 10*time.Second)
			_ = proc.Close(cctx)
			c()
		}()
		a, err := agent.New(ctx, cfg, agent.Deps{
			DB: db, Logger: logger.With("agent", who.name), Backend: proc,
			OnEvent: onEvent,
		})
		if err != nil {
			return DemoResult{}, err
		}
		r := running{a: a, done: make(chan error, 1)}
		go func() { r.done <- a.Run(runCtx) }()
		agents = append(agents, r)
		a.Track(ctx, spec)
	}

	select {
	case <-primaryLive:
	case <-ctx.Done():
		return DemoResult{}, errors.New("the primary did not become Live in time")
	}
	// Let the steady state show: both agents see each other's heartbeats.
	select {
	case <-time.After(3 * time.Second):
	case <-ctx.Done():
		return DemoResult{}, ctx.Err()
	}
	cut := time.Now()
	for _, p := range proxies {
		p.Cut()
	}
	tl.printf("demo", "CUT", "primary cut off from relays 1 and 2 (its sockets closed); it still reaches relay 3")

	select {
	case <-standbyLive2:
	case <-ctx.Done():
		return DemoResult{}, errors.New("the standby did not become Live at epoch 2 in time")
	}
	res := DemoResult{Failover: time.Since(cut), Bound: lcfg.T1 + lcfg.T2 + lcfg.Stale + lcfg.RelayDelay + 2*time.Second}
	mu.Lock()
	stopped, started := stoppedAt, startedAt
	mu.Unlock()
	if !stopped.IsZero() && !started.IsZero() {
		tl.printf("demo", "check", "single writer: primary fenced at +%.1fs, standby started at +%.1fs",
			stopped.Sub(tl.start).Seconds(), started.Sub(tl.start).Seconds())
	}
	tl.printf("demo", "check", "failover took %.1fs from the cut; bound t1+t2+stale+relay_delay+2s = %v",
		res.Failover.Seconds(), res.Bound)
	tl.printf("demo", "done", "stopping agents and relays")
	tl.mu.Lock()
	tl.closed = true
	tl.mu.Unlock()
	return res, nil
}

// demoAgentConfig is the agent settings of the demo's providers:
// lease.DemoConfig(relays), identity secretKey, timeline name, no status
// listener, 2 s publishes, workload processes stopped when the demo ends,
// and an outbox that retries within a second.
func demoAgentConfig(relays []string, secretKey, name string) agent.Config {
	c := agent.DefaultConfig()
	c.Lease = lease.DemoConfig(relays)
	c.SecretKey = secretKey
	c.Name = name
	c.Listen = ""
	c.PublishTimeout = 2 * time.Second
	c.StopWorkloadsOnExit = true
	c.Courier.MaxAttempts = 20
	c.Courier.InitialBackoff = 200 * time.Millisecond
	c.Courier.MaxBackoff = time.Second
	c.Courier.ForwardTimeout = 5 * time.Second
	c.Courier.ClaimTimeout = 6 * time.Second
	return c
}
