package localrelay_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/nbd-wtf/go-nostr/nip42"

	"provideragent/internal/localrelay"
	"provideragent/internal/relaytest"
)

const wait = 10 * time.Second

var testKey = strings.Repeat("01", 32)

func signed(t *testing.T, sk string, kind int, content string, at time.Time) nostr.Event {
	t.Helper()
	ev := nostr.Event{Kind: kind, Content: content, CreatedAt: nostr.Timestamp(at.Unix()), Tags: nostr.Tags{{"t", "test"}}}
	if err := ev.Sign(sk); err != nil {
		t.Fatalf("sign: %v", err)
	}
	return ev
}

// next reads frames until one that is not a NOTICE or AUTH arrives.
func next(t *testing.T, c *relaytest.Conn) nostr.Envelope {
	t.Helper()
	for {
		env, err := c.Read(wait)
		if err != nil {
			t.Fatalf("Read() error = %v, want a frame", err)
		}
		switch env.(type) {
		case *nostr.NoticeEnvelope, *nostr.AuthEnvelope:
			continue
		}
		return env
	}
}

func publish(t *testing.T, c *relaytest.Conn, ev nostr.Event) *nostr.OKEnvelope {
	t.Helper()
	c.Send(nostr.EventEnvelope{Event: ev})
	env := next(t, c)
	ok, isOK := env.(*nostr.OKEnvelope)
	if !isOK || ok.EventID != ev.ID {
		t.Fatalf("publish(%s) got %v, want OK for it", ev.ID, env)
	}
	return ok
}

func subscribe(c *relaytest.Conn, id string, f nostr.Filter) {
	c.Send(nostr.ReqEnvelope{SubscriptionID: id, Filters: nostr.Filters{f}})
}

// collect reads EVENTs for sub until EOSE or CLOSED and returns them with the
// terminating envelope.
func collect(t *testing.T, c *relaytest.Conn, sub string) ([]nostr.Event, nostr.Envelope) {
	t.Helper()
	var evs []nostr.Event
	for {
		switch env := next(t, c).(type) {
		case *nostr.EventEnvelope:
			if env.SubscriptionID != nil && *env.SubscriptionID == sub {
				evs = append(evs, env.Event)
			}
		case *nostr.EOSEEnvelope, *nostr.ClosedEnvelope:
			return evs, env
		default:
			t.Fatalf("collect(%s) got %v, want EVENT, EOSE or CLOSED", sub, env)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		opts localrelay.Options
		ok   bool
	}{
		{"zero", localrelay.Options{}, true},
		{"faults", localrelay.Options{RejectWrites: true, ClosedReason: "error: x", ClosedAfter: time.Second, Forge: true, FutureShift: time.Hour, InjectKey: testKey}, true},
		{"negative delay", localrelay.Options{WriteDelay: -1}, false},
		{"negative query delay", localrelay.Options{QueryDelay: -1}, false},
		{"query delay kinds without a delay", localrelay.Options{QueryDelayKinds: []int{7}}, false},
		{"negative closed times", localrelay.Options{ClosedTimes: -1}, false},
		{"negative limit", localrelay.Options{Limits: localrelay.Limits{MaxLimit: -1}}, false},
		{"allow without auth", localrelay.Options{AuthAllow: []string{strings.Repeat("ab", 32)}}, false},
		{"bad inject key", localrelay.Options{InjectKey: "zz"}, false},
		{"bad allow key", localrelay.Options{RequireAuth: true, AuthAllow: []string{"nope"}}, false},
	}
	for _, tt := range tests {
		err := tt.opts.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, localrelay.ErrInvalidOptions) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidOptions", tt.name, err)
		}
	}
}

func TestPublishSubscribe(t *testing.T) {
	r := relaytest.Start(t)
	c := relaytest.Dial(t, r.URL())
	old := signed(t, testKey, 1, "old", time.Now().Add(-time.Minute))
	if ok := publish(t, c, old); !ok.OK {
		t.Fatalf("publish(old) = %v, want OK true", ok)
	}
	subscribe(c, "s", nostr.Filter{Kinds: []int{1}})
	evs, end := collect(t, c, "s")
	if _, isEOSE := end.(*nostr.EOSEEnvelope); !isEOSE || len(evs) != 1 || evs[0].ID != old.ID {
		t.Fatalf("stored events = %v ending %v, want [old] then EOSE", evs, end)
	}
	live := signed(t, testKey, 1, "live", time.Now())
	c2 := relaytest.Dial(t, r.URL())
	publish(t, c2, live)
	env := next(t, c)
	if e, ok := env.(*nostr.EventEnvelope); !ok || e.ID != live.ID {
		t.Fatalf("live frame = %v, want EVENT live", env)
	}
	if got := r.Stats().Events; got != 2 {
		t.Fatalf("Stats().Events = %d, want 2", got)
	}

	// Ephemeral event with no listener is "mute:", not an error.
	eph := signed(t, testKey, 20384, "hb", time.Now())
	if ok := publish(t, c2, eph); ok.OK || !strings.HasPrefix(ok.Reason, "mute:") {
		t.Fatalf("publish(ephemeral) = %v, want OK false mute:", ok)
	}
}

func TestRejectWrites(t *testing.T) {
	r := relaytest.Start(t, "--reject-writes")
	c := relaytest.Dial(t, r.URL())
	ok := publish(t, c, signed(t, testKey, 1, "x", time.Now()))
	if ok.OK || !strings.HasPrefix(ok.Reason, "blocked:") {
		t.Fatalf("publish() = %v, want OK false blocked:", ok)
	}
}

func TestHoldOK(t *testing.T) {
	r := relaytest.Start(t, "--hold-ok")
	c := relaytest.Dial(t, r.URL())
	c.Send(nostr.EventEnvelope{Event: signed(t, testKey, 1, "x", time.Now())})
	deadline := time.Now().Add(wait)
	for r.Stats().Held != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Stats().Held = %d, want 1", r.Stats().Held)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if env, err := c.Read(300 * time.Millisecond); err == nil {
		t.Fatalf("Read() = %v, want no OK", env)
	}
}

func TestSendClosed(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		firstEOSE bool // EOSE before the CLOSED
		reason    string
	}{
		{"immediate transient once", []string{"--send-closed", "error: try later", "--closed-times", "1"}, false, "error: try later"},
		{"immediate permanent", []string{"--send-closed", "blocked: go away"}, false, "blocked: go away"},
		{"after delay", []string{"--send-closed", "error: rotated", "--closed-after", "100ms", "--closed-times", "1"}, true, "error: rotated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := relaytest.Start(t, tt.args...)
			c := relaytest.Dial(t, r.URL())
			subscribe(c, "a", nostr.Filter{Kinds: []int{1}})
			_, end := collect(t, c, "a")
			if tt.firstEOSE {
				if _, ok := end.(*nostr.EOSEEnvelope); !ok {
					t.Fatalf("first end = %v, want EOSE", end)
				}
				end = next(t, c)
			}
			cl, ok := end.(*nostr.ClosedEnvelope)
			if !ok || cl.SubscriptionID != "a" || cl.Reason != tt.reason {
				t.Fatalf("end = %v, want CLOSED a %q", end, tt.reason)
			}
			subscribe(c, "b", nostr.Filter{Kinds: []int{1}})
			_, end = collect(t, c, "b")
			_, eose := end.(*nostr.EOSEEnvelope)
			permanent := !strings.Contains(strings.Join(tt.args, " "), "--closed-times")
			if eose == permanent {
				t.Fatalf("second subscription end = %v, want EOSE=%v", end, !permanent)
			}
		})
	}
}

// TestQueryDelay: a REQ for a delayed kind is answered after one for
// another kind sent after it, and is still answered (with what the relay
// stored).
func TestQueryDelay(t *testing.T) {
	r := relaytest.Start(t, "--query-delay", "1s", "--query-delay-kinds", "7")
	c := relaytest.Dial(t, r.URL())
	publish(t, c, signed(t, testKey, 7, "stored", time.Now()))
	subscribe(c, "slow", nostr.Filter{Kinds: []int{7}})
	subscribe(c, "fast", nostr.Filter{Kinds: []int{1}})
	eose, ok := next(t, c).(*nostr.EOSEEnvelope)
	if !ok || string(*eose) != "fast" {
		t.Fatalf("first answer = %v, want EOSE of the REQ for kind 1", eose)
	}
	evs, end := collect(t, c, "slow")
	if e, ok := end.(*nostr.EOSEEnvelope); !ok || string(*e) != "slow" || len(evs) != 1 {
		t.Fatalf("the delayed REQ's answer = %d events, %v; want the stored event and its EOSE", len(evs), end)
	}
}

func TestRequireAuth(t *testing.T) {
	r := relaytest.Start(t, "--require-auth")
	c := relaytest.Dial(t, r.URL())
	env, err := c.Read(wait)
	if err != nil {
		t.Fatalf("Read() error = %v, want AUTH challenge", err)
	}
	auth, ok := env.(*nostr.AuthEnvelope)
	if !ok || auth.Challenge == nil {
		t.Fatalf("first frame = %v, want AUTH challenge", env)
	}
	subscribe(c, "a", nostr.Filter{Kinds: []int{1}})
	_, end := collect(t, c, "a")
	if cl, ok := end.(*nostr.ClosedEnvelope); !ok || !strings.HasPrefix(cl.Reason, "auth-required:") {
		t.Fatalf("unauthenticated REQ end = %v, want CLOSED auth-required:", end)
	}
	pk, _ := nostr.GetPublicKey(testKey)
	ae := nip42.CreateUnsignedAuthEvent(*auth.Challenge, pk, r.URL())
	if err := ae.Sign(testKey); err != nil {
		t.Fatal(err)
	}
	c.Send(nostr.AuthEnvelope{Event: ae})
	if okEnv, isOK := next(t, c).(*nostr.OKEnvelope); !isOK || !okEnv.OK {
		t.Fatalf("AUTH reply = %v, want OK true", okEnv)
	}
	subscribe(c, "b", nostr.Filter{Kinds: []int{1}})
	if _, end := collect(t, c, "b"); end.Label() != "EOSE" {
		t.Fatalf("authenticated REQ end = %v, want EOSE", end)
	}
}

func TestFaultCopies(t *testing.T) {
	other := strings.Repeat("02", 32)
	otherPK, _ := nostr.GetPublicKey(other)
	r := relaytest.Start(t, "--forged", "--future", "1h", "--stale-shift", "1h", "--inject-key", other)
	sub := relaytest.Dial(t, r.URL())
	subscribe(sub, "s", nostr.Filter{Kinds: []int{1}})
	if _, end := collect(t, sub, "s"); end.Label() != "EOSE" {
		t.Fatalf("end = %v, want EOSE", end)
	}
	pub := relaytest.Dial(t, r.URL())
	ev := signed(t, testKey, 1, "real", time.Now())
	publish(t, pub, ev)

	type check struct {
		idOK, sigOK bool
		shift       int64
		pubkey      string
	}
	want := []check{
		{false, false, 0, ev.PubKey}, // id mismatch
		{true, false, 0, ev.PubKey},  // bad signature
		{true, true, 3600, otherPK},  // future-dated, signed by inject key
		{true, true, -3600, otherPK}, // stale, signed by inject key
		{true, true, 0, ev.PubKey},   // the real one
	}
	for i, w := range want {
		env := next(t, sub)
		e, ok := env.(*nostr.EventEnvelope)
		if !ok {
			t.Fatalf("frame %d = %v, want EVENT", i, env)
		}
		sigOK, _ := e.Event.CheckSignature()
		got := check{e.Event.CheckID(), sigOK, int64(e.Event.CreatedAt) - int64(ev.CreatedAt), e.Event.PubKey}
		if got != w {
			t.Errorf("frame %d = %+v, want %+v", i, got, w)
		}
	}
}

func TestServeStaleAndReplay(t *testing.T) {
	r := relaytest.Start(t, "--serve-stale", "--replay", "100ms")
	c := relaytest.Dial(t, r.URL())
	ev := signed(t, testKey, 1, "old", time.Now().Add(-time.Hour))
	publish(t, c, ev)
	since := nostr.Timestamp(time.Now().Unix())
	subscribe(c, "s", nostr.Filter{Kinds: []int{1}, Since: &since})
	evs, _ := collect(t, c, "s")
	if len(evs) != 1 || evs[0].ID != ev.ID {
		t.Fatalf("REQ since now = %v, want the old event (serve-stale)", evs)
	}
	env := next(t, c)
	if e, ok := env.(*nostr.EventEnvelope); !ok || e.ID != ev.ID {
		t.Fatalf("replayed frame = %v, want the old event again", env)
	}
}

func TestInjectAndRestart(t *testing.T) {
	r := relaytest.Start(t)
	url := r.URL()
	c := relaytest.Dial(t, url)
	subscribe(c, "s", nostr.Filter{Kinds: []int{1}})
	collect(t, c, "s")
	forged := signed(t, testKey, 1, "x", time.Now())
	forged.Sig = strings.Repeat("00", 64)
	if n := r.Inject(forged, true); n != 1 {
		t.Fatalf("Inject() = %d, want 1 subscriber", n)
	}
	if e, ok := next(t, c).(*nostr.EventEnvelope); !ok || e.Sig != forged.Sig {
		t.Fatalf("injected frame = %v, want the forged event", e)
	}
	if got := r.Stats().Events; got != 1 {
		t.Fatalf("Stats().Events = %d, want 1", got)
	}

	r.Kill()
	if r.Running() {
		t.Fatalf("Running() after Kill = true, want false")
	}
	if _, err := c.Read(wait); err == nil {
		t.Fatalf("Read() after Kill succeeded, want a connection error")
	}
	r.Restart()
	if r.URL() != url {
		t.Fatalf("URL() after Restart = %s, want %s", r.URL(), url)
	}
	c2 := relaytest.Dial(t, r.URL())
	subscribe(c2, "s", nostr.Filter{Kinds: []int{1}})
	if evs, _ := collect(t, c2, "s"); len(evs) != 0 {
		t.Fatalf("events after restart = %v, want none (memory store)", evs)
	}
}

func TestNIP11Limits(t *testing.T) {
	r := relaytest.Start(t, "--max-limit", "7", "--max-subscriptions", "3", "--max-message-length", "65536")
	req, _ := http.NewRequest(http.MethodGet, "http://"+r.Addr()+"/", nil)
	req.Header.Set("Accept", "application/nostr+json")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Limitation struct {
			MaxLimit         int `json:"max_limit"`
			MaxSubscriptions int `json:"max_subscriptions"`
			MaxMessageLength int `json:"max_message_length"`
		} `json:"limitation"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if l := doc.Limitation; l.MaxLimit != 7 || l.MaxSubscriptions != 3 || l.MaxMessageLength != 65536 {
		t.Fatalf("NIP-11 limitation = %+v, want 7/3/65536", l)
	}
}
