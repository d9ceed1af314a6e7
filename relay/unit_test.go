package relay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	tests := []struct {
		attempt  int
		r        float64
		min, max time.Duration
	}{
		{0, 0, 50 * time.Millisecond, 50 * time.Millisecond},
		{0, 0.999, 50 * time.Millisecond, 100 * time.Millisecond},
		{1, 0, 100 * time.Millisecond, 100 * time.Millisecond},
		{3, 0.5, 600 * time.Millisecond, 600 * time.Millisecond},
		{10, 0, 500 * time.Millisecond, 500 * time.Millisecond},
		{1000, 0.999, 500 * time.Millisecond, time.Second},
		{2, -1, 200 * time.Millisecond, 200 * time.Millisecond},
		{2, 7, 200 * time.Millisecond, 400 * time.Millisecond},
	}
	for _, tt := range tests {
		got := b.Delay(tt.attempt, tt.r)
		if got < tt.min || got > tt.max {
			t.Errorf("Delay(%d, %v) = %v, want in [%v, %v]", tt.attempt, tt.r, got, tt.min, tt.max)
		}
	}
}

// TestParseReason runs the parser over the messages strfry, khatru and
// @nostr-relay/core really send (quoted from their sources: strfry's
// RelayIngester.cpp, RelayWriter.cpp, RelayServer.h and events.cpp; khatru
// v0.19.1's handlers.go; @nostr-relay/core 0.0.40's event.service.ts,
// event.util.ts and its validator's zod messages), and a few case and
// wrapper variants.
func TestParseReason(t *testing.T) {
	tests := []struct {
		relay, in, want string
		permanent       bool
	}{
		// strfry: every CLOSED and NOTICE is wrapped in "ERROR: ".
		{"strfry", "ERROR: auth-required: requested filter requires authentication", PrefixAuthRequired, false},
		{"strfry", "ERROR: too many concurrent REQs", PrefixError, false},
		{"strfry", "ERROR: bad req: error parsing #d: filter item too large", PrefixInvalid, true},
		{"strfry", "ERROR: bad req: too many tags in filter", PrefixInvalid, true},
		{"strfry", "ERROR: bad req: arr too big", PrefixInvalid, true},
		{"strfry", "ERROR: bad msg: unparseable message", PrefixInvalid, true},
		{"strfry", "invalid: event too large: 65792", PrefixInvalid, true},
		{"strfry", "invalid: created_at too late", PrefixInvalid, true},
		{"strfry", "invalid: ephemeral event expired", PrefixInvalid, true},
		{"strfry", "duplicate: have this event", PrefixDuplicate, false},
		{"strfry", "replaced: have newer event", PrefixReplaced, false},
		{"strfry", "deleted: user requested deletion", PrefixDeleted, false},
		{"strfry", "auth-required: event marked as protected", PrefixAuthRequired, false},
		{"strfry", "restricted: must be published by the author", PrefixRestricted, true},
		{"strfry", "blocked: event marked as protected", PrefixBlocked, true},
		{"strfry", "error: incorrect or missing relay tag, expected: wss://relay.example.com", PrefixError, false},
		{"strfry", "error: challenge string mismatch", PrefixError, false},
		{"strfry", "successfully authenticated", "", false},
		{"strfry", "Write error: MDB_MAP_FULL: Environment mapsize limit reached", "", false},
		// khatru v0.19.1.
		{"khatru", "mute: no one was listening for this", PrefixMute, false},
		{"khatru", "broadcasted to 2 listeners", "", false},
		{"khatru", "auth-required: must be published by authenticated event author", PrefixAuthRequired, false},
		{"khatru", "blocked: must be published by event author", PrefixBlocked, true},
		{"khatru", "invalid: id is computed incorrectly", PrefixInvalid, true},
		{"khatru", "error: failed to verify signature", PrefixError, false},
		{"khatru", "error: failed to authenticate", PrefixError, false},
		{"khatru", "unsupported: this relay does not support NIP-45", PrefixUnsupported, true},
		{"khatru", "blocked: no reason", PrefixBlocked, true},
		{"khatru", "failed to parse envelope: unknown label", "", false},
		// @nostr-relay/core 0.0.40 and its validator.
		{"nostr-relay", `invalid: must be less than or equal to 102400 chars at "[1].content"`, PrefixInvalid, true},
		{"nostr-relay", "duplicate: the event already exists", PrefixDuplicate, false},
		{"nostr-relay", "invalid: signature is wrong", PrefixInvalid, true},
		{"nostr-relay", "reject: event is expired", PrefixInvalid, true},
		{"nostr-relay", "invalid: the relay url is wrong", PrefixInvalid, true},
		{"nostr-relay", "restricted: we can't serve DMs to unauthenticated users, does your client implement NIP-42?", PrefixRestricted, true},
		{"nostr-relay", "block: you are blacklisted", PrefixBlocked, true},
		{"nostr-relay", "error: unknown", PrefixError, false},
		// Case, spacing and wrapper variants; nothing prefix-shaped.
		{"any", "RATE-LIMITED: slow down", PrefixRateLimited, false},
		{"any", "Error: Rate-Limited: 10 events per minute", PrefixRateLimited, false},
		{"any", "  blocked:no space", PrefixBlocked, true},
		{"any", "NOTICE: restricted: paid relay", PrefixRestricted, true},
		{"any", "ERROR: error: rotating", PrefixError, false},
		{"any", "pow: difficulty 20 required", PrefixPoW, true},
		{"any", "some words: then colon", "", false},
		{"any", "nonsense: not a class", "", false},
		{"any", "", "", false},
		{"any", ":x", "", false},
	}
	for _, tt := range tests {
		got := ParseReason(tt.in)
		if got.Prefix != tt.want || permanentClosed(got.Prefix) != tt.permanent || got.Text != tt.in {
			t.Errorf("%s: ParseReason(%q) = %+v (permanent %v), want prefix %q (permanent %v)",
				tt.relay, tt.in, got, permanentClosed(got.Prefix), tt.want, tt.permanent)
		}
	}
	if d := ParseReason("ERROR: auth-required: requested filter requires authentication").Detail; d != "requested filter requires authentication" {
		t.Errorf("Detail = %q, want the words after the prefix", d)
	}
}

func TestReasonLabelsBounded(t *testing.T) {
	known := map[string]bool{}
	for _, l := range ReasonLabels {
		known[l] = true
	}
	for _, class := range knownPrefixes {
		if !known[class] {
			t.Errorf("class %q missing from ReasonLabels", class)
		}
	}
	for _, o := range []RelayOutcome{
		{Outcome: OutcomeAccepted}, {Outcome: OutcomeRejected, Reason: "whatever you like"},
		{Outcome: OutcomeTimedOut, cause: causeNoOK}, {Outcome: OutcomeRejected, Reason: "ERROR: blocked: x", Prefix: PrefixBlocked},
	} {
		if l := o.reasonLabel(); !known[l] {
			t.Errorf("reasonLabel(%+v) = %q, not in ReasonLabels", o, l)
		}
	}
}

func TestWithSince(t *testing.T) {
	own := nostr.Timestamp(5)
	base := []nostr.Filter{
		{Kinds: []int{1}, Limit: 100},
		{Kinds: []int{2}, Since: &own},
	}
	fs := withSince(base, func(nostr.Filter) nostr.Timestamp { return 42 })
	if g := fs[0]; g.Limit != 100 || g.Since == nil || *g.Since != 42 {
		t.Errorf("filter 0 = %+v, want limit 100 since 42", g)
	}
	if g := fs[1]; *g.Since != 5 {
		t.Errorf("filter 1 since = %v, want its own 5", *g.Since)
	}
	if base[0].Since != nil || base[0].Limit != 100 {
		t.Errorf("withSince modified its input: %+v", base[0])
	}
}

func TestSinceForPerFilter(t *testing.T) {
	o := Options{
		Since: func() nostr.Timestamp { return 7 },
		SinceFor: func(f nostr.Filter) nostr.Timestamp {
			if f.Kinds[0] == 1 {
				return 100
			}
			return 0
		},
	}
	fs := withSince([]nostr.Filter{{Kinds: []int{1}}, {Kinds: []int{2}}}, o.sinceOf())
	if g := fs[0]; g.Since == nil || *g.Since != 100 {
		t.Errorf("kind 1 since = %v, want 100 from SinceFor", g.Since)
	}
	if g := fs[1]; g.Since != nil {
		t.Errorf("kind 2 since = %v, want none (SinceFor returned 0, Since ignored)", *g.Since)
	}
	o.SinceFor = nil
	fs = withSince([]nostr.Filter{{Kinds: []int{2}}}, o.sinceOf())
	if g := fs[0]; g.Since == nil || *g.Since != 7 {
		t.Errorf("since without SinceFor = %v, want 7 from Since", g.Since)
	}
}

func TestParseLimits(t *testing.T) {
	tests := []struct {
		doc     string
		want    Limits
		wantErr bool
	}{
		{`{"name":"x"}`, Limits{}, false},
		{`{"limitation":{"max_message_length":65536,"max_subscriptions":20,"max_filters":10,"max_limit":500,"auth_required":true}}`,
			Limits{MaxMessageLength: 65536, MaxSubscriptions: 20, MaxFilters: 10, MaxLimit: 500, AuthRequired: true}, false},
		{`{"limitation":{"max_message_length":-5,"max_subscriptions":0,"max_filters":-1,"max_limit":-3}}`, Limits{}, false},
		{`{"limitation":{"max_message_length":10}}`, Limits{}, false},
		{`{"limitation":{"max_content_length":102400,"max_event_tags":2000}}`, Limits{MaxContentLength: 102400, MaxEventTags: 2000}, false},
		{`{"limitation":{"max_content_length":5,"max_event_tags":-1}}`, Limits{}, false},
		{`not json`, Limits{}, true},
		{`{"limitation":{"max_limit":"many"}}`, Limits{}, true},
	}
	for _, tt := range tests {
		got, err := parseLimits(strings.NewReader(tt.doc))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseLimits(%s) = %+v, %v; want %+v, err=%v", tt.doc, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.URLs = []string{"ws://127.0.0.1:1"}
	mod := func(f func(*Config)) Config { c := ok; f(&c); return c }
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"default with url", ok, true},
		{"no urls", mod(func(c *Config) { c.URLs = nil }), false},
		{"http url", mod(func(c *Config) { c.URLs = []string{"http://x"} }), false},
		{"no host", mod(func(c *Config) { c.URLs = []string{"ws://"} }), false},
		{"zero dial timeout", mod(func(c *Config) { c.DialTimeout = 0 }), false},
		{"max below initial", mod(func(c *Config) { c.BackoffMax = time.Millisecond }), false},
		{"tiny message size", mod(func(c *Config) { c.MaxMessageSize = 10 }), false},
		{"negative buffer", mod(func(c *Config) { c.ReceiveBuffer = -1 }), false},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig", tt.name, err)
		}
	}
}

func TestNormalizedURLs(t *testing.T) {
	c := Config{URLs: []string{"ws://A.example/", "ws://a.example", "wss://b.example"}}
	got := c.normalizedURLs()
	if len(got) != 2 || got[0] != "ws://a.example" || got[1] != "wss://b.example" {
		t.Fatalf("normalizedURLs() = %v, want [ws://a.example wss://b.example]", got)
	}
}

func FuzzParseFrame(f *testing.F) {
	for _, s := range []string{
		`["EVENT","s",{"id":"00","pubkey":"00","created_at":1,"kind":1,"tags":[],"content":"","sig":"00"}]`,
		`["EOSE","s"]`, `["CLOSED","s","blocked: x"]`, `["OK","00",true,""]`, `["AUTH","c"]`,
		`["NOTICE","hi"]`, `["EVENT"]`, `[`, `"`, `["OK"]`, `["CLOSED"]`, `["EVENT","s",{"tags":[[1]]}]`,
	} {
		f.Add([]byte(s))
	}
	parser := nostr.NewMessageParser()
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := parseFrame(parser, b)
		if err == nil && env == nil {
			t.Fatalf("parseFrame(%q) = nil, nil", b)
		}
	})
}

func FuzzParseLimits(f *testing.F) {
	f.Add(`{"limitation":{"max_message_length":65536,"max_filters":3}}`)
	f.Add(`{"limitation":null}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, s string) {
		l, err := parseLimits(strings.NewReader(s))
		if err != nil {
			return
		}
		if l.MaxMessageLength < 0 || l.MaxFilters < 0 || l.MaxLimit < 0 || l.MaxSubscriptions < 0 {
			t.Fatalf("parseLimits(%q) = %+v, want no negative limit", s, l)
		}
	})
}

// Two queries never send the same filter, so a relay's filter-result cache
// (@nostr-relay/core keeps one for a second) cannot answer a claim read
// with a result from before a claim was stored; an until of the caller's
// own is kept.
func TestUncachedQueryFilter(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	f := nostr.Filter{Kinds: []int{38386}, Tags: nostr.TagMap{"d": {"paygress:promoted:v1:w"}}}
	a, b := uncached(f, now, 0.1), uncached(f, now, 0.7)
	if a.Until == nil || b.Until == nil || *a.Until == *b.Until {
		t.Fatalf("uncached untils = %v, %v, want two different ones", a.Until, b.Until)
	}
	if min := nostr.Timestamp(now.Add(uncachedUntil).Unix()); *a.Until < min {
		t.Fatalf("until = %v, want at least a year ahead (%v)", *a.Until, min)
	}
	if f.Until != nil {
		t.Fatalf("uncached modified its input")
	}
	own := nostr.Timestamp(5)
	f.Until = &own
	if g := uncached(f, now, 0.5); *g.Until != 5 {
		t.Fatalf("uncached replaced the caller's until: %v", *g.Until)
	}
}

func TestRefusalsNamesEveryRelayThatDidNotAccept(t *testing.T) {
	res := PublishResult{
		Accepted: []string{"wss://a"},
		Rejected: []RelayOutcome{{Relay: "wss://b", Outcome: OutcomeRejected, Reason: "blocked: no"}},
		Muted:    []RelayOutcome{{Relay: "wss://c", Outcome: OutcomeMuted, Reason: "mute: no one was listening"}},
		TimedOut: []RelayOutcome{{Relay: "wss://d", Outcome: OutcomeTimedOut, Notice: "invalid: too large"}, {Relay: "wss://e", Outcome: OutcomeTimedOut}},
		Failed:   []RelayOutcome{{Relay: "wss://f", Outcome: OutcomeFailed, Reason: "event exceeds max_message_length"}},
	}
	want := "rejected wss://b (blocked: no), muted wss://c (mute: no one was listening), timed out wss://d (invalid: too large), timed out wss://e, failed wss://f (event exceeds max_message_length)"
	if got := res.Refusals(); got != want {
		t.Errorf("Refusals() =\n %s\nwant\n %s", got, want)
	}
	if got := (PublishResult{Accepted: []string{"wss://a"}}).Refusals(); got != "none" {
		t.Errorf("Refusals() with every relay accepting = %q, want none", got)
	}
}
