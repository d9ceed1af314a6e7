package heartbeat

// A Go mirror of how Paygress v1 reads and writes the events we share with
// it, transcribed from DhananjayPurohit/Paygress at 6ffebd5:
//
//   - src/nostr/wire.rs: HeartbeatContent, CapacityInfo,
//     LeaseRevocationContent, StandbyPromotionAnnouncementContent (serde
//     derive, no deny_unknown_fields; version is #[serde(default = 1)],
//     state_uri is #[serde(default, skip_serializing_if = "Option::is_none")]).
//   - src/nostr/subscriber/publish.rs: the tags and d tags Paygress builds
//     from those structs.
//   - src/nostr/subscriber/mod.rs get_service_public_key, the value Paygress
//     puts in every *_npub field it writes: keys.public_key().to_hex().
//   - src/provider/orchestrator.rs, standby.rs, subscriber/query.rs: heartbeats
//     are keyed by provider_npub and revocations matched on
//     primary_provider_npub by plain string comparison with a hex key;
//     announcements are found by authors and d tag, then workload_id.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
	"provideragent/lease"
)

// pgCapacityInfo mirrors wire.rs CapacityInfo.
type pgCapacityInfo struct {
	CPUAvailable       uint64 `json:"cpu_available"`
	MemoryMBAvailable  uint64 `json:"memory_mb_available"`
	StorageGBAvailable uint64 `json:"storage_gb_available"`
}

// pgHeartbeatContent mirrors wire.rs HeartbeatContent (both heartbeat kinds).
type pgHeartbeatContent struct {
	ProviderNpub      string         `json:"provider_npub"`
	Timestamp         uint64         `json:"timestamp"`
	ActiveWorkloads   uint32         `json:"active_workloads"`
	AvailableCapacity pgCapacityInfo `json:"available_capacity"`
	Version           uint8          `json:"version" serde:"default=1"`
}

// pgLeaseRevocationContent mirrors wire.rs LeaseRevocationContent.
type pgLeaseRevocationContent struct {
	WorkloadID          string   `json:"workload_id"`
	PrimaryProviderNpub string   `json:"primary_provider_npub"`
	StandbyProviders    []string `json:"standby_providers"`
	Reason              string   `json:"reason"`
	RevokedAt           uint64   `json:"revoked_at"`
	StateURI            *string  `json:"state_uri,omitempty" serde:"default"`
	Version             uint8    `json:"version" serde:"default=1"`
}

// pgStandbyPromotionAnnouncementContent mirrors wire.rs
// StandbyPromotionAnnouncementContent.
type pgStandbyPromotionAnnouncementContent struct {
	WorkloadID     string `json:"workload_id"`
	NewPrimaryNpub string `json:"new_primary_npub"`
	PromotedAt     uint64 `json:"promoted_at"`
	Version        uint8  `json:"version" serde:"default=1"`
}

// serdeFromStr decodes data into v (a pointer to a mirror struct) the way
// serde_json::from_str with a derived Deserialize does: every field is
// required unless it is an Option or tagged serde:"default[=N]"; unknown
// fields are skipped; a field given twice, null for a non-Option, a string
// for a number, a float, a negative number or one out of range for an
// unsigned field, and trailing characters are errors. (serde also accepts a
// struct as a JSON array of its fields in order; nothing we write is one.)
func serdeFromStr(data string, v any) error {
	dec := json.NewDecoder(strings.NewReader(data))
	dec.UseNumber()
	if err := serdeValue(dec, reflect.ValueOf(v).Elem()); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing characters")
	}
	return nil
}

func serdeValue(dec *json.Decoder, v reflect.Value) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if v.Kind() == reflect.Pointer { // Option<T>
		if tok == nil {
			v.SetZero()
			return nil
		}
		p := reflect.New(v.Type().Elem())
		if err := serdeToken(dec, tok, p.Elem()); err != nil {
			return err
		}
		v.Set(p)
		return nil
	}
	return serdeToken(dec, tok, v)
}

func serdeToken(dec *json.Decoder, tok json.Token, v reflect.Value) error {
	if tok == nil {
		return fmt.Errorf("invalid type: null, expected %s", v.Type())
	}
	switch v.Kind() {
	case reflect.String:
		s, ok := tok.(string)
		if !ok {
			return fmt.Errorf("invalid type: %v, expected a string", tok)
		}
		v.SetString(s)
	case reflect.Uint8, reflect.Uint32, reflect.Uint64:
		n, ok := tok.(json.Number)
		if !ok {
			return fmt.Errorf("invalid type: %v, expected u%d", tok, v.Type().Bits())
		}
		u, err := serdeUnsigned(string(n), v.Type().Bits())
		if err != nil {
			return err
		}
		v.SetUint(u)
	case reflect.Slice:
		if tok != json.Delim('[') {
			return fmt.Errorf("invalid type: %v, expected a sequence", tok)
		}
		s := reflect.MakeSlice(v.Type(), 0, 0)
		for dec.More() {
			e := reflect.New(v.Type().Elem()).Elem()
			if err := serdeValue(dec, e); err != nil {
				return err
			}
			s = reflect.Append(s, e)
		}
		if _, err := dec.Token(); err != nil {
			return err
		}
		v.Set(s)
	case reflect.Struct:
		if tok != json.Delim('{') {
			return fmt.Errorf("invalid type: %v, expected struct %s", tok, v.Type())
		}
		return serdeStruct(dec, v)
	default:
		return fmt.Errorf("mirror has no rule for %s", v.Type())
	}
	return nil
}

// serdeUnsigned parses a JSON number into an unsigned integer of bits bits as
// serde_json does: floats (a fraction or exponent, or an integer beyond u64
// or below i64) are the wrong type, negative and too large integers the wrong
// value. "-0" is 0.
func serdeUnsigned(s string, bits int) (uint64, error) {
	if strings.ContainsAny(s, ".eE") {
		return 0, fmt.Errorf("invalid type: floating point `%s`, expected u%d", s, bits)
	}
	if strings.HasPrefix(s, "-") {
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("invalid type: floating point `%s`, expected u%d", s, bits)
		}
		if i < 0 {
			return 0, fmt.Errorf("invalid value: integer `%d`, expected u%d", i, bits)
		}
		return 0, nil
	}
	u, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid type: floating point `%s`, expected u%d", s, bits)
	}
	if bits < 64 && u >= 1<<bits {
		return 0, fmt.Errorf("invalid value: integer `%d`, expected u%d", u, bits)
	}
	return u, nil
}

func serdeStruct(dec *json.Decoder, v reflect.Value) error {
	t := v.Type()
	seen := make([]bool, t.NumField())
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return err
		}
		key := kt.(string)
		i := serdeField(t, key)
		if i < 0 { // unknown field: ignored
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return err
			}
			continue
		}
		if seen[i] {
			return fmt.Errorf("duplicate field `%s`", key)
		}
		seen[i] = true
		if err := serdeValue(dec, v.Field(i)); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return err
	}
	for i, ok := range seen {
		if ok {
			continue
		}
		f := t.Field(i)
		switch tag := f.Tag.Get("serde"); {
		case strings.HasPrefix(tag, "default="):
			n, _ := strconv.ParseUint(strings.TrimPrefix(tag, "default="), 10, 64)
			v.Field(i).SetUint(n)
		case tag == "default", f.Type.Kind() == reflect.Pointer:
			v.Field(i).SetZero()
		default:
			return fmt.Errorf("missing field `%s`", serdeName(f))
		}
	}
	return nil
}

func serdeName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

func serdeField(t reflect.Type, key string) int {
	for i := 0; i < t.NumField(); i++ {
		if serdeName(t.Field(i)) == key {
			return i
		}
	}
	return -1
}

// TestSerdeMirror checks the mirror decoder against serde_json's rules, so
// the tests below cannot pass because the mirror is lax.
func TestSerdeMirror(t *testing.T) {
	const hb = `{"provider_npub":"k","timestamp":5,"active_workloads":1,"available_capacity":{"cpu_available":1,"memory_mb_available":2,"storage_gb_available":3}`
	tests := []struct {
		name    string
		content string
		ok      bool
	}{
		{"all fields", hb + `,"version":1}`, true},
		{"version absent defaults", hb + `}`, true},
		{"unknown field ignored", hb + `,"version":1,"workloads":[{"id":"a","epoch":1}],"x":null}`, true},
		{"unknown field twice ignored", hb + `,"x":1,"x":2}`, true},
		{"-0 is 0", strings.Replace(hb, `"timestamp":5`, `"timestamp":-0`, 1) + `}`, true},
		{"missing timestamp", strings.Replace(hb, `"timestamp":5,`, "", 1) + `}`, false},
		{"missing nested field", strings.Replace(hb, `,"storage_gb_available":3`, "", 1) + `}`, false},
		{"negative timestamp", strings.Replace(hb, `"timestamp":5`, `"timestamp":-5`, 1) + `}`, false},
		{"float timestamp", strings.Replace(hb, `"timestamp":5`, `"timestamp":5.0`, 1) + `}`, false},
		{"exponent timestamp", strings.Replace(hb, `"timestamp":5`, `"timestamp":5e0`, 1) + `}`, false},
		{"timestamp beyond u64", strings.Replace(hb, `"timestamp":5`, `"timestamp":18446744073709551616`, 1) + `}`, false},
		{"active_workloads beyond u32", strings.Replace(hb, `"active_workloads":1`, `"active_workloads":4294967296`, 1) + `}`, false},
		{"version 256", hb + `,"version":256}`, false},
		{"version null", hb + `,"version":null}`, false},
		{"timestamp as string", strings.Replace(hb, `"timestamp":5`, `"timestamp":"5"`, 1) + `}`, false},
		{"provider_npub null", strings.Replace(hb, `"provider_npub":"k"`, `"provider_npub":null`, 1) + `}`, false},
		{"duplicate field", hb + `,"timestamp":6}`, false},
		{"trailing characters", hb + `} x`, false},
		{"not an object", `"x"`, false},
	}
	for _, tt := range tests {
		var c pgHeartbeatContent
		err := serdeFromStr(tt.content, &c)
		if (err == nil) != tt.ok {
			t.Errorf("%s: serdeFromStr(%s) = %v, want ok %v", tt.name, tt.content, err, tt.ok)
		}
		if err == nil && c.Version != 1 {
			t.Errorf("%s: version = %d, want 1", tt.name, c.Version)
		}
	}
	const rev = `{"workload_id":"w","primary_provider_npub":"k","standby_providers":[],"reason":"r","revoked_at":1`
	var r pgLeaseRevocationContent
	if err := serdeFromStr(rev+`}`, &r); err != nil || r.StateURI != nil || r.Version != 1 {
		t.Errorf("revocation without state_uri and version = %+v, %v, want state_uri None, version 1", r, err)
	}
	if err := serdeFromStr(rev+`,"state_uri":null}`, &r); err != nil || r.StateURI != nil {
		t.Errorf("revocation with state_uri null = %+v, %v, want None", r, err)
	}
	if err := serdeFromStr(strings.Replace(rev, `"standby_providers":[]`, `"standby_providers":[1]`, 1)+`}`, &r); err == nil {
		t.Errorf("revocation with a number among standby_providers decoded, want an error")
	}
	if err := serdeFromStr(strings.Replace(rev, `"reason":"r",`, "", 1)+`}`, &r); err == nil {
		t.Errorf("revocation without reason decoded, want missing field")
	}
}

// pgHeartbeatTags are the tags publish.rs publish_heartbeat builds for c:
// hashtag, p (PublicKey::parse of provider_npub, written as hex), d (stored
// kind only, from provider_npub as written) and v.
func pgHeartbeatTags(c pgHeartbeatContent, stored bool) (nostr.Tags, error) {
	pk, err := identity.ParsePublicKey(c.ProviderNpub) // publish fails when this fails
	if err != nil {
		return nil, err
	}
	v := strconv.Itoa(int(c.Version))
	tags := nostr.Tags{{"t", "paygress-heartbeat"}, {"p", pk}}
	if stored {
		tags = append(tags, nostr.Tag{"d", fmt.Sprintf("paygress:heartbeat:v%d:%s:%d", c.Version, c.ProviderNpub, c.Timestamp/60)})
	}
	return append(tags, nostr.Tag{"v", v}), nil
}

// pgRevocationTags are the tags publish.rs publish_lease_revocation builds,
// one p per standby that parses as a key (others are skipped).
func pgRevocationTags(c pgLeaseRevocationContent) nostr.Tags {
	tags := nostr.Tags{
		{"t", "paygress"}, {"t", "paygress-revocation"},
		{"d", fmt.Sprintf("paygress:revocation:v%d:%s:%s", c.Version, c.PrimaryProviderNpub, c.WorkloadID)},
		{"v", strconv.Itoa(int(c.Version))}, {"workload", c.WorkloadID},
	}
	for _, s := range c.StandbyProviders {
		if pk, err := identity.ParsePublicKey(s); err == nil {
			tags = append(tags, nostr.Tag{"p", pk})
		}
	}
	return tags
}

// pgAnnouncementTags are the tags publish.rs
// publish_standby_promotion_announcement builds.
func pgAnnouncementTags(c pgStandbyPromotionAnnouncementContent) nostr.Tags {
	return nostr.Tags{
		{"t", "paygress"}, {"t", "paygress-promoted"},
		{"d", fmt.Sprintf("paygress:promoted:v%d:%s", c.Version, c.WorkloadID)},
		{"v", strconv.Itoa(int(c.Version))}, {"workload", c.WorkloadID},
	}
}

// checkPaygressTags checks that got starts with Paygress's tags, in order and
// form, and that whatever follows is one of ours (extras).
func checkPaygressTags(t *testing.T, got, want nostr.Tags, extras ...string) {
	t.Helper()
	if len(got) < len(want) || !reflect.DeepEqual(got[:len(want)], want) {
		t.Fatalf("tags = %v, want Paygress's %v first", got, want)
	}
	for _, tag := range got[len(want):] {
		if !containsString(extras, tag[0]) {
			t.Fatalf("tags = %v: extra tag %v after Paygress's, want only %v", got, tag, extras)
		}
	}
}

// checkHexKey checks a key field is lowercase hex naming want (hex).
func checkHexKey(t *testing.T, field, got, want string) {
	t.Helper()
	if !lease.IsHexPubkey(got) || got != want {
		t.Fatalf("%s = %q, want the lowercase hex key %s (Paygress writes to_hex() and compares strings)", field, got, want)
	}
}

// TestPaygressReadsEveryEventWePublish builds every event kind the agent
// publishes on a Paygress kind and reads it as a Paygress v1 node would: the
// content decodes under the serde mirror, key fields are lowercase hex equal
// to the signer or the named key, tags are Paygress's in its order (ours
// only after them), and d tags equal what Paygress computes for the same
// values and for the signer's own key.
func TestPaygressReadsEveryEventWePublish(t *testing.T) {
	p, s1, s2 := testKeys(t, "p"), testKeys(t, "s1"), testKeys(t, "s2")
	capacity := Capacity{CPUAvailable: 3500, MemoryMBAvailable: 7168, StorageGBAvailable: 120}
	hbParams := HeartbeatParams{At: t0, Capacity: capacity, Workloads: []WorkloadEpoch{{ID: "wl-7", Epoch: 3}, {ID: "wl-8", Epoch: 1}}}
	stored, ephemeral, err := BuildHeartbeats(p, hbParams)
	if err != nil {
		t.Fatal(err)
	}
	idle, err := BuildHeartbeat(p, HeartbeatParams{At: t0}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		ev     *nostr.Event
		stored bool
		active uint32
		cap    Capacity
	}{
		{"stored heartbeat", stored, true, 2, capacity},
		{"ephemeral heartbeat", ephemeral, false, 2, capacity},
		{"stored heartbeat, no workloads", idle, true, 0, Capacity{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c pgHeartbeatContent
			if err := serdeFromStr(tc.ev.Content, &c); err != nil {
				t.Fatalf("Paygress cannot parse %s: %v", tc.ev.Content, err)
			}
			checkHexKey(t, "provider_npub", c.ProviderNpub, p.PublicKey())
			if c.Timestamp != uint64(t0.Unix()) || c.ActiveWorkloads != tc.active || c.Version != 1 ||
				c.AvailableCapacity != pgCapacityInfo(tc.cap) {
				t.Fatalf("Paygress reads %+v, want timestamp %d, active %d, capacity %+v, version 1", c, t0.Unix(), tc.active, tc.cap)
			}
			want, err := pgHeartbeatTags(c, tc.stored)
			if err != nil {
				t.Fatalf("Paygress cannot parse provider_npub %q: %v", c.ProviderNpub, err)
			}
			checkPaygressTags(t, tc.ev.Tags, want, "expiration")
			if tc.stored {
				// What a Paygress node computes for this provider and minute.
				own := fmt.Sprintf("paygress:heartbeat:v1:%s:%d", p.PublicKey(), t0.Unix()/60)
				if d, _ := firstTag(tc.ev.Tags, "d"); d != own {
					t.Fatalf("d = %q, want %q", d, own)
				}
			}
			// The standby watchdog keys heartbeats by provider_npub and looks
			// its primary up by hex key (get_latest_heartbeats_multi).
			latest := map[string]pgHeartbeatContent{c.ProviderNpub: c}
			if _, ok := latest[p.PublicKey()]; !ok {
				t.Fatalf("a Paygress standby of %s finds no heartbeat among %v", p.PublicKey(), latest)
			}
		})
	}

	stateURI := "blossom://abc"
	revNamed, err := BuildRevocation(p, RevocationParams{WorkloadID: "wl-7", Standbys: []string{s1.Npub(), s2.PublicKey()},
		Successor: s2.Npub(), Reason: "fenced", At: t0, StateURI: stateURI, Epoch: 3})
	if err != nil {
		t.Fatal(err)
	}
	revNone, err := BuildRevocation(p, RevocationParams{WorkloadID: "wl-7", Standbys: []string{s1.PublicKey()}, Reason: "fenced", At: t0, Epoch: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		ev        *nostr.Event
		standbys  []string
		successor string
		stateURI  *string
	}{
		{"revocation naming a successor", revNamed, []string{s1.PublicKey(), s2.PublicKey()}, s2.PublicKey(), &stateURI},
		{"revocation naming none", revNone, []string{s1.PublicKey()}, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c pgLeaseRevocationContent
			if err := serdeFromStr(tc.ev.Content, &c); err != nil {
				t.Fatalf("Paygress cannot parse %s: %v", tc.ev.Content, err)
			}
			checkHexKey(t, "primary_provider_npub", c.PrimaryProviderNpub, p.PublicKey())
			if len(c.StandbyProviders) != len(tc.standbys) {
				t.Fatalf("standby_providers = %v, want %v", c.StandbyProviders, tc.standbys)
			}
			for i, s := range c.StandbyProviders {
				checkHexKey(t, fmt.Sprintf("standby_providers[%d]", i), s, tc.standbys[i])
			}
			if c.WorkloadID != "wl-7" || c.Reason != "fenced" || c.RevokedAt != uint64(t0.Unix()) || c.Version != 1 ||
				!reflect.DeepEqual(c.StateURI, tc.stateURI) {
				t.Fatalf("Paygress reads %+v, want wl-7, fenced, revoked_at %d, version 1, state_uri %v", c, t0.Unix(), tc.stateURI)
			}
			// successor is ours: same rule as the Paygress key fields.
			var ours struct {
				Successor *string `json:"successor"`
			}
			if err := json.Unmarshal([]byte(tc.ev.Content), &ours); err != nil || ours.Successor == nil {
				t.Fatalf("successor missing from %s (%v)", tc.ev.Content, err)
			}
			if tc.successor == "" {
				if *ours.Successor != "" {
					t.Fatalf("successor = %q, want \"\"", *ours.Successor)
				}
			} else {
				checkHexKey(t, "successor", *ours.Successor, tc.successor)
			}
			checkPaygressTags(t, tc.ev.Tags, pgRevocationTags(c))
			own := "paygress:revocation:v1:" + p.PublicKey() + ":wl-7"
			if d, _ := firstTag(tc.ev.Tags, "d"); d != own {
				t.Fatalf("d = %q, want %q", d, own)
			}
			// handle_lease_revocation: the slot's primary (hex) must equal
			// primary_provider_npub as a string.
			if slotPrimary := p.PublicKey(); slotPrimary != c.PrimaryProviderNpub {
				t.Fatalf("a Paygress standby ignores the revocation: primary %q != slot's %q", c.PrimaryProviderNpub, slotPrimary)
			}
		})
	}

	claim, err := BuildPromotion(s1, PromotionParams{WorkloadID: "wl-7", At: t0, Epoch: 4})
	if err != nil {
		t.Fatal(err)
	}
	withdrawn, err := BuildPromotion(s1, PromotionParams{WorkloadID: "wl-7", At: t0.Add(time.Second), Epoch: 4, Status: ClaimWithdrawn})
	if err != nil {
		t.Fatal(err)
	}
	announcement, err := BuildAnnouncement(s1, AnnouncementParams{WorkloadID: "wl-7", At: t0.Add(2 * time.Second), Epoch: 4})
	if err != nil {
		t.Fatal(err)
	}
	// query_standby_promotion_announcements: kind 38386, the peers as
	// authors, #d = paygress:promoted:v1:<workload>. Every event it finds is
	// "a peer already promoted": the claim step's claims and withdrawn
	// markers must never match it, the announcement of a
	// won claim must.
	announcementQuery := nostr.Filter{Kinds: []int{38386}, Authors: []string{s1.PublicKey()},
		Tags: nostr.TagMap{"d": []string{"paygress:promoted:v1:wl-7"}}}
	for _, tc := range []struct {
		name string
		ev   *nostr.Event
	}{{"promotion claim", claim}, {"withdrawn marker", withdrawn}} {
		t.Run(tc.name, func(t *testing.T) {
			if announcementQuery.Matches(tc.ev) {
				t.Fatalf("Paygress's announcement query matches our %s (tags %v): a Paygress standby would drop its slot", tc.name, tc.ev.Tags)
			}
		})
	}
	t.Run("announcement of a won claim", func(t *testing.T) {
		if !announcementQuery.Matches(announcement) {
			t.Fatalf("Paygress's announcement query does not match our announcement (tags %v)", announcement.Tags)
		}
		var c pgStandbyPromotionAnnouncementContent
		if err := serdeFromStr(announcement.Content, &c); err != nil {
			t.Fatalf("Paygress cannot parse %s: %v", announcement.Content, err)
		}
		checkHexKey(t, "new_primary_npub", c.NewPrimaryNpub, s1.PublicKey())
		at := t0.Add(2 * time.Second)
		if c.WorkloadID != "wl-7" || c.PromotedAt != uint64(at.Unix()) || c.Version != 1 {
			t.Fatalf("Paygress reads %+v, want wl-7, promoted_at %d, version 1", c, at.Unix())
		}
		checkPaygressTags(t, announcement.Tags, pgAnnouncementTags(c))
	})
}

// pgPublish signs an event as Paygress publishes one: serde_json::to_string
// of the struct (fields in declaration order, None state_uri skipped) with
// the tags publish.rs builds.
func pgPublish(t *testing.T, k *identity.Keys, kind int, content any, tags nostr.Tags) *nostr.Event {
	t.Helper()
	b, err := json.Marshal(content)
	if err != nil {
		t.Fatal(err)
	}
	ev := &nostr.Event{Kind: kind, CreatedAt: nostr.Timestamp(t0.Unix()), Tags: tags, Content: string(b)}
	if err := k.Sign(ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestWeReadWhatPaygressPublishes builds events exactly as a Paygress v1
// node does (its own key as hex in every *_npub field and d tag) and checks
// that our decoders, and the whole verifying ingest, read the right values.
func TestWeReadWhatPaygressPublishes(t *testing.T) {
	p, s1, s2 := testKeys(t, "p"), testKeys(t, "s1"), testKeys(t, "s2")
	policy := newFakePolicy()
	policy.setWorkload("wl-7", p.PublicKey(), s1.PublicKey(), s2.PublicKey())
	in, err := NewIngestor(DefaultConfig(), policy, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ingest := func(t *testing.T, ev *nostr.Event) Ingested {
		t.Helper()
		raw, _ := ev.MarshalJSON()
		res, err := in.IngestRaw(context.Background(), t0, raw)
		if err != nil {
			t.Fatalf("IngestRaw(Paygress kind %d) = %v", ev.Kind, err)
		}
		return res
	}

	hb := pgHeartbeatContent{
		ProviderNpub: p.PublicKey(), Timestamp: uint64(t0.Unix()), ActiveWorkloads: 2,
		AvailableCapacity: pgCapacityInfo{CPUAvailable: 3500, MemoryMBAvailable: 7168, StorageGBAvailable: 120}, Version: 1,
	}
	for _, stored := range []bool{true, false} {
		tags, err := pgHeartbeatTags(hb, stored)
		if err != nil {
			t.Fatal(err)
		}
		kind := KindHeartbeatEphemeral
		if stored {
			kind = KindHeartbeat
		}
		ev := pgPublish(t, p, kind, hb, tags)
		got := ingest(t, ev).Heartbeat
		want := &Heartbeat{
			EventID: ev.ID, Ephemeral: !stored, Provider: p.PublicKey(), ProviderNpub: p.PublicKey(),
			CreatedAt: t0, Timestamp: t0, ActiveWorkloads: 2,
			Capacity: Capacity{CPUAvailable: 3500, MemoryMBAvailable: 7168, StorageGBAvailable: 120}, Version: 1, Shards: 1,
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Paygress heartbeat (stored %v) reads as %+v, want %+v", stored, got, want)
		}
		if epoch, ok := got.ClaimsLive("wl-7"); !ok || epoch != EpochUnknown {
			t.Fatalf("ClaimsLive(Paygress heartbeat) = %d, %v, want %d, true", epoch, ok, EpochUnknown)
		}
	}

	// The consumer's standby list is passed through as given: one npub, one
	// hex, one junk entry (skipped by Paygress's p tags and by us).
	uri := "blossom://abc"
	rev := pgLeaseRevocationContent{
		WorkloadID: "wl-7", PrimaryProviderNpub: p.PublicKey(), StandbyProviders: []string{s1.Npub(), "not-a-key", s2.PublicKey()},
		Reason: "heartbeat-quorum-lost-past-t2", RevokedAt: uint64(t0.Unix()), StateURI: &uri, Version: 1,
	}
	for _, withURI := range []bool{true, false} {
		c := rev
		if !withURI {
			c.StateURI = nil
		}
		ev := pgPublish(t, p, KindRevocation, c, pgRevocationTags(c))
		if strings.Contains(ev.Content, "state_uri") != withURI {
			t.Fatalf("Paygress revocation content %s: state_uri present = %v, want %v", ev.Content, !withURI, withURI)
		}
		got := ingest(t, ev).Revocation
		want := &Revocation{
			EventID: ev.ID, Signer: p.PublicKey(), CreatedAt: t0, WorkloadID: "wl-7",
			Primary: p.PublicKey(), PrimaryNpub: p.PublicKey(), Standbys: []string{s1.PublicKey(), s2.PublicKey()},
			Reason: "heartbeat-quorum-lost-past-t2", RevokedAt: t0, Version: 1,
			Successor: s1.PublicKey(), Epoch: EpochUnknown,
		}
		if withURI {
			want.StateURI = uri
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Paygress revocation (state_uri %v) reads as %+v, want %+v", withURI, got, want)
		}
	}

	ann := pgStandbyPromotionAnnouncementContent{WorkloadID: "wl-7", NewPrimaryNpub: s1.PublicKey(), PromotedAt: uint64(t0.Unix()), Version: 1}
	ev := pgPublish(t, s1, KindPromotion, ann, pgAnnouncementTags(ann))
	got := ingest(t, ev).Promotion
	want := &Promotion{
		Announcement: true,
		EventID:      ev.ID, Signer: s1.PublicKey(), CreatedAt: t0, WorkloadID: "wl-7", NewPrimary: s1.PublicKey(),
		NewPrimaryNpub: s1.PublicKey(), PromotedAt: t0, Version: 1, Epoch: EpochUnknown, Status: ClaimActive,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Paygress announcement reads as %+v, want %+v", got, want)
	}
}
