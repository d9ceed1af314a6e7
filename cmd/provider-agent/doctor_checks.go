package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/agent"
	"provideragent/backend"
	"provideragent/config"
	"provideragent/identity"
	"provideragent/relay"
	"provideragent/uploader"
)

// doctorProbeKind is the kind of the event doctor publishes to test that a
// relay takes our events: ephemeral (no relay stores it) and read by
// nobody (the agent subscribes to its own kinds only).
const doctorProbeKind = 20385

// doctorChecks runs every check with the settings run would use.
func doctorChecks(ctx context.Context, flags *config.Flags, opts doctorOptions, env doctorEnv) []checkResult {
	source := flags.Path(env.environ)
	if source == "" {
		source = "built-in defaults"
	}
	cfg, err := flags.Resolve(env.environ)
	if err != nil {
		out := []checkResult{{Check: "config", Target: source, Status: checkFail, Detail: err.Error()}}
		for _, c := range []string{"key file", "data dir", "relay", "clock", "containment", "isolation", "podman", "blossom", "disk"} {
			out = append(out, checkResult{Check: c, Status: checkSkip, Detail: "not checked: the config is invalid"})
		}
		return out
	}
	out := []checkResult{checkConfig(cfg, source)}
	secret, keyResult := checkKeyFile(cfg)
	out = append(out, keyResult, checkDataDir(cfg))

	// The network checks run together, within --timeout.
	nctx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()
	var relays, blossom []checkResult
	var clock, podman checkResult
	var wg sync.WaitGroup
	wg.Go(func() { relays = checkRelays(nctx, cfg, secret, opts, env.now) })
	wg.Go(func() { clock = checkClock(nctx, cfg, env.now) })
	wg.Go(func() { blossom = checkBlossom(nctx, cfg) })
	// Not bound by --timeout: a first podman run may take its time.
	wg.Go(func() { podman = checkPodman(ctx, cfg) })
	containment, isolation := checkContainment(cfg), checkIsolation(cfg)
	wg.Wait()
	out = append(out, relays...)
	out = append(out, clock, containment, isolation, podman)
	out = append(out, blossom...)
	return append(out, checkDisk(cfg, opts.minFreeMiB))
}

func checkConfig(cfg config.Config, source string) checkResult {
	return checkResult{Check: "config", Target: source, Status: checkOK,
		Detail: fmt.Sprintf("valid: %s, quorum %d, heartbeat every %v, backend %s (containment %s, isolation %s)",
			plural(len(cfg.Lease.Relays), "relay"), cfg.Lease.Quorum, cfg.Heartbeat.Interval, cfg.Backend.Kind, cfg.Backend.Containment,
			cfg.Backend.Isolation)}
}

// checkKeyFile loads the key file as run does; it returns the secret (hex;
// "" when the check failed).
func checkKeyFile(cfg config.Config) (string, checkResult) {
	path := cfg.KeyFilePath()
	r := checkResult{Check: "key file", Target: path, Status: checkFail}
	secret, err := config.LoadKeyFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		r.Detail = fmt.Sprintf("missing: create one with 'provider-agent keygen --out %s' (or point agent.key_file / --key-file at yours)", path)
		return "", r
	case err != nil:
		r.Detail = err.Error()
		return "", r
	}
	keys, err := identity.NewKeys(secret)
	if err != nil {
		r.Detail = err.Error()
		return "", r
	}
	r.Status, r.Detail = checkOK, "readable by its owner only, "+keys.Npub()
	return secret, r
}

// checkDataDir checks the data dir's and the workload log dir's modes and
// that the data dir is writable. A data dir that does not exist yet passes:
// run (and keygen) create it 0700.
func checkDataDir(cfg config.Config) checkResult {
	dir := cfg.Agent.DataDir
	r := checkResult{Check: "data dir", Target: dir, Status: checkFail}
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		r.Status, r.Detail = checkOK, "does not exist yet: run creates it (mode 0700)"
		return r
	case err != nil:
		r.Detail = err.Error()
		return r
	case !st.IsDir():
		r.Detail = "not a directory"
		return r
	}
	if err := config.CheckDataDirMode(dir); err != nil {
		r.Detail = err.Error()
		return r
	}
	if err := checkWritable(dir); err != nil {
		r.Detail = fmt.Sprintf("not writable by this user (%s): run creates %s, %s and logs/ there", pathErrCause(err), config.DBFileName, lockFileName)
		return r
	}
	logs := cfg.BackendLogDir()
	if st, err := os.Stat(logs); err == nil && st.Mode().Perm()&0o077 != 0 {
		r.Detail = fmt.Sprintf("workload log dir %s: mode %04o lets group or others read workload logs (they may hold secrets); run 'chmod 700 %s'",
			logs, st.Mode().Perm(), logs)
		return r
	}
	r.Status, r.Detail = checkOK, fmt.Sprintf("mode %04o, writable", st.Mode().Perm())
	var held *dataDirLockedError
	if errors.As(dataDirHeld(dir), &held) {
		r.Detail += fmt.Sprintf("; an agent is running on it (pid %s)", held.holder)
	}
	return r
}

// relayProbe is what checkRelays learnt of one relay.
type relayProbe struct {
	url       string
	connected time.Duration // time to an open websocket (0: none)
	eose      bool          // the subscription reached EOSE
	err       string        // the relay's connection or subscription error
	published relay.RelayOutcome
	took      time.Duration // the test event's round trip
}

// checkRelays connects to every relay with the agent's relay layer (its
// dial addresses, NIP-42 AUTH with our key, NIP-11 limits), subscribes to
// our probe kind, publishes one probe event to each relay that answered the
// subscription, and sizes a beat of opts.workloads at each relay's limits.
func checkRelays(ctx context.Context, cfg config.Config, secret string, opts doctorOptions, now func() time.Time) []checkResult {
	note := ""
	if secret == "" {
		// The relays can still be checked, with a key of our own.
		secret = nostr.GeneratePrivateKey()
		note = " (signed with a throwaway key: the key file could not be read)"
	}
	keys, err := identity.NewKeys(secret)
	if err != nil {
		return []checkResult{{Check: "relay", Status: checkFail, Detail: err.Error()}}
	}
	acfg := cfg.AgentConfig(secret)
	since := nostr.Timestamp(now().Add(-time.Minute).Unix())
	pool, err := relay.New(acfg.RelayConfig(), relay.Options{
		Filters:   []nostr.Filter{{Kinds: []int{doctorProbeKind}, Authors: []string{keys.PublicKey()}, Since: &since}},
		SecretKey: secret,
	})
	if err != nil {
		return []checkResult{{Check: "relay", Status: checkFail, Detail: err.Error()}}
	}
	var drain sync.WaitGroup
	drain.Go(func() {
		for range pool.Received() {
		}
	})
	defer drain.Wait()
	defer pool.Close()

	probes := waitRelays(ctx, pool)
	ev := nostr.Event{
		Kind: doctorProbeKind, CreatedAt: nostr.Timestamp(now().Unix()), Content: "provider-agent doctor: write check",
		Tags: nostr.Tags{{"expiration", fmt.Sprint(now().Add(time.Minute).Unix())}},
	}
	if err := keys.Sign(&ev); err != nil {
		return []checkResult{{Check: "relay", Status: checkFail, Detail: err.Error()}}
	}
	frame, err := relay.NewFrame(&ev)
	if err != nil {
		return []checkResult{{Check: "relay", Status: checkFail, Detail: err.Error()}}
	}
	var wg sync.WaitGroup
	for _, p := range probes {
		if p.connected == 0 || !p.eose {
			continue
		}
		wg.Go(func() {
			start := time.Now()
			p.published = pool.PublishTo(ctx, p.url, frame)
			p.took = time.Since(start)
		})
	}
	wg.Wait()

	limits := map[string]relay.Limits{}
	for _, st := range pool.Status() {
		limits[st.URL] = st.Limits
	}
	out := make([]checkResult, 0, len(probes))
	for _, p := range probes {
		r := judgeRelay(p, limits[p.url], opts.workloads, acfg.PublishTimeout)
		r.Detail += note
		out = append(out, r)
	}
	return out
}

// waitRelays waits until every relay of pool is connected and answered the
// subscription, or failed, or ctx ends.
func waitRelays(ctx context.Context, pool *relay.Pool) []*relayProbe {
	start := time.Now()
	urls := pool.URLs()
	probes := make([]*relayProbe, len(urls))
	byURL := map[string]*relayProbe{}
	for i, u := range urls {
		probes[i] = &relayProbe{url: u}
		byURL[u] = probes[i]
	}
	for {
		pending := 0
		for _, st := range pool.Status() {
			p := byURL[st.URL]
			if p == nil || p.eose || p.err != "" {
				continue
			}
			if st.Connected && p.connected == 0 {
				p.connected = max(time.Since(start), time.Nanosecond)
			}
			switch {
			case st.Connected && st.EOSESeen:
				p.eose = true
			case st.ClosedPermanently:
				p.err = "refused our subscription: " + st.ClosedReason
			case !st.Connected && st.LastError != "":
				p.err = st.LastError
			default:
				pending++
			}
		}
		if pending == 0 {
			return probes
		}
		select {
		case <-ctx.Done():
			for _, p := range probes {
				switch {
				case p.eose || p.err != "":
				case p.connected == 0:
					p.err = "no connection within the timeout"
				default:
					p.err = "connected, but no answer (EOSE) to our subscription within the timeout"
				}
			}
			return probes
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// beatPublishes is how many events of one beat the agent has in flight to
// one relay at once (agent/beat.go): a beat of n events takes about n/8
// round trips.
const beatPublishes = 8

// judgeRelay turns what was learnt of one relay into its line.
func judgeRelay(p *relayProbe, l relay.Limits, workloads int, publishTimeout time.Duration) checkResult {
	r := checkResult{Check: "relay", Target: p.url, Status: checkFail}
	if p.err != "" {
		r.Detail = p.err
		return r
	}
	switch p.published.Outcome {
	case relay.OutcomeAccepted, relay.OutcomeMuted:
	default:
		why := p.published.Reason
		if why == "" {
			why = p.published.Notice
		}
		r.Detail = fmt.Sprintf("does not take our events: test event %s", p.published.Outcome)
		if why != "" {
			r.Detail += ": " + why
		}
		return r
	}
	parts := []string{fmt.Sprintf("connected in %v, subscribed, took a test event in %v",
		p.connected.Round(time.Millisecond), p.took.Round(time.Millisecond)), "NIP-11 " + describeLimits(l)}
	if l.MaxEventTags > 0 && l.MaxEventTags < agent.BeatTags {
		r.Detail = strings.Join(append(parts, fmt.Sprintf("max_event_tags %d is below the %d tags of a heartbeat: it refuses our heartbeats", l.MaxEventTags, agent.BeatTags)), "; ")
		return r
	}
	events, size, err := agent.BeatFit(workloads, []relay.Limits{l})
	if err != nil {
		r.Detail = strings.Join(append(parts, fmt.Sprintf("heartbeats of %d workloads do not fit its limits: %v", workloads, err)), "; ")
		return r
	}
	beat := fmt.Sprintf("a beat of %d workloads: %d events, largest %d bytes", workloads, events, size)
	rounds := (events + beatPublishes - 1) / beatPublishes
	if est := time.Duration(rounds) * p.took; est > publishTimeout {
		r.Detail = strings.Join(append(parts, beat+fmt.Sprintf(", about %v at this relay's pace: over agent.publish_timeout %v", est.Round(time.Millisecond), publishTimeout)), "; ")
		return r
	}
	r.Status, r.Detail = checkOK, strings.Join(append(parts, beat), "; ")
	return r
}

// describeLimits lists the NIP-11 limits the agent honours.
func describeLimits(l relay.Limits) string {
	var parts []string
	for _, f := range []struct {
		name string
		v    int
	}{{"max_message_length", l.MaxMessageLength}, {"max_content_length", l.MaxContentLength}, {"max_event_tags", l.MaxEventTags},
		{"max_subscriptions", l.MaxSubscriptions}, {"max_filters", l.MaxFilters}, {"max_limit", l.MaxLimit}} {
		if f.v > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", f.name, f.v))
		}
	}
	if l.AuthRequired {
		parts = append(parts, "auth_required")
	}
	if len(parts) == 0 {
		return "limits: none advertised"
	}
	return "limits: " + strings.Join(parts, ", ")
}

// checkClock compares this clock with the relays' as the agent does.
func checkClock(ctx context.Context, cfg config.Config, now func() time.Time) checkResult {
	c := agent.CheckClock(ctx, cfg.AgentConfig(""), now)
	r := checkResult{Check: "clock", Status: checkFail}
	switch {
	case !c.Judged:
		var why []string
		for u, err := range c.Errors {
			why = append(why, fmt.Sprintf("%s: %v", u, err))
		}
		r.Detail = fmt.Sprintf("not judged: %d of %d relays gave their time, the agent needs %d (%s)",
			c.Answered, len(cfg.Lease.Relays), c.Need, strings.Join(why, "; "))
	case c.Suspect:
		r.Detail = c.Why + ": the agent would take over nothing and fence what it holds; fix the clock (NTP: timedatectl set-ntp true)"
	default:
		r.Status = checkOK
		r.Detail = fmt.Sprintf("offset %+.1fs against %s (bound %v)", c.Offset.Seconds(), plural(c.Answered, "relay"), c.Bound)
	}
	return r
}

// checkContainment probes the containment backend.containment asks for,
// for this user here.
func checkContainment(cfg config.Config) checkResult {
	r := checkResult{Check: "containment", Status: checkFail}
	if cfg.Backend.Kind != "process" {
		r.Status, r.Detail = checkSkip, fmt.Sprintf("backend.kind = %s: doctor probes the process backend only", cfg.Backend.Kind)
		return r
	}
	c, err := probeContainment(backend.ContainMode(cfg.Backend.Containment))
	switch {
	case err != nil:
		r.Detail = err.Error()
	case c.Warning != "":
		r.Detail = c.Summary + ": " + c.Warning
	default:
		r.Status, r.Detail = checkOK, c.Summary
	}
	return r
}

// probeContainment is backend.ProbeContainment, once per mode and
// process: the host does not change while doctor runs, and each probe
// starts this binary a few times (slow under the race detector, where the
// tests run doctor a dozen times).
func probeContainment(mode backend.ContainMode) (backend.Containment, error) {
	probes.mu.Lock()
	defer probes.mu.Unlock()
	if r, ok := probes.done[mode]; ok {
		return r.c, r.err
	}
	c, err := backend.ProbeContainment(mode)
	if probes.done == nil {
		probes.done = map[backend.ContainMode]probeResult{}
	}
	probes.done[mode] = probeResult{c, err}
	return c, err
}

type probeResult struct {
	c   backend.Containment
	err error
}

var probes struct {
	mu   sync.Mutex
	done map[backend.ContainMode]probeResult
}

// checkIsolation says as which users workloads would run, with the
// backend's own start-up probe (both backends isolate alike: a container
// runs as its workload's uid). It passes only when each workload runs as
// a user that is not the agent's: with isolation none workloads can read
// the key file and the database, and where the agent cannot isolate no
// workload starts.
func checkIsolation(cfg config.Config) checkResult {
	r := checkResult{Check: "isolation", Status: checkFail}
	iso, err := backend.ProbeIsolation(cfg.ProcessConfig())
	switch {
	case err != nil:
		r.Detail = err.Error()
	case iso.Active:
		r.Status, r.Detail = checkOK, "workloads run as "+iso.Users+", directories under "+iso.WorkloadDir
	case iso.Mode == backend.IsolateNone:
		r.Detail = iso.Users + ": " + iso.Warning
	default:
		// The warning says that no workload starts, why, and the fix.
		r.Detail = iso.Warning
	}
	return r
}

// checkPodman checks, with backend.kind = podman, the podman backend as
// run will use it: the podman binary, its OCI runtime, and one throwaway
// container run with backend.podman_run_args and the backend's own
// options (backend.ProbePodman).
func checkPodman(ctx context.Context, cfg config.Config) checkResult {
	r := checkResult{Check: "podman", Status: checkFail}
	if cfg.Backend.Kind != "podman" {
		r.Status, r.Detail = checkSkip, "backend.kind = "+cfg.Backend.Kind+": no containers"
		return r
	}
	pr, err := backend.ProbePodman(ctx, cfg.PodmanConfig())
	r.Target = pr.Podman
	if r.Target == "" {
		r.Target = cfg.Backend.Podman
	}
	switch {
	case errors.Is(err, backend.ErrPodmanProbe):
		r.Detail = fmt.Sprintf("podman %s, runtime %s: %v: every container would fail so (set backend.podman_run_args: "+
			"on hosts with low nofile/nproc limits or hybrid cgroups, [\"--runtime\", \"runc\", \"--ulimit\", \"nofile=1024:1024\", \"--ulimit\", \"nproc=4096:4096\"])",
			pr.Version, pr.Runtime, err)
	case err != nil:
		r.Detail = err.Error()
	default:
		who := "the image's user"
		if pr.User != "" {
			who = "uid:gid " + pr.User
		}
		r.Status = checkOK
		r.Detail = fmt.Sprintf("podman %s, runtime %s; a throwaway container ran with podman_run_args %q as %s in %v",
			pr.Version, pr.Runtime, cfg.Backend.PodmanRunArgs, who, pr.Took.Round(time.Millisecond))
	}
	return r
}

// checkBlossom checks that every uploader server answers.
func checkBlossom(ctx context.Context, cfg config.Config) []checkResult {
	servers := cfg.UploaderConfig().Servers
	if len(servers) == 0 {
		return []checkResult{{Check: "blossom", Status: checkSkip, Detail: "no uploader.servers: checkpoint uploads are off"}}
	}
	client := &http.Client{}
	out := make([]checkResult, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Go(func() {
			r := checkResult{Check: "blossom", Target: srv, Status: checkFail}
			status, err := uploader.ProbeServer(ctx, client, strings.TrimRight(srv, "/"))
			switch {
			case err != nil:
				r.Detail = "unreachable: " + err.Error()
			case status >= 500:
				r.Detail = fmt.Sprintf("answers HEAD /upload with %d %s", status, http.StatusText(status))
			default:
				r.Status, r.Detail = checkOK, fmt.Sprintf("reachable (HEAD /upload: %d)", status)
			}
			out[i] = r
		})
	}
	wg.Wait()
	return out
}

// checkDisk checks the free space of the file system the data dir is on
// (or will be: its nearest existing parent).
func checkDisk(cfg config.Config, minFreeMiB uint64) checkResult {
	dir := cfg.Agent.DataDir
	r := checkResult{Check: "disk", Target: dir, Status: checkFail}
	path := dir
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		parent := filepath.Dir(path)
		if parent == path {
			break
		}
		path = parent
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		r.Detail = fmt.Sprintf("statfs %s: %v", path, err)
		return r
	}
	free := st.Bavail * uint64(st.Bsize)
	total := st.Blocks * uint64(st.Bsize)
	pct := 0.0
	if total > 0 {
		pct = 100 * float64(free) / float64(total)
	}
	r.Detail = fmt.Sprintf("%s free of %s (%.0f%%)", mib(free), mib(total), pct)
	if free < minFreeMiB<<20 {
		r.Detail += fmt.Sprintf(": below --min-free-mib %d (a full disk holds every machine step: the agent fences but starts nothing)", minFreeMiB)
		return r
	}
	r.Status = checkOK
	return r
}

// mib formats a byte count in MiB or GiB.
func mib(b uint64) string {
	if b >= 10<<30 {
		return fmt.Sprintf("%d GiB", b>>30)
	}
	return fmt.Sprintf("%d MiB", b>>20)
}

// plural is "1 relay", "3 relays".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
