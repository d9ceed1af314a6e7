package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// The single-writer guarantee assumes every provider's clock is within
// MaxSkew/2 of true time (props.Assumptions). A provider whose clock is
// off by more cannot judge silence or staleness: a standby an hour fast
// sees a healthy primary's heartbeats as stale and takes over, a primary
// five minutes slow never sees the standby's claims. The clock check
// compares the local clock with the relays' (the HTTP Date header every
// relay's web server sends, fetched where the agent dials the relay) and
// tells the lease machine when this provider's clock is outside the bound
// (lease.Machine.SetClockSuspect): it then refuses to take over and
// fences what it holds, and says so loudly.

// clockResolution is the smallest offset the check can tell from noise: the
// Date header has whole seconds, and the round trip adds its own error.
// The bound is max(max_skew/2, clockResolution).
const clockResolution = 2 * time.Second

// clockSample is one relay's clock reading, relative to ours.
type clockSample struct {
	relay  string
	offset time.Duration // relay clock - local clock, estimated at the midpoint
	err    error
}

// clockVerdict is the outcome of one check over every relay.
type clockVerdict struct {
	// offset is the median of the relays' offsets: positive when the
	// relays are ahead (the local clock is slow).
	offset  time.Duration
	samples int
	suspect bool
	why     string
}

// judgeClock decides from the samples whether the local clock is outside
// bound: at least need relays answered, and the median offset exceeds it.
// Fewer answers are no verdict (ok false): the machine keeps its last
// word.
func judgeClock(samples []clockSample, need int, bound time.Duration) (clockVerdict, bool) {
	var offs []time.Duration
	for _, s := range samples {
		if s.err == nil {
			offs = append(offs, s.offset)
		}
	}
	if len(offs) < need || len(offs) == 0 {
		return clockVerdict{}, false
	}
	slices.Sort(offs)
	med := offs[len(offs)/2]
	if len(offs)%2 == 0 {
		med = (offs[len(offs)/2-1] + offs[len(offs)/2]) / 2
	}
	v := clockVerdict{offset: med, samples: len(offs)}
	if med > bound || med < -bound {
		v.suspect = true
		dir := "behind"
		if med < 0 {
			dir = "ahead of"
		}
		abs := max(med, -med).Round(time.Second)
		v.why = fmt.Sprintf("local clock %v %s the relays (median of %d, bound %v)", abs, dir, len(offs), bound)
	}
	return v, true
}

// httpURL is the HTTP address of a relay's websocket URL.
func httpURL(ws string) (string, error) {
	u, err := url.Parse(ws)
	if err != nil {
		return "", err
	}
	switch strings.ToLower(u.Scheme) {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	default:
		return "", fmt.Errorf("relay url %q: scheme %q is not ws or wss", ws, u.Scheme)
	}
	return u.String(), nil
}

// sampleRelayClock reads one relay's Date header. The header has whole
// seconds, so the reading is taken at the midpoint of the request plus
// half a second; a round trip over maxRTT gives no sample.
func sampleRelayClock(ctx context.Context, client *http.Client, relay, dial string, now func() time.Time, maxRTT time.Duration) clockSample {
	s := clockSample{relay: relay}
	target, err := httpURL(dial)
	if err != nil {
		s.err = err
		return s
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		s.err = err
		return s
	}
	req.Header.Set("Accept", "application/nostr+json") // NIP-11: cheap, and any answer has a Date
	t0 := now()
	resp, err := client.Do(req)
	t1 := now()
	if err != nil {
		s.err = fmt.Errorf("clock check %s: %w", relay, err)
		return s
	}
	resp.Body.Close()
	if rtt := t1.Sub(t0); rtt > maxRTT {
		s.err = fmt.Errorf("clock check %s: round trip %v over %v", relay, rtt.Round(time.Millisecond), maxRTT)
		return s
	}
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		s.err = fmt.Errorf("clock check %s: no usable Date header: %w", relay, err)
		return s
	}
	mid := t0.Add(t1.Sub(t0) / 2)
	s.offset = date.Add(500 * time.Millisecond).Sub(mid)
	return s
}

// clockCheckLoop checks the clock against the relays every interval and
// reports a verdict to the machine once two checks in a row agree and it
// differs from the last one reported (the first is always reported, so a
// suspect flag persisted before a restart is cleared once the clock is
// fine): one slow answer never fences anything.
func (a *Agent) clockCheckLoop(ctx context.Context) error {
	interval := a.cfg.ClockCheckInterval
	if interval <= 0 {
		return nil
	}
	client := &http.Client{Timeout: 5 * time.Second}
	bound := max(a.cfg.Lease.MaxSkew/2, clockResolution)
	relays := a.machine().Relays()
	dial := normaliseKeys(a.cfg.DialAddrs)
	var prev, sent *bool
	for {
		samples := sampleClocks(ctx, client, relays, dial, a.now)
		if v, ok := judgeClock(samples, a.cfg.Lease.M, bound); ok {
			a.obs.met.clockOffset.Set(v.offset.Seconds())
			if prev != nil && *prev == v.suspect && (sent == nil || *sent != v.suspect) {
				s := v.suspect
				sent = &s
				a.send(ctx, input{clock: &clockReport{suspect: s, why: v.why, offset: v.offset, relays: v.samples}})
			}
			s := v.suspect
			prev = &s
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// clockReport is the clock check's verdict, fed to the machine.
type clockReport struct {
	suspect bool
	why     string
	offset  time.Duration
	relays  int
}

// clockVerdict feeds a clock check's verdict to the machine through step s
// (machine goroutine), logging a change loudly.
func (a *Agent) clockVerdict(s *agentStep, r clockReport) {
	was, _ := a.machine().ClockSuspect()
	switch {
	case r.suspect && !was:
		a.logger.Error("clock outside the bound of the relays: this provider takes over nothing and fences the workloads it holds that have a standby; fix the clock (NTP)",
			"why", r.why, "offset", r.offset.Round(time.Millisecond), "relays", r.relays)
		a.emit("clock", "", "clock SUSPECT: %s", r.why)
	case !r.suspect && was:
		a.logger.Warn("clock back within the bound of the relays", "offset", r.offset.Round(time.Millisecond), "relays", r.relays)
		a.emit("clock", "", "clock trusted again (offset %v)", r.offset.Round(time.Millisecond))
	}
	a.m.status.dirty = true
	if r.suspect {
		a.obs.met.clockSuspect.Set(1)
	} else {
		a.obs.met.clockSuspect.Set(0)
	}
	s.SetClockSuspect(r.suspect, r.why)
}
