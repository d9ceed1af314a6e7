package localrelay_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/nbd-wtf/go-nostr/nip42"

	"provideragent/internal/localrelay"
	"provideragent/internal/relaytest"
)

// readFrame reads the next frame of any type.
func readFrame(t *testing.T, c *relaytest.Conn) nostr.Envelope {
	t.Helper()
	env, err := c.Read(wait)
	if err != nil {
		t.Fatalf("Read() error = %v, want a frame", err)
	}
	return env
}

// TestStrfryLimitsAndMessages checks the strfry emulation against the
// limits and words of strfry's default configuration (strfry.conf,
// RelayIngester.cpp, RelayServer.h, events.cpp, filters.h).
func TestStrfryLimitsAndMessages(t *testing.T) {
	r := relaytest.Start(t, "--strfry")

	t.Run("nip11", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+r.Addr(), nil)
		req.Header.Set("Accept", "application/nostr+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var doc struct {
			Software   string         `json:"software"`
			Limitation map[string]int `json:"limitation"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"max_message_length": 131072, "max_subscriptions": 200, "max_limit": 500}
		for k, v := range want {
			if doc.Limitation[k] != v {
				t.Errorf("NIP-11 limitation.%s = %d, want %d", k, doc.Limitation[k], v)
			}
		}
		if doc.Software != "git+https://github.com/hoytech/strfry.git" {
			t.Errorf("NIP-11 software = %q, want strfry's", doc.Software)
		}
	})

	t.Run("event too large", func(t *testing.T) {
		c := relaytest.Dial(t, r.URL())
		ev := signed(t, testKey, 1, strings.Repeat("x", localrelay.StrfryMaxEventSize), time.Now())
		ok := publish(t, c, ev)
		want := fmt.Sprintf("invalid: event too large: %d", localrelay.StrfryEventSize(&ev))
		if ok.OK || ok.Reason != want {
			t.Fatalf("OK = %v %q, want false %q", ok.OK, ok.Reason, want)
		}
		fits := signed(t, testKey, 1, strings.Repeat("x", localrelay.StrfryMaxEventSize-1000), time.Now())
		if ok := publish(t, c, fits); !ok.OK {
			t.Fatalf("event of %d bytes: OK = false %q, want true", localrelay.StrfryEventSize(&fits), ok.Reason)
		}
		if ok := publish(t, c, fits); !ok.OK || ok.Reason != "duplicate: have this event" {
			t.Fatalf("duplicate: OK = %v %q, want true \"duplicate: have this event\"", ok.OK, ok.Reason)
		}
	})

	t.Run("frame too large drops the connection", func(t *testing.T) {
		c := relaytest.Dial(t, r.URL())
		c.Send([]any{"NOTICE", strings.Repeat("y", localrelay.StrfryMaxFrameSize)})
		for {
			if _, err := c.Read(wait); err != nil {
				break // connection closed by the relay
			}
		}
	})

	t.Run("too many concurrent REQs", func(t *testing.T) {
		c := relaytest.Dial(t, r.URL())
		for i := range localrelay.StrfryMaxSubscriptions {
			subscribe(c, fmt.Sprintf("s%d", i), nostr.Filter{Kinds: []int{7}})
		}
		for range localrelay.StrfryMaxSubscriptions {
			if env, ok := readFrame(t, c).(*nostr.EOSEEnvelope); !ok {
				t.Fatalf("REQ within the cap: got %v, want EOSE", env)
			}
		}
		subscribe(c, "one-too-many", nostr.Filter{Kinds: []int{7}})
		env := readFrame(t, c)
		if n, ok := env.(*nostr.NoticeEnvelope); !ok || string(*n) != "ERROR: too many concurrent REQs" {
			t.Fatalf("REQ %d: got %v, want NOTICE \"ERROR: too many concurrent REQs\"", localrelay.StrfryMaxSubscriptions+1, env)
		}
		// Closing one frees a place.
		c.Send(nostr.CloseEnvelope("s0"))
		subscribe(c, "after-close", nostr.Filter{Kinds: []int{7}})
		if _, ok := readFrame(t, c).(*nostr.EOSEEnvelope); !ok {
			t.Fatalf("REQ after CLOSE: want EOSE")
		}
	})

	t.Run("filter item too large", func(t *testing.T) {
		c := relaytest.Dial(t, r.URL())
		subscribe(c, "big-d", nostr.Filter{Kinds: []int{38386}, Tags: nostr.TagMap{"d": {strings.Repeat("d", localrelay.StrfryMaxFilterItem+1)}}})
		env := readFrame(t, c)
		if cl, ok := env.(*nostr.ClosedEnvelope); !ok || cl.Reason != "ERROR: bad req: error parsing #d: filter item too large" {
			t.Fatalf("got %v, want CLOSED \"ERROR: bad req: error parsing #d: filter item too large\"", env)
		}
		subscribe(c, "ok-d", nostr.Filter{Kinds: []int{38386}, Tags: nostr.TagMap{"d": {strings.Repeat("d", localrelay.StrfryMaxFilterItem)}}})
		if _, ok := readFrame(t, c).(*nostr.EOSEEnvelope); !ok {
			t.Fatalf("255-byte #d: want EOSE")
		}
	})

	t.Run("refusals counted", func(t *testing.T) {
		// The subtests above each drew one refusal, counted by its words.
		got := r.Stats().Refusals
		for _, k := range []string{
			"OK invalid: event too large: N",
			"NOTICE ERROR: too many concurrent REQs",
			"CLOSED ERROR: bad req: error parsing #d: filter item too large",
		} {
			if got[k] < 1 {
				t.Errorf("Stats().Refusals[%q] = %d, want at least 1 (all: %v)", k, got[k], got)
			}
		}
	})

	t.Run("ephemeral accepted without listeners, older addressable replaced", func(t *testing.T) {
		c := relaytest.Dial(t, r.URL())
		if ok := publish(t, c, signed(t, testKey, 20384, "hb", time.Now())); !ok.OK || ok.Reason != "" {
			t.Fatalf("ephemeral: OK = %v %q, want true \"\" (strfry has no mute:)", ok.OK, ok.Reason)
		}
		addr := func(at time.Time) nostr.Event {
			ev := nostr.Event{Kind: 38386, Content: "c", CreatedAt: nostr.Timestamp(at.Unix()), Tags: nostr.Tags{{"d", "x"}}}
			if err := ev.Sign(testKey); err != nil {
				t.Fatal(err)
			}
			return ev
		}
		now := time.Now()
		if ok := publish(t, c, addr(now)); !ok.OK {
			t.Fatalf("addressable: OK false %q", ok.Reason)
		}
		if ok := publish(t, c, addr(now.Add(-time.Minute))); ok.OK || ok.Reason != "replaced: have newer event" {
			t.Fatalf("older addressable: OK = %v %q, want false \"replaced: have newer event\"", ok.OK, ok.Reason)
		}
		if ok := publish(t, c, signed(t, testKey, 1, "future", now.Add(time.Hour))); ok.OK || ok.Reason != "invalid: created_at too late" {
			t.Fatalf("future event: OK = %v %q, want false \"invalid: created_at too late\"", ok.OK, ok.Reason)
		}
	})
}

// TestStrfryAuth: the challenge comes with the first refused REQ, the
// CLOSED is wrapped in "ERROR: ", and the AUTH relay tag must name the
// service URL (host and port, any scheme), with strfry's words.
func TestStrfryAuth(t *testing.T) {
	const service = "wss://relay-a.invalid"
	r := relaytest.Start(t, "--strfry", "--require-auth", "--service-url", service)
	c := relaytest.Dial(t, r.URL())
	subscribe(c, "s", nostr.Filter{Kinds: []int{1}})
	auth, ok := readFrame(t, c).(*nostr.AuthEnvelope)
	if !ok || auth.Challenge == nil {
		t.Fatalf("first frame after a REQ: want AUTH challenge")
	}
	if cl, ok := readFrame(t, c).(*nostr.ClosedEnvelope); !ok || cl.Reason != "ERROR: auth-required: requested filter requires authentication" {
		t.Fatalf("want CLOSED \"ERROR: auth-required: requested filter requires authentication\", got %v", cl)
	}
	pk, _ := nostr.GetPublicKey(testKey)
	sendAuth := func(relayTag string) *nostr.OKEnvelope {
		ev := nip42.CreateUnsignedAuthEvent(*auth.Challenge, pk, relayTag)
		if err := ev.Sign(testKey); err != nil {
			t.Fatal(err)
		}
		c.Send(nostr.AuthEnvelope{Event: ev})
		okEnv, isOK := readFrame(t, c).(*nostr.OKEnvelope)
		if !isOK || okEnv.EventID != ev.ID {
			t.Fatalf("AUTH: want its OK")
		}
		return okEnv
	}
	if ok := sendAuth(r.URL()); ok.OK || ok.Reason != "error: incorrect or missing relay tag, expected: "+service {
		t.Fatalf("AUTH for the dialled address: OK = %v %q, want strfry's relay tag refusal", ok.OK, ok.Reason)
	}
	if ok := sendAuth("ws://RELAY-A.invalid/"); !ok.OK || ok.Reason != "successfully authenticated" {
		t.Fatalf("AUTH for the service URL: OK = %v %q, want true \"successfully authenticated\"", ok.OK, ok.Reason)
	}
	if ok := sendAuth(service); ok.OK || ok.Reason != "error: already authenticated" {
		t.Fatalf("second AUTH: OK = %v %q, want \"error: already authenticated\"", ok.OK, ok.Reason)
	}
	subscribe(c, "s2", nostr.Filter{Kinds: []int{7}})
	if _, ok := readFrame(t, c).(*nostr.EOSEEnvelope); !ok {
		t.Fatalf("REQ after AUTH: want EOSE")
	}
	if ok := publish(t, c, signed(t, testKey, 1, "authed", time.Now())); !ok.OK {
		t.Fatalf("EVENT after AUTH: OK false %q", ok.Reason)
	}
	other := relaytest.Dial(t, r.URL())
	other.Send(nostr.EventEnvelope{Event: signed(t, testKey, 1, "unauthed", time.Now())})
	if _, ok := readFrame(t, other).(*nostr.AuthEnvelope); !ok {
		t.Fatalf("unauthenticated EVENT: want an AUTH challenge first")
	}
	if ok, isOK := readFrame(t, other).(*nostr.OKEnvelope); !isOK || ok.OK || ok.Reason != "auth-required: event marked as protected" {
		t.Fatalf("unauthenticated EVENT: want OK false \"auth-required: event marked as protected\", got %v", ok)
	}
}

// The fault options still apply behind the emulation, in strfry's forms.
func TestStrfryWrapsFaultClosed(t *testing.T) {
	r := relaytest.Start(t, "--strfry", "--send-closed", "error: rotating")
	c := relaytest.Dial(t, r.URL())
	subscribe(c, "s", nostr.Filter{Kinds: []int{1}})
	if cl, ok := readFrame(t, c).(*nostr.ClosedEnvelope); !ok || cl.Reason != "ERROR: error: rotating" {
		t.Fatalf("want CLOSED \"ERROR: error: rotating\", got %v", cl)
	}
}
