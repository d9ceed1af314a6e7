package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/internal/localrelay"
)

// restFigures are phase 1's: the fleet at rest.
type restFigures struct {
	window       time.Duration
	cpuPct       []float64 // each provider's agent, % of one core
	rssMiB       []float64
	beatBytes    []float64 // each provider's largest heartbeat event
	beatEvents   []float64 // and the events of its beat
	relays       []relayFigures
	paygressBeat int // bytes of a Paygress beat (its stored and ephemeral events as EVENT frames)
}

// relayFigures are one relay's traffic over a window.
type relayFigures struct {
	kind                               string
	eventsPerSec, inPerSec, outPerSec  float64
	subs, conns                        int
	cpuPct, rssMiB                     float64
	refusals                           map[string]int     // what it refused in the window, by its words
	kinds                              map[string]float64 // EVENTs in a second by kind (raw counts in snapshots)
	eventsIn, bytesIn, bytesOut, cpuNs int64              // raw, for deltas
}

// relaySnapshot reads every relay's stats and process figures.
func (f *fleet) relaySnapshot() []relayFigures {
	out := make([]relayFigures, len(f.relays))
	for i, r := range f.relays {
		st := r.Stats()
		out[i] = relayFigures{kind: string(r.Kind()), subs: st.Subscriptions, conns: st.Connections, refusals: st.Refusals,
			eventsIn: st.EventsIn, bytesIn: st.BytesIn, bytesOut: st.BytesOut, kinds: map[string]float64{}}
		for k, n := range st.KindsIn {
			out[i].kinds[k] = float64(n)
		}
		if s, err := sampleProc(r.PID()); err == nil {
			out[i].cpuNs = int64(s.cpu)
			out[i].rssMiB = inMiB(s.rss)
		}
	}
	return out
}

// relayDelta is the traffic between two snapshots over d.
func relayDelta(a, b []relayFigures, d time.Duration) []relayFigures {
	out := make([]relayFigures, len(b))
	for i := range b {
		x := b[i]
		s := d.Seconds()
		x.eventsPerSec = float64(b[i].eventsIn-a[i].eventsIn) / s
		x.inPerSec = float64(b[i].bytesIn-a[i].bytesIn) / s
		x.outPerSec = float64(b[i].bytesOut-a[i].bytesOut) / s
		x.cpuPct = 100 * float64(b[i].cpuNs-a[i].cpuNs) / float64(d)
		x.kinds = map[string]float64{}
		for k, n := range b[i].kinds {
			if v := (n - a[i].kinds[k]) / s; v > 0 {
				x.kinds[k] = math.Round(v*100) / 100
			}
		}
		x.refusals = map[string]int{}
		for k, v := range b[i].refusals {
			if n := v - a[i].refusals[k]; n > 0 {
				x.refusals[k] = n
			}
		}
		out[i] = x
	}
	return out
}

// atRest measures phase 1 over o.rest, a heartbeat after every workload
// was placed.
func (f *fleet) atRest() restFigures {
	tb := f.tb
	lt := f.o.profile.lt
	time.Sleep(lt.Heartbeat)
	r := restFigures{window: f.o.rest}
	samples := func() []procSample {
		out := make([]procSample, len(f.providers))
		for i, p := range f.providers {
			out[i], _ = sampleProc(p.run.cmd.Process.Pid)
		}
		return out
	}
	s0, rel0, t0 := samples(), f.relaySnapshot(), time.Now()
	time.Sleep(f.o.rest)
	s1, rel1, t1 := samples(), f.relaySnapshot(), time.Now()
	for i, p := range f.providers {
		r.cpuPct = append(r.cpuPct, 100*float64(s1[i].cpu-s0[i].cpu)/float64(s1[i].at.Sub(s0[i].at)))
		r.rssMiB = append(r.rssMiB, inMiB(s1[i].rss))
		if m, err := p.metrics(); err == nil {
			r.beatBytes = append(r.beatBytes, sumMetric(m, "agent_heartbeat_event_bytes"))
			r.beatEvents = append(r.beatEvents, sumMetric(m, "agent_heartbeat_events"))
		}
	}
	r.relays = relayDelta(rel0, rel1, t1.Sub(t0))
	// Paygress: one beat per provider per interval, its stored and
	// ephemeral heartbeat, carrying a count (our builder writes an empty
	// list beside it, 15 bytes).
	k, _ := identity.NewKeys(nostr.GeneratePrivateKey())
	st, eph, err := heartbeat.BuildHeartbeats(k, heartbeat.HeartbeatParams{At: time.Now(), ActiveWorkloads: uint32(f.o.workloads / f.o.providers)})
	if err != nil {
		tb.Fatal(err)
	}
	for _, ev := range []*nostr.Event{st, eph} {
		b, _ := json.Marshal([]any{"EVENT", ev})
		r.paygressBeat += len(b)
	}
	return r
}

// rackFigures are phase 2's: a rack killed at once.
type rackFigures struct {
	killed, workloads int
	toLive            []time.Duration // each of the rack's workloads: kill to Live elsewhere
	bound             time.Duration
	notLive           []string // not Live elsewhere within the wait
	claims, withdrawn float64
	answers           map[string]float64 // claim answers other than accepted, by outcome/reason
	relays            []relayFigures     // traffic and refusals during the phase
	window            time.Duration
	busiest           int     // the survivor that was rank-0 standby of the most of the rack's workloads
	busiestSlots      int     // how many
	busiestRest       float64 // its RSS before the kill, MiB
	busiestPeak       float64 // its peak RSS during the phase, MiB
	peakMax           float64 // the highest peak of any survivor, MiB
	peakMaxOf         int
}

// rackDies kills the first o.rack providers with SIGKILL at once and
// waits until every workload they held is Live elsewhere.
func (f *fleet) rackDies() rackFigures {
	tb := f.tb
	o := f.o
	rack := f.providers[:o.rack]
	survivors := f.providers[o.rack:]
	r := rackFigures{killed: len(rack), bound: o.profile.takeoverBound(), answers: map[string]float64{}}
	var held []*fleetWorkload
	slots := map[int]int{}
	for _, w := range f.workloads {
		if w.holder < o.rack {
			held = append(held, w)
			w.rackHolder = w.holder
			slots[w.s1]++
		}
	}
	r.workloads = len(held)
	for _, p := range survivors {
		if slots[p.i] > r.busiestSlots {
			r.busiest, r.busiestSlots = p.i, slots[p.i]
		}
	}
	for _, p := range survivors {
		if err := resetPeak(p.run.cmd.Process.Pid); err != nil {
			tb.Logf("reset the peak RSS of provider %d: %v", p.i, err)
		}
	}
	if s, err := sampleProc(f.providers[r.busiest].run.cmd.Process.Pid); err == nil {
		r.busiestRest = inMiB(s.rss)
	}
	m0 := f.claimCounts(survivors)
	rel0, t0 := f.relaySnapshot(), time.Now()

	var wg sync.WaitGroup
	for _, p := range rack {
		p.rackGone = true
		wg.Go(p.kill)
	}
	killed := time.Now()
	wg.Wait()
	for _, w := range held {
		w.killedAt = killed
	}
	limit := r.bound + 2*time.Minute
	pending := map[string]*fleetWorkload{}
	for _, w := range held {
		pending[w.id] = w
	}
	for len(pending) > 0 && time.Since(killed) < limit {
		v := f.view(survivors)
		for id, ps := range v.liveOn() {
			w := pending[id]
			if w == nil {
				continue
			}
			for _, c := range ps {
				if c.epoch > w.epoch {
					w.liveAt, w.holder, w.epoch = v.at, c.provider, c.epoch
					r.toLive = append(r.toLive, v.at.Sub(killed))
					delete(pending, id)
					break
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	for id := range pending {
		r.notLive = append(r.notLive, id)
	}
	// Let the claim steps' last withdrawals and announcements go out.
	time.Sleep(2 * o.profile.lt.Heartbeat)
	m1 := f.claimCounts(survivors)
	rel1, t1 := f.relaySnapshot(), time.Now()
	r.window = t1.Sub(t0)
	r.relays = relayDelta(rel0, rel1, r.window)
	r.claims = m1["claimed"] - m0["claimed"]
	r.withdrawn = m1["withdrawn"] - m0["withdrawn"]
	for k, v := range m1 {
		if strings.Contains(k, "/") && v-m0[k] > 0 {
			r.answers[k] = v - m0[k]
		}
	}
	for _, p := range survivors {
		s, err := sampleProc(p.run.cmd.Process.Pid)
		if err != nil {
			continue
		}
		if inMiB(s.hwm) > r.peakMax {
			r.peakMax, r.peakMaxOf = inMiB(s.hwm), p.i
		}
		if p.i == r.busiest {
			r.busiestPeak = inMiB(s.hwm)
		}
	}
	return r
}

// claimCounts sums the providers' claim metrics: "claimed", "withdrawn",
// and "outcome/reason" of every claim answer other than accepted.
func (f *fleet) claimCounts(ps []*fleetProvider) map[string]float64 {
	out := map[string]float64{}
	for _, p := range ps {
		m, err := p.metrics()
		if err != nil {
			continue
		}
		out["claimed"] += sumMetric(m, "agent_promotions_total", `outcome="claimed"`)
		out["withdrawn"] += sumMetric(m, "agent_promotions_total", `outcome="withdrawn"`)
		for k, v := range m {
			if !strings.HasPrefix(k, "agent_claim_answers_total{") || strings.Contains(k, `outcome="accepted"`) || v == 0 {
				continue
			}
			out[labelValue(k, "outcome")+"/"+labelValue(k, "reason")] += v
		}
	}
	return out
}

// labelValue is label's value in a sample name{a="x",b="y"}.
func labelValue(sample, label string) string {
	_, rest, ok := strings.Cut(sample, label+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// backFigures are phase 3's: the rack restarted.
type backFigures struct {
	toRejoined time.Duration // until every former holder watches its workloads as a standby
	workloads  int
}

// rackReturns starts the rack's agents again on their data dirs and waits
// until each watches every workload it held as a standby of the new
// holder, running none of them.
func (f *fleet) rackReturns() backFigures {
	rack := f.providers[:f.o.rack]
	var r backFigures
	formerly := map[int][]*fleetWorkload{}
	for _, w := range f.workloads {
		if !w.killedAt.IsZero() && w.holder >= f.o.rack {
			formerly[w.rackHolder] = append(formerly[w.rackHolder], w)
			r.workloads++
		}
	}
	began := time.Now()
	f.startAll(rack)
	for _, p := range rack {
		p.rackGone = false
	}
	f.waitView("the rack's former holders standing by", f.o.profile.takeoverBound()+3*time.Minute, time.Second, func(v fleetView) (bool, string) {
		idx := indexView(v)
		missing := 0
		example := ""
		for _, p := range rack {
			for _, w := range formerly[p.i] {
				row := idx[p.i][w.id]
				if row.State != "standby" || row.Epoch < w.epoch || row.Running {
					missing++
					if example == "" {
						example = fmt.Sprintf("%s on provider %d: %q at epoch %d (holder %d at %d)", w.id, p.i, row.State, row.Epoch, w.holder, w.epoch)
					}
				}
			}
		}
		return missing == 0, fmt.Sprintf("%d of %d not standing by (e.g. %s)", missing, r.workloads, example)
	})
	r.toRejoined = time.Since(began)
	return r
}

// drainFigures are one drained provider's (phase 4).
type drainFigures struct {
	provider   int
	moved      int
	cli        time.Duration // workloads drain --wait, from its start to its exit
	cliOut     string
	cliErr     error
	toLive     []time.Duration // drain command to each moved workload Live elsewhere
	rpoLost    []string        // moved workloads that did not resume at their final value
	notMoved   []string
	undrainErr error
}

// drainOne drains p with workloads drain --wait, waits until each durable
// workload it held is Live elsewhere, checks that each resumed at the value
// it checkpointed when stopped, then undoes the drain.
func (f *fleet) drainOne(p *fleetProvider) drainFigures {
	r := drainFigures{provider: p.i}
	v := f.view(nil)
	var moving []*fleetWorkload
	for _, st := range v.by[p.i].Workloads {
		if w := f.byID[st.ID]; w != nil && w.durable && st.State == "live" && st.Running {
			moving = append(moving, w)
			w.holder, w.epoch = p.i, st.Epoch
		}
	}
	r.moved = len(moving)
	began := time.Now()
	cliDone := make(chan struct{})
	go func() {
		defer close(cliDone)
		out, err := f.cli("workloads", "drain", "--config", p.cfg, "--wait")
		r.cli, r.cliOut, r.cliErr = time.Since(began), out, err
	}()
	limit := 2*f.o.profile.takeoverBound() + time.Duration(len(moving))*5*time.Second
	pending := map[string]*fleetWorkload{}
	for _, w := range moving {
		w.drainStart = began
		pending[w.id] = w
	}
	for len(pending) > 0 && time.Since(began) < limit {
		v := f.view(nil)
		for id, ps := range v.liveOn() {
			w := pending[id]
			if w == nil {
				continue
			}
			for _, c := range ps {
				if c.provider != p.i && c.epoch > w.epoch {
					r.toLive = append(r.toLive, v.at.Sub(began))
					w.movedLiveAt, w.holder, w.epoch = v.at, c.provider, c.epoch
					delete(pending, id)
					break
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	for id := range pending {
		r.notMoved = append(r.notMoved, id)
	}
	<-cliDone
	// /status shows a workload running once its supervisor started it; the
	// counter's start line follows when its shell has run that far, which
	// on two loaded cores can be a second or more later.
	var lost []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		lost = f.rpoCheck(moving)
		if len(lost) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	r.rpoLost = lost
	_, r.undrainErr = f.cli("workloads", "drain", "--undo", "--config", p.cfg, "--wait")
	return r
}

// rpoCheck lists the moved workloads of ws whose counter did not start at
// its new epoch with the value it had at the end of the one before.
func (f *fleet) rpoCheck(ws []*fleetWorkload) []string {
	starts, _ := os.ReadFile(f.starts)
	var lost []string
	for _, w := range ws {
		if w.movedLiveAt.IsZero() {
			continue
		}
		final, okF := counterAt(starts, w.id, "final", w.epoch-1)
		first, okS := counterAt(starts, w.id, "start", w.epoch)
		if !okF || !okS || first != final {
			lost = append(lost, fmt.Sprintf("%s: final %d (%v) at epoch %d, start %d (%v) at %d", w.id, final, okF, w.epoch-1, first, okS, w.epoch))
		}
	}
	return lost
}

// counterAt is the value of the durable counter id's line "id what epoch
// value" in starts.
func counterAt(starts []byte, id, what string, epoch uint64) (int, bool) {
	for _, l := range strings.Split(string(starts), "\n") {
		var gotID, gotWhat string
		var e uint64
		var n int
		if _, err := fmt.Sscanf(l, "%s %s %d %d", &gotID, &gotWhat, &e, &n); err == nil && gotID == id && gotWhat == what && e == epoch {
			return n, true
		}
	}
	return 0, false
}

// cli runs the provider-agent binary with args (bounded by 30 minutes)
// and returns its output; an error for a non-zero exit.
func (f *fleet) cli(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, agentBinary(f.tb), args...)
	cmd.Env = runEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = fmt.Errorf("exit %d", ee.ExitCode())
	}
	return strings.TrimSpace(out.String()), err
}

// limitRefusals sums what relays refused for limits (a rate limit, too
// many REQs, too large) in rs, by those three reasons.
func limitRefusals(rs []relayFigures) map[string]int {
	out := map[string]int{}
	for _, r := range rs {
		for k, v := range r.refusals {
			switch {
			case strings.Contains(k, localrelay.RateLimitReason):
				out["rate limit"] += v
			case strings.Contains(k, "too many concurrent REQs"):
				out["too many REQs"] += v
			case strings.Contains(k, "too large"):
				out["too large"] += v
			}
		}
	}
	return out
}
