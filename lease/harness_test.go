package lease

import (
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// t0 is the base of simulated time in tests.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// key turns a short name into a 64-character hex pubkey, reversibly.
func key(name string) string {
	h := hex.EncodeToString([]byte(name))
	return h + strings.Repeat("0", 64-len(h))
}

// keyName is the inverse of key for names used in tests.
func keyName(k string) string {
	b, err := hex.DecodeString(strings.TrimRight(k, "0"))
	if err != nil {
		// an odd number of digits after trimming: restore one zero
		b, err = hex.DecodeString(strings.TrimRight(k, "0") + "0")
		if err != nil {
			return k
		}
	}
	return string(b)
}

var (
	hexKeyRE = regexp.MustCompile(`[0-9a-f]{64}`)
	timeRE   = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)
)

// render prints effects the way script files show them: names instead of
// keys, offsets from t0 instead of absolute times.
func render(effs []Effect) string {
	if len(effs) == 0 {
		return "ok"
	}
	lines := make([]string, len(effs))
	for i, e := range effs {
		lines[i] = humanise(e.String())
	}
	return strings.Join(lines, "\n")
}

func humanise(s string) string {
	s = hexKeyRE.ReplaceAllStringFunc(s, keyName)
	return timeRE.ReplaceAllStringFunc(s, func(ts string) string {
		tt, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return ts
		}
		return "+" + tt.Sub(t0).String()
	})
}

func testRelays(n int) []string {
	r := make([]string, n)
	for i := range r {
		r[i] = fmt.Sprintf("wss://r%d.test", i+1)
	}
	return r
}

// testConfig is DefaultConfig with the test relays r1..r3.
func testConfig() Config {
	c := DefaultConfig()
	c.Relays = testRelays(c.N)
	return c
}

type harness struct {
	t *testing.T
	m *Machine
}

func newHarness(t *testing.T, self string, mod func(*Config)) *harness {
	t.Helper()
	cfg := testConfig()
	if mod != nil {
		mod(&cfg)
	}
	m, err := New(cfg, key(self))
	if err != nil {
		t.Fatalf("New(%v) = %v", self, err)
	}
	h := &harness{t: t, m: m}
	h.syncAll(0)
	return h
}

// shownAt is when a standby or an evicted holder that publishes its own
// heartbeat every 60 s from first (on the relays it watches), ticked every
// second, takes over or retakes once it has watched silence until due
// (the start of the silence + the wait): at due plus the proof lag
// (HeartbeatInterval + 2*RelayDelay), or later if its first own beat
// created at or after due + RelayDelay (which shows silence until due)
// comes later.
func shownAt(first, due time.Duration) time.Duration {
	cfg := testConfig()
	need := due + cfg.RelayDelay
	beat := first
	if need > first {
		beat = first + (need-first+60*s-1)/(60*s)*(60*s)
	}
	return max(beat, due+cfg.HeartbeatInterval+2*cfg.RelayDelay)
}

// reconnect reports every relay's stream as ended and made anew at d
// (RelayGap, then its EOSE): a provider cut off from every relay, back.
func (h *harness) reconnect(d time.Duration) {
	for _, r := range h.m.Relays() {
		h.m.RelayGap(at(d), r)
	}
	h.syncAll(d)
}

// syncAll reports every relay's EOSE at d: the machine watches their live
// streams from then on (as the agent's relays do once connected).
func (h *harness) syncAll(d time.Duration) {
	for _, r := range h.m.Relays() {
		h.m.RelaySynced(at(d), r)
	}
}

func warmSpec(id, primary string, standbys ...string) Spec {
	s := Spec{
		ID: id, Primary: key(primary), Replication: ReplicationWarmStandby,
		RestartPolicy: RestartPolicy{Policy: RestartOnFailure, MaxAttempts: 3}, Epoch: 1, CreatedAt: t0,
	}
	for _, sb := range standbys {
		s.Standbys = append(s.Standbys, key(sb))
	}
	if len(standbys) == 0 {
		s.Replication = ReplicationNone
	}
	return s
}

func (h *harness) track(d time.Duration, s Spec) []Effect {
	h.t.Helper()
	effs, err := h.m.Track(at(d), s)
	if err != nil {
		h.t.Fatalf("Track(%v) = %v", s.ID, err)
	}
	return effs
}

// hb feeds one heartbeat of from, created and received at d, on the given
// relays (1-based). list == nil sends an unlisted (Paygress-style) heartbeat.
func (h *harness) hb(d time.Duration, from string, relays []int, list []WorkloadEpoch) []Effect {
	var out []Effect
	for _, r := range relays {
		out = append(out, h.m.ObserveHeartbeat(at(d), Heartbeat{
			Provider: key(from), Relay: fmt.Sprintf("wss://r%d.test", r), CreatedAt: at(d).Truncate(time.Second),
			ReceivedAt: at(d), Listed: list != nil, Workloads: list,
		})...)
	}
	return out
}

func (h *harness) tick(d time.Duration) []Effect { return h.m.Tick(at(d)) }

func (h *harness) state(id string) State {
	s, _ := h.m.State(id)
	return s
}

func (h *harness) wantState(id string, want State) {
	h.t.Helper()
	if got := h.state(id); got != want {
		h.t.Fatalf("State(%v) = %v, want %v", id, got, want)
	}
}

// wantEffects compares rendered effects.
func (h *harness) wantEffects(what string, got []Effect, want ...string) {
	h.t.Helper()
	w := "ok"
	if len(want) > 0 {
		w = strings.Join(want, "\n")
	}
	if g := render(got); g != w {
		h.t.Fatalf("%s = \n%v\nwant\n%v", what, g, w)
	}
}

var all3 = []int{1, 2, 3}

// beat sends heartbeats of from on all relays every interval in (from, to].
func (h *harness) beat(from string, start, end, every time.Duration, list []WorkloadEpoch) []Effect {
	var out []Effect
	for d := start; d <= end; d += every {
		out = append(out, h.hb(d, from, all3, list)...)
		out = append(out, h.tick(d)...)
	}
	return out
}

func hasEffect[T Effect](effs []Effect) bool {
	for _, e := range effs {
		if _, ok := e.(T); ok {
			return true
		}
	}
	return false
}

// aliceRetakes ticks every second from back, alice beating (listing
// nothing) on every relay every minute, until alice's machine claims the
// workload back (the retake rule), within 2 x TakeoverAfter; it returns
// when, and fails the test ("alice never took the workload back " + what)
// otherwise.
func (h *harness) aliceRetakes(back time.Duration, what string) time.Duration {
	h.t.Helper()
	for d := back; d <= back+2*h.m.Config().TakeoverAfter; d += s {
		if (d-back)%(60*s) == 0 {
			h.hb(d, "alice", all3, []WorkloadEpoch{})
		}
		if hasEffect[PublishClaim](h.tick(d)) {
			return d
		}
	}
	h.t.Fatalf("alice never took the workload back %s", what)
	return 0
}
