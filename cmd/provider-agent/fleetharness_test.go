package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/agent"
	"provideragent/backend"
	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/internal/devblossom"
	"provideragent/internal/localrelay"
	"provideragent/internal/relaytest"
	"provideragent/lease"
	"provideragent/relay"
)

// A fleet: P providers, each `provider-agent run` in a child
// process with a data dir and a TOML config of its own, on three child
// relays of the kinds CI runs, and W workloads granted by one issuer that
// every provider trusts, each with a primary and two standbys placed so
// that load spreads evenly and no workload has two members in one rack.

// fleetProfile is the lease's timings a fleet's configs are written with.
type fleetProfile struct {
	name                                  string
	lt                                    leaseTimings
	claimBase, claimMax, claimTimeout     time.Duration
	publishTimeout, stopGrace, restoreFor time.Duration
}

// fastFleet is docs/durable.md's fast profile: 5 s heartbeats, stale 15 s,
// t1 10 s, t2 20 s, max_skew 5 s, relay_delay 5 s, provision_timeout 30 s,
// claim_timeout 10 s, takeover_after 75 s (the floor is 56 s).
var fastFleet = fleetProfile{name: "fast",
	lt: leaseTimings{T1: 10 * time.Second, T2: 20 * time.Second, Stale: 15 * time.Second, MaxSkew: 5 * time.Second,
		RelayDelay: 5 * time.Second, ProvisionTimeout: 30 * time.Second, TakeoverAfter: 75 * time.Second, Heartbeat: 5 * time.Second},
	claimBase: 5 * time.Second, claimMax: 20 * time.Second, claimTimeout: 10 * time.Second,
	publishTimeout: 5 * time.Second, stopGrace: 5 * time.Second, restoreFor: 20 * time.Second}

// ciFleet is the fast profile at 0.4 of its timings (heartbeats 2 s,
// stale 6 s, t1 4 s, t2 8 s, max_skew and relay_delay 2 s,
// provision_timeout 12 s, claim_timeout 4 s, takeover_after 30 s over a
// floor of 23 s): what CI's TestFleet runs, so that a rack's takeover
// takes under a minute.
var ciFleet = fleetProfile{name: "ci",
	lt: leaseTimings{T1: 4 * time.Second, T2: 8 * time.Second, Stale: 6 * time.Second, MaxSkew: 2 * time.Second,
		RelayDelay: 2 * time.Second, ProvisionTimeout: 12 * time.Second, TakeoverAfter: 30 * time.Second, Heartbeat: 2 * time.Second},
	claimBase: 2 * time.Second, claimMax: 8 * time.Second, claimTimeout: 4 * time.Second,
	publishTimeout: 2 * time.Second, stopGrace: 2 * time.Second, restoreFor: 8 * time.Second}

// demoFleet is the demo's timings (lease.DemoConfig): 1 s heartbeats,
// stale 3 s. A fleet of 12 providers starting 300 workloads at once on two
// loaded cores loses quorum with them (machine-loop turns of several
// seconds while SQLite waits on the disk): kept to show it.
var demoFleet = fleetProfile{name: "demo", lt: demoTimings,
	claimBase: time.Second, claimMax: 4 * time.Second, claimTimeout: 5 * time.Second,
	publishTimeout: 2 * time.Second, stopGrace: 2 * time.Second, restoreFor: 5 * time.Second}

// takeoverBound is the lease's bound from a holder's death (kill -9: no
// revocation) to a standby Live: takeover_after of silence, the proof lag
// (a heartbeat and twice relay_delay: lease/doc.go, "The takeover
// argument"), a claim step of up to two rounds with relay_delay, and the
// new holder's first beat on quorum.
func (p fleetProfile) takeoverBound() time.Duration {
	lt := p.lt
	return lt.TakeoverAfter + lt.Heartbeat + 2*lt.RelayDelay + lt.RelayDelay + 2*p.claimTimeout + lt.Heartbeat
}

// fleetOpts size and shape a fleet.
type fleetOpts struct {
	providers, workloads int
	profile              fleetProfile
	rest                 time.Duration // the at-rest window
	rack, drain          int           // providers killed at once; drained one after another
	peers                int           // a primary's standbys come from this many providers after it (0: from all)
	grantsPerSecond      int           // the grants' pace (0: grantRate, or grantRateRecorded in record mode)
	rateLimit            bool          // the khatru relay rate-limits per key and per connection
	// record runs the agents built with -tags fleetbench: workloads other
	// than the durable counters are recorded starts and stops, not
	// processes (fleetbackend_fleetbench.go), so that 10,000 fit.
	record bool
}

// fleetRack is the rack of provider i when racks hold n providers each.
func fleetRack(i, n int) int { return i / n }

// placeFleet places workload k: its primary, and two standbys on other
// racks than the primary's, each provider taking about as many rank-0 and
// rank-1 standbys as any other. With peers > 0 a primary's standbys are
// drawn from a window of peers providers after it on other racks (ring
// order), not from every provider: each provider then follows about peers
// others, and a relay sends each beat to about peers followers instead of
// to nearly every provider (its egress O(P x peers), not O(P^2)); the
// load stays even, each provider standing by for the same number of
// workloads.
func placeFleet(k, providers, rackSize, peers int) (primary, s1, s2 int) {
	primary = k % providers
	round := k / providers
	var others []int
	for j := 1; j < providers; j++ {
		c := (primary + j) % providers
		if fleetRack(c, rackSize) != fleetRack(primary, rackSize) {
			others = append(others, c)
		}
	}
	if peers > 1 && peers < len(others) {
		// Ring order skips the primary's own rack, so the others of every
		// primary of a rack begin at the next rack's first provider:
		// shifted by the primary's place in its rack, each provider is in
		// exactly peers windows.
		at := primary % rackSize
		others = append(others[at:], others[:at]...)[:peers]
	}
	n := len(others)
	s1 = others[round%n]
	s2 = others[(round+n/2)%n]
	if s2 == s1 {
		s2 = others[(round+1)%n]
	}
	return primary, s1, s2
}

// fleetWorkload is one workload of the fleet as granted.
type fleetWorkload struct {
	id                   string
	primary, s1, s2      int
	durable              bool
	epoch                uint64 // the epoch the harness expects it at
	holder               int    // the provider the harness expects to hold it
	rackHolder           int    // its holder in the rack the harness killed
	liveAt, movedLiveAt  time.Time
	killedAt, drainStart time.Time
}

// fleetProvider is one provider: its files and its run.
type fleetProvider struct {
	i              int
	dir, cfg       string
	pub, npub      string
	run            *fleetRun
	runs           []runSpan // every run of its agent, for the record mode's monitor
	rackGone, lost bool
}

// runSpan is when one run of an agent lived (end zero: it still runs).
type runSpan struct{ start, end time.Time }

// fleet is a running fleet.
type fleet struct {
	tb        testing.TB
	o         fleetOpts
	tmp       string
	relays    []*relaytest.Relay
	urls      []string
	blossom   *devblossom.Server
	issuer    *identity.Keys
	providers []*fleetProvider
	byPub     map[string]int
	workloads []*fleetWorkload
	byID      map[string]*fleetWorkload
	starts    string // durable counters' start and final values
	mon       *procMonitor
}

// newFleet starts the relays, dev-blossom and the process monitor, and
// writes every provider's key and config; no agent runs yet.
func newFleet(tb testing.TB, o fleetOpts) *fleet {
	tb.Helper()
	f := &fleet{tb: tb, o: o, tmp: tb.TempDir(), byPub: map[string]int{}, byID: map[string]*fleetWorkload{}}
	rl := relaytest.KindOptions{}
	if o.rateLimit {
		rl.RateLimit = fleetRateLimit
	}
	for _, k := range []relaytest.Kind{relaytest.StrfryEmulated, relaytest.Khatru, relaytest.NostrRelay} {
		ko := relaytest.KindOptions{}
		if k == relaytest.Khatru {
			ko = rl
		}
		r := relaytest.StartKind(tb, k, ko)
		f.relays = append(f.relays, r)
		f.urls = append(f.urls, r.URL())
	}
	b, err := devblossom.New(devblossom.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	if err := b.Start(context.Background(), "127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	f.blossom = b
	if f.issuer, err = identity.NewKeys(nostr.GeneratePrivateKey()); err != nil {
		tb.Fatal(err)
	}
	shared := sharedDir(tb)
	// The counters of every workload user append to it: created here, by
	// the shared directory's owner, open to all (a sticky directory's
	// protected_regular refuses O_CREAT on another user's file).
	f.starts = filepath.Join(shared, "starts")
	if err := os.WriteFile(f.starts, nil, 0o666); err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(f.starts, 0o666); err != nil {
		tb.Fatal(err)
	}
	wdir := workloadDir(tb)
	for i := range o.providers {
		p := &fleetProvider{i: i, dir: filepath.Join(f.tmp, fmt.Sprintf("p%03d", i))}
		p.pub = newKey(tb, filepath.Join(p.dir, "identity.key"))
		p.npub, _ = identity.EncodeNpub(p.pub)
		p.cfg = f.writeConfig(p, wdir)
		f.providers = append(f.providers, p)
		f.byPub[p.pub] = i
	}
	f.mon = startProcMonitor(tb, fleetMarker)
	return f
}

// fleetRateLimit is the khatru relay's bound when opts.rateLimit is set:
// 10 events a second per key (bursts of 100) and 20 per connection
// (bursts of 200), room for a provider's beats, claims and outbox, not
// for a flood.
var fleetRateLimit = localrelay.RateLimit{KeyPerSecond: 10, KeyBurst: 100, ConnPerSecond: 20, ConnBurst: 200}

// writeConfig writes provider p's TOML config and returns its path.
func (f *fleet) writeConfig(p *fleetProvider, workloadDir string) string {
	pr := f.o.profile
	lt := pr.lt
	body := fmt.Sprintf(`[agent]
data_dir = %q
listen = "127.0.0.1:0"
trusted_issuers = [%q]
publish_timeout = %q

[lease]
relays = [%s]
quorum = 2
t1 = %q
t2 = %q
stale = %q
max_skew = %q
relay_delay = %q
provision_timeout = %q
takeover_after = %q
claim_retry_base = %q
claim_retry_max = %q
claim_timeout = %q

[heartbeat]
interval = %q

[backend]
workload_dir = %q
stop_grace = %q

[log]
level = %q
`, p.dir, f.issuer.Npub(), pr.publishTimeout, quoteList(f.urls), lt.T1, lt.T2, lt.Stale, lt.MaxSkew, lt.RelayDelay,
		lt.ProvisionTimeout, lt.TakeoverAfter, pr.claimBase, pr.claimMax, pr.claimTimeout, lt.Heartbeat, workloadDir, pr.stopGrace,
		cmp.Or(os.Getenv("FLEET_LOGLEVEL"), "info"))
	path := filepath.Join(f.tmp, fmt.Sprintf("p%03d.toml", p.i))
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		f.tb.Fatal(err)
	}
	return path
}

// fleetMarker begins every fleet workload's command line (": fleet-<id>;"),
// so that the process monitor finds its supervisor by its argv.
const fleetMarker = ": fleet-"

// plainLine is a workload that runs until stopped; a process, in record
// mode too, when process is set.
func plainLine(id string, process bool) string {
	if process {
		return fleetMarker + id + "; " + fleetProcessMarker + " exec sleep 1000000000"
	}
	return fleetMarker + id + "; exec sleep 1000000000"
}

// counterLine is a durable workload: a counter of seconds that resumes
// from its checkpoint, appends "<id> start <epoch> <value>" to starts when
// it starts, and on SIGTERM checkpoints and appends "<id> final <epoch>
// <value>": a move resumes at exactly the final value (RPO 0). It forks
// nothing while it runs (one sleep, waited for).
func durableLine(id, starts string) string {
	return fleetMarker + id + `; ` + fleetProcessMarker + ` d=$PROVIDER_AGENT_CHECKPOINT_DIR; n=$(cat "$d/checkpoint" 2>/dev/null || echo 0); s=$(date +%s); ` +
		`echo "` + id + ` start $PROVIDER_AGENT_EPOCH $n" >> ` + starts + `; ` +
		`trap 'kill $p 2>/dev/null; n=$((n + $(date +%s) - s)); echo "$n" > "$d/checkpoint.tmp" && mv "$d/checkpoint.tmp" "$d/checkpoint"; ` +
		`echo "` + id + ` final $PROVIDER_AGENT_EPOCH $n" >> ` + starts + `; exit 0' TERM; ` +
		`while :; do sleep 100000 & p=$!; wait $p; done`
}

// grantRate bounds the grants published a second: each starts a workload
// process (a supervisor, a PID namespace, a cgroup, a user) on its primary,
// and hundreds of them at once on two cores starve every agent of the
// fleet for seconds (machine-loop turns waiting on SQLite, own heartbeats
// late): a fleet's start is not what this measures.
const grantRate = 40

// grantRateRecorded is grantRate in record mode, where only the durable
// tenth of the workloads starts processes.
const grantRateRecorded = 400

func (o fleetOpts) grantRate() int {
	if o.grantsPerSecond > 0 {
		return o.grantsPerSecond
	}
	if o.record {
		return grantRateRecorded
	}
	return grantRate
}

// grantAll builds every workload's grant (durable: those whose primary is
// one of the providers drained later; processes in record mode too: those
// and the ones whose primary is in the rack killed later) and publishes
// them signed by the issuer, each accepted by a quorum of relays, at most
// grantRate a second.
func (f *fleet) grantAll(durable func(primary int) bool) {
	tb := f.tb
	tb.Helper()
	rackSize := max(1, f.o.rack)
	cfg := relay.DefaultConfig()
	cfg.URLs = f.urls
	pool, err := relay.New(cfg, relay.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	waitForRelays(ctx, len(f.urls), pool.Connected)
	at := time.Now().UTC().Truncate(time.Second)
	jobs := make(chan *nostr.Event)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []string
	for range 32 {
		wg.Go(func() {
			for ev := range jobs {
				// A relay that a loaded machine keeps from answering in
				// time gets the grant again (a duplicate is accepted as
				// one): the fleet's start is not what is measured.
				var res relay.PublishResult
				for try := range 4 {
					if try > 0 {
						time.Sleep(2 * time.Second)
					}
					if res = pool.PublishQuorum(ctx, *ev, 2); res.AcceptedCount() >= 2 {
						break
					}
				}
				if res.AcceptedCount() < 2 {
					mu.Lock()
					failed = append(failed, ev.ID+": "+res.Refusals())
					mu.Unlock()
				}
			}
		})
	}
	pace := time.NewTicker(time.Second / time.Duration(f.o.grantRate()))
	defer pace.Stop()
	for k := range f.o.workloads {
		<-pace.C
		pi, s1, s2 := placeFleet(k, f.o.providers, rackSize, f.o.peers)
		w := &fleetWorkload{id: fmt.Sprintf("w%05d", k), primary: pi, s1: s1, s2: s2, durable: durable(pi), epoch: 1, holder: pi}
		line := plainLine(w.id, pi < f.o.rack)
		var ckpt *lease.CheckpointPolicy
		if w.durable {
			line = durableLine(w.id, f.starts)
			ckpt = &lease.CheckpointPolicy{Servers: []string{f.blossom.URL()}, RestoreTimeout: f.o.profile.restoreFor}
		}
		ev, err := heartbeat.BuildLeaseGrant(f.issuer, heartbeat.LeaseGrantParams{
			WorkloadID: w.id, Primary: f.providers[pi].pub, Standbys: []string{f.providers[s1].pub, f.providers[s2].pub},
			Relays: f.urls, Quorum: 2, Replication: lease.ReplicationWarmStandby,
			RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure, MaxAttempts: 3},
			Command:       backend.ShellCommand(line), Epoch: 1, Checkpoint: ckpt, At: at,
		})
		if err != nil {
			tb.Fatal(err)
		}
		f.workloads = append(f.workloads, w)
		f.byID[w.id] = w
		jobs <- ev
	}
	close(jobs)
	wg.Wait()
	if len(failed) > 0 {
		tb.Fatalf("%d grants not accepted by 2 relays, the first: %s", len(failed), failed[0])
	}
}

// waitSynced waits until every running agent has its relays connected and
// caught up (/status synced).
func (f *fleet) waitSynced(limit time.Duration) {
	f.tb.Helper()
	f.waitView("every agent synced with its relays", limit, 500*time.Millisecond, func(v fleetView) (bool, string) {
		n := 0
		for _, st := range v.by {
			if st.Synced {
				n++
			}
		}
		return n == len(f.providers), fmt.Sprintf("%d of %d synced", n, len(f.providers))
	})
}

// fleetRun is one `provider-agent run` child of the fleet.
type fleetRun struct {
	cmd    *exec.Cmd
	status string
	log    string // its stderr: p<i>.log in $FLEET_LOGDIR, else the test's temp dir
	done   chan struct{}
}

var fleetStatusClient = &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2}}

// startAll starts the agents of providers ps at once and waits until each
// printed its /status address.
func (f *fleet) startAll(ps []*fleetProvider) {
	tb := f.tb
	tb.Helper()
	bin := agentBinary(tb)
	if f.o.record {
		bin = fleetBinary(tb)
	}
	errs := make(chan error, len(ps))
	for _, p := range ps {
		go func() { errs <- f.start(bin, p) }()
	}
	var first error
	for range ps {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		tb.Fatal(first)
	}
}

func (f *fleet) start(bin string, p *fleetProvider) error {
	r := &fleetRun{done: make(chan struct{})}
	r.cmd = exec.Command(bin, "run", "--config", p.cfg)
	r.cmd.Env = runEnv()
	if f.o.record {
		r.cmd.Env = append(r.cmd.Env, fleetRecordEnv+"="+f.recordFile(p))
	}
	logDir := cmp.Or(os.Getenv("FLEET_LOGDIR"), f.tmp)
	log, err := os.OpenFile(filepath.Join(logDir, fmt.Sprintf("p%03d.log", p.i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own descriptor
	r.log = log.Name()
	r.cmd.Stderr = log
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := r.cmd.Start(); err != nil {
		return err
	}
	first := followLines(out, nil, func() {
		_ = r.cmd.Wait()
		close(r.done)
	})
	p.run = r
	p.runs = append(p.runs, runSpan{start: time.Now()})
	f.tb.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.done
		if f.tb.Failed() {
			b, _ := os.ReadFile(r.log)
			f.tb.Logf("provider %d log %s (last 2 KiB):\n%s", p.i, r.log, tail(string(b), 2048))
		}
	})
	select {
	case line := <-first:
		m := statusURL.FindStringSubmatch(line)
		if m == nil {
			return fmt.Errorf("provider %d: run's first line = %q", p.i, line)
		}
		r.status = m[1]
		return nil
	case <-r.done:
		b, _ := os.ReadFile(r.log)
		return fmt.Errorf("provider %d: run exited before starting: %s", p.i, tail(string(b), 2048))
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("provider %d: run printed nothing within 2 minutes", p.i)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// kill ends p's run with SIGKILL and waits for it.
func (p *fleetProvider) kill() {
	_ = p.run.cmd.Process.Signal(syscall.SIGKILL)
	p.runs[len(p.runs)-1].end = time.Now()
	<-p.run.done
}

// recordFile is where p's agent records its workloads in record mode.
func (f *fleet) recordFile(p *fleetProvider) string {
	return filepath.Join(f.tmp, fmt.Sprintf("p%03d.rec", p.i))
}

var (
	fleetBinOnce sync.Once
	fleetBinPath string
	fleetBinErr  error
)

// fleetBinary builds provider-agent with -tags fleetbench once per test
// process, beside agentBinary's (TestMain removes both).
func fleetBinary(tb testing.TB) string {
	tb.Helper()
	fleetBinOnce.Do(func() {
		fleetBinPath = filepath.Join(filepath.Dir(agentBinary(tb)), "provider-agent-fleetbench")
		fleetBinErr = buildAgent(fleetBinPath, "-tags", "fleetbench")
	})
	if fleetBinErr != nil {
		tb.Fatalf("build provider-agent -tags fleetbench: %v", fleetBinErr)
	}
	return fleetBinPath
}

// recordedTwice reads the record files: a recorded workload runs from its
// start line until its stop line or the end of the agent's run that wrote
// it (a kill -9 ends them all, as it ends processes); two such spans of
// one workload that overlap ran it twice.
func (f *fleet) recordedTwice() (twice []string, copies int) {
	type span struct {
		provider   int
		start, end time.Time
	}
	by := map[string][]span{}
	now := time.Now()
	for _, p := range f.providers {
		b, err := os.ReadFile(f.recordFile(p))
		if err != nil {
			continue
		}
		open := map[string]int{} // workload -> index of its open span in by
		endOf := func(at time.Time) time.Time {
			for _, r := range p.runs {
				if !at.Before(r.start) && (r.end.IsZero() || at.Before(r.end)) {
					if r.end.IsZero() {
						return now
					}
					return r.end
				}
			}
			return at
		}
		for _, l := range strings.Split(string(b), "\n") {
			var ms int64
			var what, id string
			var epoch uint64
			if _, err := fmt.Sscanf(l, "%d %s %s %d", &ms, &what, &id, &epoch); err != nil {
				continue
			}
			at := time.UnixMilli(ms)
			switch what {
			case "start":
				by[id] = append(by[id], span{provider: p.i, start: at, end: endOf(at)})
				open[id] = len(by[id]) - 1
				copies++
			case "stop":
				if i, ok := open[id]; ok {
					by[id][i].end = at
					delete(open, id)
				}
			}
		}
	}
	for id, ss := range by {
		slices.SortFunc(ss, func(a, b span) int { return a.start.Compare(b.start) })
		for i := 1; i < len(ss); i++ {
			if ss[i].start.Before(ss[i-1].end) {
				twice = append(twice, fmt.Sprintf("%s: recorded on provider %d until %s and on %d from %s", id,
					ss[i-1].provider, ss[i-1].end.Format(time.StampMilli), ss[i].provider, ss[i].start.Format(time.StampMilli)))
			}
		}
	}
	return twice, copies
}

// status reads p's /status (an error when it is down).
func (p *fleetProvider) status() (agent.Status, error) {
	var st agent.Status
	if p.run == nil {
		return st, errors.New("not running")
	}
	resp, err := fleetStatusClient.Get(p.run.status)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// metrics reads p's /metrics as sample -> value (sample as exposed:
// name{labels}).
func (p *fleetProvider) metrics() (map[string]float64, error) {
	resp, err := fleetStatusClient.Get(strings.TrimSuffix(p.run.status, "/status") + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(l[i+1:], &v); err == nil {
			out[l[:i]] = v
		}
	}
	return out, sc.Err()
}

// sumMetric sums the samples of metric name whose labels contain every
// given "key=\"value\"" pair.
func sumMetric(m map[string]float64, name string, labels ...string) float64 {
	var n float64
	for k, v := range m {
		base, lbl, _ := strings.Cut(k, "{")
		if base != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(lbl, l) {
				ok = false
				break
			}
		}
		if ok {
			n += v
		}
	}
	return n
}

// fleetView is what every running agent's /status says, gathered at once.
type fleetView struct {
	at  time.Time
	by  map[int]agent.Status
	bad map[int]error
}

// view reads the /status of every running provider of ps (nil: all).
func (f *fleet) view(ps []*fleetProvider) fleetView {
	if ps == nil {
		ps = f.providers
	}
	v := fleetView{at: time.Now(), by: map[int]agent.Status{}, bad: map[int]error{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for _, p := range ps {
		if p.run == nil || p.rackGone {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			st, err := p.status()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				v.bad[p.i] = err
				return
			}
			v.by[p.i] = st
		})
	}
	wg.Wait()
	return v
}

// liveOn lists, for each workload, the providers showing it live and
// running at epoch >= min epoch.
func (v fleetView) liveOn() map[string][]liveCopy {
	out := map[string][]liveCopy{}
	for i, st := range v.by {
		for _, w := range st.Workloads {
			if w.State == string(lease.StateLive) && w.Running {
				out[w.ID] = append(out[w.ID], liveCopy{provider: i, epoch: w.Epoch})
			}
		}
	}
	return out
}

type liveCopy struct {
	provider int
	epoch    uint64
}

// waitView polls every running provider's /status until done (given the
// view) is true, for at most limit; progress says what is still missing.
func (f *fleet) waitView(what string, limit time.Duration, every time.Duration, done func(fleetView) (bool, string)) fleetView {
	tb := f.tb
	tb.Helper()
	start := time.Now()
	nextLog := start.Add(30 * time.Second)
	for {
		v := f.view(nil)
		ok, missing := done(v)
		if ok {
			return v
		}
		if time.Since(start) > limit {
			tb.Fatalf("waiting %v for %s: %s (status errors: %d)", limit, what, missing, len(v.bad))
		}
		if time.Now().After(nextLog) {
			tb.Logf("+%.0fs waiting for %s: %s", time.Since(start).Seconds(), what, missing)
			nextLog = nextLog.Add(30 * time.Second)
		}
		time.Sleep(every)
	}
}

// TestPlaceFleetSpreadsEvenly: every provider stands by at rank 0 and at
// rank 1 for about as many workloads as any other, never beside a member
// of its own rack; with a peer window each provider follows at most that
// many others.
func TestPlaceFleetSpreadsEvenly(t *testing.T) {
	for _, tt := range []struct{ providers, workloads, rack, peers int }{
		{12, 300, 1, 0}, {24, 1200, 2, 0}, {24, 1200, 2, 6}, {100, 10000, 10, 8}, {100, 10000, 10, 0},
	} {
		rank0, rank1 := make([]int, tt.providers), make([]int, tt.providers)
		follows := make([]map[int]bool, tt.providers)
		for k := range tt.workloads {
			p, s1, s2 := placeFleet(k, tt.providers, tt.rack, tt.peers)
			if s1 == s2 || fleetRack(s1, tt.rack) == fleetRack(p, tt.rack) || fleetRack(s2, tt.rack) == fleetRack(p, tt.rack) {
				t.Fatalf("%+v: workload %d placed %d, %d, %d: want two standbys on other racks", tt, k, p, s1, s2)
			}
			rank0[s1]++
			rank1[s2]++
			for _, s := range []int{s1, s2} {
				if follows[s] == nil {
					follows[s] = map[int]bool{}
				}
				follows[s][p] = true
			}
		}
		for _, counts := range [][]int{rank0, rank1} {
			if lo, hi := slices.Min(counts), slices.Max(counts); hi-lo > 1+tt.workloads/tt.providers/10 {
				t.Errorf("%+v: standbys per provider from %d to %d: want about even", tt, lo, hi)
			}
		}
		for i, f := range follows {
			if tt.peers > 0 && len(f) > tt.peers {
				t.Errorf("%+v: provider %d follows %d providers, want at most %d", tt, i, len(f), tt.peers)
			}
		}
	}
}
