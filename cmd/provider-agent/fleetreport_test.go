package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// fleet figures: printed as a table (log), held to the claims
// (check), reported as benchmark metrics (report).

// stats is p50 and max of xs.
func stats(xs []float64) (p50, maxV float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2], s[len(s)-1]
}

func secs(d time.Duration) float64 { return d.Seconds() }

// toLiveAll is every drain's kill... drain command to Live elsewhere.
func (r *fleetResult) drainToLive() []time.Duration {
	var out []time.Duration
	for _, d := range r.drains {
		out = append(out, d.toLive...)
	}
	return out
}

// log prints the figures as a table (a benchmark's to stdout).
func (r *fleetResult) log(tb testing.TB) {
	tb.Helper()
	o := r.o
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	how := "processes"
	if o.record {
		how = "recorded starts and stops, durable counters processes"
	}
	placement := "standbys from every provider"
	if o.peers > 0 {
		placement = fmt.Sprintf("standbys from the next %d providers", o.peers)
	}
	w("fleet: %d providers, %d workloads (primary + 2 standbys each, %s; %s), profile %s (heartbeat %v, takeover_after %v), relays strfry-emulated, khatru (rate limit %v), @nostr-relay/core; quorum 2",
		o.providers, o.workloads, placement, how, o.profile.name, o.profile.lt.Heartbeat, o.profile.lt.TakeoverAfter, o.rateLimit)
	w("| phase | figure | value |")
	w("|---|---|---|")
	w("| start | all Live and watched after the first grant (%d grants a second) | %.1f s |", o.grantRate(), secs(r.toAllLive))
	cpu50, cpuMax := stats(r.rest.cpuPct)
	rss50, rssMax := stats(r.rest.rssMiB)
	bb50, bbMax := stats(r.rest.beatBytes)
	ev50, evMax := stats(r.rest.beatEvents)
	w("| at rest (%v) | agent CPU, %% of a core, p50 / max | %.2f / %.2f |", r.rest.window, cpu50, cpuMax)
	w("| at rest | agent RSS, MiB, p50 / max | %.1f / %.1f |", rss50, rssMax)
	w("| at rest | heartbeat: largest event, bytes, p50 / max; events a beat p50 / max | %.0f / %.0f; %.0f / %.0f |", bb50, bbMax, ev50, evMax)
	pg := float64(o.providers) * float64(r.rest.paygressBeat) / o.profile.lt.Heartbeat.Seconds()
	pgEv := float64(o.providers) * 2 / o.profile.lt.Heartbeat.Seconds()
	for _, rel := range r.rest.relays {
		w("| at rest | relay %s: events/s in, KB/s in, KB/s out, subscriptions, connections, CPU %%, RSS MiB | %.1f, %.1f, %.1f, %d, %d, %.1f, %.0f |",
			rel.kind, rel.eventsPerSec, rel.inPerSec/1000, rel.outPerSec/1000, rel.subs, rel.conns, rel.cpuPct, rel.rssMiB)
	}
	for _, rel := range r.rest.relays {
		w("| at rest | relay %s: events/s in by kind | %s |", rel.kind, fmtMap(rel.kinds))
	}
	in50 := 0.0
	for _, rel := range r.rest.relays {
		in50 += rel.inPerSec / float64(len(r.rest.relays))
	}
	w("| at rest | Paygress (a beat per provider per interval carrying a count, %d B): events/s, KB/s in per relay; ours / Paygress (KB/s in, mean of the relays) | %.1f, %.2f; %.1fx |",
		r.rest.paygressBeat, pgEv, pg/1000, in50/pg)
	rk := r.rack
	w("| rack dies | providers killed (kill -9 at once), their workloads | %d, %d |", rk.killed, rk.workloads)
	w("| rack dies | kill to Live elsewhere, p50 / p99 / max (bound %v) | %.1f / %.1f / %.1f s |", rk.bound,
		secs(percentile(rk.toLive, 50)), secs(percentile(rk.toLive, 99)), secs(percentile(rk.toLive, 100)))
	w("| rack dies | not Live elsewhere in time | %d |", len(rk.notLive))
	w("| rack dies | claims published, withdrawn | %.0f, %.0f |", rk.claims, rk.withdrawn)
	w("| rack dies | claim answers not accepted (outcome/reason) | %s |", fmtMap(rk.answers))
	w("| rack dies | relay refusals for limits (rate limit, too many REQs, too large) | %s |", fmtMap(limitRefusals(rk.relays)))
	for _, rel := range rk.relays {
		w("| rack dies (%.0f s) | relay %s: events/s in, KB/s in, KB/s out, CPU %% | %.1f, %.1f, %.1f, %.1f |", secs(rk.window), rel.kind, rel.eventsPerSec, rel.inPerSec/1000, rel.outPerSec/1000, rel.cpuPct)
	}
	w("| rack dies | busiest standby (provider %d, rank 0 for %d): RSS before, peak during, MiB | %.1f, %.1f |", rk.busiest, rk.busiestSlots, rk.busiestRest, rk.busiestPeak)
	w("| rack dies | highest peak RSS of any survivor (provider %d), MiB | %.1f |", rk.peakMaxOf, rk.peakMax)
	w("| rack back | until every former holder stands by (%d workloads) | %.1f s |", r.back.workloads, secs(r.back.toRejoined))
	for _, d := range r.drains {
		w("| drain | provider %d: moved %d; drain --wait returned after %.1f s; Live elsewhere p50 / max %.1f / %.1f s; RPO violations %d; not moved %d |",
			d.provider, d.moved, secs(d.cli), secs(percentile(d.toLive, 50)), secs(percentile(d.toLive, 100)), len(d.rpoLost), len(d.notMoved))
	}
	w("| end | workloads without a holder; Live on two providers; run twice (process monitor and records, %d copies seen) | %d; %d; %d |",
		r.copiesSeen, len(r.notHeld), len(r.held2), len(r.twice))
	for _, d := range r.drains {
		fmt.Fprintf(&b, "drain of provider %d: %s\n", d.provider, lastLine(d.cliOut))
	}
	if _, bench := tb.(*testing.B); bench {
		// A benchmark's log is cut to its first lines: the table goes to
		// stdout whole, beside the metrics line.
		fmt.Print(b.String())
		return
	}
	tb.Log("\n" + b.String())
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func fmtMap[V int | float64](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %v", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// check fails tb for what must never happen: a workload run twice, one of
// the rack's workloads not Live elsewhere within the lease's bound, a
// workload without a holder (or Live twice) at the end, a drained durable
// workload not moved or not resumed where it stopped, a relay refusing
// anything for its limits.
func (r *fleetResult) check(tb testing.TB) {
	tb.Helper()
	if len(r.twice) > 0 {
		tb.Errorf("workloads run twice: %v", r.twice)
	}
	if len(r.rack.notLive) > 0 {
		tb.Errorf("%d of the rack's %d workloads not Live elsewhere: %v", len(r.rack.notLive), r.rack.workloads, first(r.rack.notLive, 10))
	}
	if m := percentile(r.rack.toLive, 100); m > r.rack.bound {
		tb.Errorf("the last of the rack's workloads Live elsewhere %.1fs after the kill, over the lease's bound %v", secs(m), r.rack.bound)
	}
	if len(r.notHeld) > 0 || len(r.held2) > 0 {
		tb.Errorf("at the end %d workloads without a holder (%v), %d Live twice (%v)", len(r.notHeld), first(r.notHeld, 10), len(r.held2), first(r.held2, 10))
	}
	for _, d := range r.drains {
		if d.cliErr != nil || len(d.notMoved) > 0 || len(d.rpoLost) > 0 || d.undrainErr != nil {
			tb.Errorf("drain of provider %d: drain --wait %v (%s), not moved %v, RPO lost %v, undrain %v",
				d.provider, d.cliErr, lastLine(d.cliOut), d.notMoved, d.rpoLost, d.undrainErr)
		}
	}
	for _, rs := range [][]relayFigures{r.rest.relays, r.rack.relays} {
		if n := limitRefusals(rs); len(n) > 0 {
			tb.Errorf("relays refused our events or REQs for their limits: %v", n)
		}
	}
}

func first[T any](xs []T, n int) []T { return xs[:min(n, len(xs))] }

// report reports the figures as benchmark metrics.
func (r *fleetResult) report(b *testing.B) {
	cpu50, cpuMax := stats(r.rest.cpuPct)
	rss50, rssMax := stats(r.rest.rssMiB)
	b.ReportMetric(float64(r.o.providers), "providers")
	b.ReportMetric(float64(r.o.workloads), "workloads")
	b.ReportMetric(secs(r.toAllLive), "s-to-all-live")
	b.ReportMetric(cpu50, "rest-agent-cpu-pct-p50")
	b.ReportMetric(cpuMax, "rest-agent-cpu-pct-max")
	b.ReportMetric(rss50, "rest-agent-rss-MiB-p50")
	b.ReportMetric(rssMax, "rest-agent-rss-MiB-max")
	var ev, in, out, subs float64
	for _, rel := range r.rest.relays {
		ev = max(ev, rel.eventsPerSec)
		in = max(in, rel.inPerSec)
		out = max(out, rel.outPerSec)
		subs = max(subs, float64(rel.subs))
	}
	b.ReportMetric(ev, "rest-relay-events/s")
	b.ReportMetric(in/1000, "rest-relay-KB/s-in")
	b.ReportMetric(out/1000, "rest-relay-KB/s-out")
	b.ReportMetric(subs, "rest-relay-subscriptions")
	pg := float64(r.o.providers) * float64(r.rest.paygressBeat) / r.o.profile.lt.Heartbeat.Seconds()
	b.ReportMetric(in/pg, "rest-in-x-paygress")
	rk := r.rack
	b.ReportMetric(secs(percentile(rk.toLive, 50)), "rack-s-to-live-p50")
	b.ReportMetric(secs(percentile(rk.toLive, 99)), "rack-s-to-live-p99")
	b.ReportMetric(secs(percentile(rk.toLive, 100)), "rack-s-to-live-max")
	b.ReportMetric(secs(rk.bound), "rack-bound-s")
	b.ReportMetric(float64(len(rk.notLive)), "rack-not-live")
	b.ReportMetric(rk.claims, "rack-claims")
	var refused float64
	for _, v := range rk.answers {
		refused += v
	}
	b.ReportMetric(refused, "rack-claim-answers-not-accepted")
	var lim float64
	for _, v := range limitRefusals(rk.relays) {
		lim += float64(v)
	}
	b.ReportMetric(lim, "rack-relay-limit-refusals")
	b.ReportMetric(rk.busiestPeak, "rack-busiest-standby-peak-MiB")
	b.ReportMetric(rk.peakMax, "rack-peak-rss-MiB-max")
	b.ReportMetric(secs(r.back.toRejoined), "back-s-to-rejoined")
	tl := r.drainToLive()
	b.ReportMetric(secs(percentile(tl, 50)), "drain-s-to-live-p50")
	b.ReportMetric(secs(percentile(tl, 100)), "drain-s-to-live-max")
	var rpo, cli float64
	for _, d := range r.drains {
		rpo += float64(len(d.rpoLost) + len(d.notMoved))
		cli = max(cli, secs(d.cli))
	}
	b.ReportMetric(cli, "drain-wait-s-max")
	b.ReportMetric(rpo, "drain-rpo-violations")
	b.ReportMetric(float64(len(r.twice)), "run-twice")
	b.ReportMetric(float64(len(r.notHeld)), "without-holder")
}
