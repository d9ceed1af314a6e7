package conformance

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/identity"
)

// The fixed values of the vectors and of the NIP's examples.
const (
	// Now is every vector's clock unless the vector says otherwise:
	// 2026-01-01T00:00:00Z.
	Now = 1767225600
	// Created is the created_at of the examples: 20 s before Now.
	Created = Now - 20
	// GrantCreated is the created_at of the example lease grant, an hour
	// before Now.
	GrantCreated = Now - 3600
	// WorkloadID is the example workload.
	WorkloadID = "web-1"
)

// Relays are the example lease's relays (quorum 2).
var Relays = []string{"wss://relay-a.example", "wss://relay-b.example", "wss://relay-c.example"}

// ExampleContext is the context of the NIP's examples and of every vector
// that does not say otherwise: the clock at Now, the issuer key trusted,
// and WorkloadID held by the primary key with the standby key as its
// standby. keys are the fixed keys by name.
func ExampleContext(keys map[string]Key) Context {
	return Context{
		Now:            Now,
		TrustedIssuers: []string{keys["issuer"].Public},
		Workloads: []Workload{{
			ID: WorkloadID, Holder: keys["primary"].Public,
			Members: []string{keys["primary"].Public, keys["standby"].Public},
		}},
		Limits: DefaultLimits(),
	}
}

// FixedKeys returns every fixed key by name.
func FixedKeys() (map[string]Key, error) {
	keys := map[string]Key{}
	for _, n := range KeyNames {
		k, err := FixedKey(n)
		if err != nil {
			return nil, err
		}
		keys[n] = k
	}
	return keys, nil
}

// Generate builds every vector file and the NIP with its example events
// filled in, judging each vector with Judge and failing when a verdict is
// not the one its case states. It returns the files' contents by path
// relative to root (the repository root, where it reads the NIP).
func Generate(root string) (map[string][]byte, error) {
	keys, err := FixedKeys()
	if err != nil {
		return nil, err
	}
	g := &generator{keys: keys}
	g.heartbeatFiles()
	g.revocationFile()
	g.claimFile()
	g.announcementFile()
	g.grantFile()
	g.checkpointFile()
	if g.err != nil {
		return nil, g.err
	}
	out := map[string][]byte{}
	examples := map[string]Vector{}
	for _, f := range g.files {
		for _, v := range f.file.Vectors {
			if v.Example != "" {
				examples[f.name+"#"+v.Name] = v
			}
		}
		b, err := encodeFile(f.file)
		if err != nil {
			return nil, err
		}
		out[filepath.Join(VectorsDir, f.name)] = b
	}
	nip, err := os.ReadFile(filepath.Join(root, NIPPath))
	if err != nil {
		return nil, err
	}
	nip, err = fillExamples(nip, examples)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", NIPPath, err)
	}
	out[NIPPath] = nip
	return out, nil
}

type generator struct {
	keys  map[string]Key
	files []*fileBuilder
	err   error
}

type fileBuilder struct {
	name string
	file File
}

func (g *generator) fail(format string, args ...any) {
	if g.err == nil {
		g.err = fmt.Errorf(format, args...)
	}
}

func (g *generator) newFile(name string, kind int, title string) *fileBuilder {
	f := &fileBuilder{name: name, file: File{Kind: kind, Title: title, Regenerate: RegenerateCommand, Context: ExampleContext(g.keys)}}
	g.files = append(g.files, f)
	return f
}

// vcase is one vector as the generator states it: the event, the context
// (nil: ExampleContext) and the verdict it must get (want "" is accept).
type vcase struct {
	name, about, example string
	ctx                  *Context
	ev                   *nostr.Event
	want                 heartbeat.RejectReason
}

// add judges c and appends it to f, failing when the agent's verdict is
// not c.want.
func (g *generator) add(f *fileBuilder, c vcase) {
	if g.err != nil {
		return
	}
	if c.ev == nil {
		g.fail("%s#%s: no event", f.name, c.name)
		return
	}
	ctx := f.file.Context
	if c.ctx != nil {
		ctx = *c.ctx
	}
	for _, v := range f.file.Vectors {
		if v.Name == c.name {
			g.fail("%s#%s: name used twice", f.name, c.name)
			return
		}
	}
	raw, err := marshalEvent(c.ev)
	if err != nil {
		g.fail("%s#%s: %v", f.name, c.name, err)
		return
	}
	got, err := Judge(context.Background(), ctx, raw)
	if err != nil {
		g.fail("%s#%s: %v", f.name, c.name, err)
		return
	}
	if got.Reason != c.want {
		g.fail("%s#%s: the agent gives %q (%v), the case says %q: if the rule changed on purpose, change the case (internal/conformance/cases_*.go)",
			f.name, c.name, verdictWord(got), got.Err, c.want)
		return
	}
	v := Vector{
		Name: c.name, About: c.about, Example: c.example, Context: c.ctx, Event: raw,
		SigValid: SigValid(raw), Verdict: Accept,
	}
	if c.example != "" && (!got.Accepted || c.ctx != nil) {
		g.fail("%s#%s: an example must be accepted in ExampleContext", f.name, c.name)
		return
	}
	if got.Accepted {
		v.Reads = got.Reads
	} else {
		v.Verdict, v.Reason, v.Error = Refuse, string(got.Reason), got.Err.Error()
	}
	f.file.Vectors = append(f.file.Vectors, v)
}

func verdictWord(v Verdict) string {
	if v.Accepted {
		return "accept"
	}
	return string(v.Reason)
}

// must returns ev, recording err.
func (g *generator) must(ev *nostr.Event, err error) *nostr.Event {
	if err != nil {
		g.fail("build: %v", err)
		return nil
	}
	return ev
}

// resign signs ev as k (deterministically, whatever signed it before).
func (g *generator) resign(ev *nostr.Event, k Key) *nostr.Event {
	if ev == nil {
		return nil
	}
	if err := k.sign(ev); err != nil {
		g.fail("%v", err)
	}
	return ev
}

// mutate returns a copy of ev changed by change and signed by k.
func (g *generator) mutate(ev *nostr.Event, k Key, change func(ev *nostr.Event)) *nostr.Event {
	if ev == nil {
		return nil
	}
	c := copyEvent(ev)
	change(&c)
	return g.resign(&c, k)
}

// tamper returns a copy of ev changed by change after signing: its id or
// signature no longer match.
func (g *generator) tamper(ev *nostr.Event, change func(ev *nostr.Event)) *nostr.Event {
	if ev == nil {
		return nil
	}
	c := copyEvent(ev)
	change(&c)
	return &c
}

func copyEvent(ev *nostr.Event) nostr.Event {
	c := *ev
	c.Tags = make(nostr.Tags, len(ev.Tags))
	for i, t := range ev.Tags {
		c.Tags[i] = append(nostr.Tag(nil), t...)
	}
	return c
}

// replace replaces the one occurrence of old in s.
func (g *generator) replace(s, old, new string) string {
	if n := strings.Count(s, old); n != 1 {
		g.fail("replace %q: found %d times in %.200s", old, n, s)
		return s
	}
	return strings.Replace(s, old, new, 1)
}

// editContent returns a change that replaces old with new in the content.
func (g *generator) editContent(old, new string) func(ev *nostr.Event) {
	return func(ev *nostr.Event) { ev.Content = g.replace(ev.Content, old, new) }
}

// setTag sets the first tag named key to value (appends one when there is
// none); value "" removes it.
func setTag(key string, value ...string) func(ev *nostr.Event) {
	return func(ev *nostr.Event) {
		for i, t := range ev.Tags {
			if len(t) > 0 && t[0] == key {
				if len(value) == 0 {
					ev.Tags = append(ev.Tags[:i:i], ev.Tags[i+1:]...)
				} else {
					ev.Tags[i] = append(nostr.Tag{key}, value...)
				}
				return
			}
		}
		if len(value) > 0 {
			ev.Tags = append(ev.Tags, append(nostr.Tag{key}, value...))
		}
	}
}

// setTagValue replaces the tag [key, old] with [key, new].
func (g *generator) setTagValue(key, old, new string) func(ev *nostr.Event) {
	return func(ev *nostr.Event) {
		for i, t := range ev.Tags {
			if len(t) >= 2 && t[0] == key && t[1] == old {
				ev.Tags[i] = nostr.Tag{key, new}
				return
			}
		}
		g.fail("no tag [%s %s]", key, old)
	}
}

func flipHex(s string) string {
	if s == "" {
		return s
	}
	last := s[len(s)-1]
	repl := byte('0')
	if last == '0' {
		repl = '1'
	}
	return s[:len(s)-1] + string(repl)
}

// firstField is the content's first member, `"name":value`.
func (g *generator) firstField(content string) string {
	var m json.RawMessage
	if err := json.Unmarshal([]byte(content), &m); err != nil || !strings.HasPrefix(content, `{"`) {
		g.fail("content %.80q is not an object", content)
		return ""
	}
	dec := json.NewDecoder(strings.NewReader(content))
	if _, err := dec.Token(); err != nil {
		g.fail("%v", err)
		return ""
	}
	if _, err := dec.Token(); err != nil {
		g.fail("%v", err)
		return ""
	}
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		g.fail("%v", err)
		return ""
	}
	return content[1:dec.InputOffset()]
}

// commonCases are the vectors every kind gets from its valid example
// base, signed by signer: the envelope (signature, id, key forms, kind),
// the time window, NIP-40 expiry and a duplicated field. stale says
// whether the kind has the heartbeats' age limit.
func (g *generator) commonCases(f *fileBuilder, base *nostr.Event, signer Key) {
	if base == nil {
		return
	}
	stranger := g.keys["stranger"]
	g.add(f, vcase{name: "bad-sig", about: "The signature's last hex digit changed.", want: heartbeat.ReasonBadSig,
		ev: g.tamper(base, func(ev *nostr.Event) { ev.Sig = flipHex(ev.Sig) })})
	g.add(f, vcase{name: "sig-by-another-key", about: "The example's pubkey and id, signed with the stranger's key: a forgery (of the issuer, for a lease grant).",
		want: heartbeat.ReasonBadSig, ev: g.tamper(base, func(ev *nostr.Event) {
			id, _ := hex.DecodeString(ev.ID)
			sig, err := schnorr.Sign(stranger.sk, id)
			if err != nil {
				g.fail("%v", err)
				return
			}
			ev.Sig = hex.EncodeToString(sig.Serialize())
		})})
	g.add(f, vcase{name: "bad-id", about: "The id's last hex digit changed: it is not the hash of the event.", want: heartbeat.ReasonBadID,
		ev: g.tamper(base, func(ev *nostr.Event) { ev.ID = flipHex(ev.ID) })})
	g.add(f, vcase{name: "id-uppercase", about: "The id in uppercase hex: ids are lowercase hex.", want: heartbeat.ReasonBadID,
		ev: g.tamper(base, func(ev *nostr.Event) { ev.ID = strings.ToUpper(ev.ID) })})
	g.add(f, vcase{name: "pubkey-uppercase", about: "The pubkey in uppercase hex: event keys are lowercase hex.",
		want: heartbeat.ReasonMalformed, ev: g.tamper(base, func(ev *nostr.Event) { ev.PubKey = strings.ToUpper(ev.PubKey) })})
	g.add(f, vcase{name: "pubkey-npub", about: "The pubkey as NIP-19 npub: only content fields accept npub, the event's pubkey is hex.",
		want: heartbeat.ReasonMalformed, ev: g.tamper(base, func(ev *nostr.Event) {
			npub, err := identity.NpubOfHex(ev.PubKey)
			if err != nil {
				g.fail("%v", err)
			}
			ev.PubKey = npub
		})})
	g.add(f, vcase{name: "kind-1", about: "The example's tags and content under kind 1.", want: heartbeat.ReasonBadKind,
		ev: g.mutate(base, signer, func(ev *nostr.Event) { ev.Kind = 1 })})
	g.add(f, vcase{name: "future-limit", about: "created_at 30 s ahead of now: max_skew_s, still accepted.",
		ev: g.mutate(base, signer, func(ev *nostr.Event) { ev.CreatedAt = Now + 30 })})
	g.add(f, vcase{name: "future", about: "created_at 31 s ahead of now, past max_skew_s.", want: heartbeat.ReasonFuture,
		ev: g.mutate(base, signer, func(ev *nostr.Event) { ev.CreatedAt = Now + 31 })})
	g.add(f, vcase{name: "expired", about: "A NIP-40 expiration equal to now: expired (the agent enforces expiry itself).",
		want: heartbeat.ReasonExpired, ev: g.mutate(base, signer, setTag("expiration", itoa(Now)))})
	g.add(f, vcase{name: "expiration-not-a-time", about: "A NIP-40 expiration that is not a unix time.",
		want: heartbeat.ReasonBadTags, ev: g.mutate(base, signer, setTag("expiration", "soon"))})
	first := g.firstField(base.Content)
	g.add(f, vcase{name: "duplicate-field", about: "The content's first field given twice, with the same value: refused whatever the values (see the NIP).",
		want: heartbeat.ReasonDecode, ev: g.mutate(base, signer, func(ev *nostr.Event) { ev.Content = "{" + first + "," + ev.Content[1:] })})
	name := first[:strings.Index(first, ":")]
	g.add(f, vcase{name: "duplicate-field-case", about: "The content's first field again, in uppercase: encoding/json would read it as the same field.",
		want: heartbeat.ReasonDecode, ev: g.mutate(base, signer, func(ev *nostr.Event) {
			ev.Content = "{" + strings.ToUpper(name) + first[len(name):] + "," + ev.Content[1:]
		})})
	g.add(f, vcase{name: "content-not-json", about: "Content that is not a JSON object.", want: heartbeat.ReasonDecode,
		ev: g.mutate(base, signer, func(ev *nostr.Event) { ev.Content = "hello" })})
}

func itoa(n int64) string { return fmt.Sprint(n) }

// fillExamples rewrites the fenced json block after each example marker
// of the NIP: "<!-- example FILE#NAME -->" gets the vector's event,
// "<!-- content FILE#NAME -->" its content, indented. Every example vector
// must have its event marker.
func fillExamples(nip []byte, examples map[string]Vector) ([]byte, error) {
	blocks, err := ParseNIPBlocks(nip)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	var out bytes.Buffer
	last := 0
	for _, b := range blocks {
		if b.Marker == "" {
			continue
		}
		v, ok := examples[b.Vector]
		if !ok {
			return nil, fmt.Errorf("line %d: %s is not an example vector", b.Line, b.Vector)
		}
		var body []byte
		switch b.Marker {
		case "example":
			used[b.Vector] = true
			body = pretty(v.Event)
		case "content":
			var ev nostr.Event
			if err := json.Unmarshal(v.Event, &ev); err != nil {
				return nil, err
			}
			body = pretty([]byte(ev.Content))
		}
		out.Write(nip[last:b.Start])
		out.Write(body)
		last = b.End
	}
	out.Write(nip[last:])
	for _, name := range sortedNames(examples) {
		if !used[name] {
			return nil, fmt.Errorf("example vector %s has no <!-- example %s --> block", name, name)
		}
	}
	return out.Bytes(), nil
}

// marshalEvent is ev's JSON with the fields in NIP-01's order and no HTML
// escaping.
func marshalEvent(ev *nostr.Event) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(struct {
		ID        string     `json:"id"`
		PubKey    string     `json:"pubkey"`
		CreatedAt int64      `json:"created_at"`
		Kind      int        `json:"kind"`
		Tags      nostr.Tags `json:"tags"`
		Content   string     `json:"content"`
		Sig       string     `json:"sig"`
	}{ev.ID, ev.PubKey, int64(ev.CreatedAt), ev.Kind, ev.Tags, ev.Content, ev.Sig})
	return bytes.TrimSpace(buf.Bytes()), err
}
