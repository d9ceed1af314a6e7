package heartbeat

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
	"provideragent/lease"
)

// paygressEvent signs an event whose tags and content are written the way
// Paygress v1 writes them (src/nostr/subscriber/publish.rs, src/nostr/wire.rs):
// serde field order, keys in *_npub fields and d tags as lowercase hex, no
// epoch/successor/workloads/status, no expiration tag.
func paygressEvent(t *testing.T, k *identity.Keys, kind int, created int64, tags nostr.Tags, content string) *nostr.Event {
	t.Helper()
	ev := &nostr.Event{Kind: kind, CreatedAt: nostr.Timestamp(created), Tags: tags, Content: content}
	if err := k.Sign(ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestDecodePaygressHeartbeat(t *testing.T) {
	k := testKeys(t, "paygress-provider")
	ts := t0.Unix()
	content := `{"provider_npub":"` + k.PublicKey() + `","timestamp":` + itoa(ts) +
		`,"active_workloads":2,"available_capacity":{"cpu_available":3500,"memory_mb_available":7168,"storage_gb_available":120},"version":1}`
	for _, kind := range []int{KindHeartbeat, KindHeartbeatEphemeral} {
		tags := nostr.Tags{{"t", "paygress-heartbeat"}, {"p", k.PublicKey()}}
		if kind == KindHeartbeat {
			tags = append(tags, nostr.Tag{"d", "paygress:heartbeat:v1:" + k.PublicKey() + ":" + itoa(ts/60)})
		}
		tags = append(tags, nostr.Tag{"v", "1"})
		ev := paygressEvent(t, k, kind, ts, tags, content)
		h, err := DecodeHeartbeat(ev)
		if err != nil {
			t.Fatalf("DecodeHeartbeat(paygress kind %d) = %v", kind, err)
		}
		want := &Heartbeat{
			EventID: ev.ID, Ephemeral: kind == KindHeartbeatEphemeral, Provider: k.PublicKey(), ProviderNpub: k.PublicKey(),
			CreatedAt: t0, Timestamp: t0, ActiveWorkloads: 2,
			Capacity: Capacity{CPUAvailable: 3500, MemoryMBAvailable: 7168, StorageGBAvailable: 120},
			Version:  1, Shards: 1,
		}
		if !reflect.DeepEqual(h, want) {
			t.Fatalf("DecodeHeartbeat(paygress) = %+v, want %+v", h, want)
		}
		if epoch, ok := h.ClaimsLive("any-workload"); !ok || epoch != EpochUnknown {
			t.Fatalf("ClaimsLive(paygress) = %d, %v, want %d, true", epoch, ok, EpochUnknown)
		}
	}
	// Old payloads without version default to 1.
	noVersion := strings.Replace(content, `,"version":1`, "", 1)
	ev := paygressEvent(t, k, KindHeartbeatEphemeral, ts, nostr.Tags{{"t", "paygress-heartbeat"}, {"p", k.PublicKey()}, {"v", "1"}}, noVersion)
	h, err := DecodeHeartbeat(ev)
	if err != nil || h.Version != 1 {
		t.Fatalf("DecodeHeartbeat(no version) = %+v, %v, want version 1", h, err)
	}
}

func TestDecodePaygressRevocation(t *testing.T) {
	primary, s1, s2 := testKeys(t, "p"), testKeys(t, "s1"), testKeys(t, "s2")
	ts := t0.Unix()
	// standby_providers is the consumer's list, passed through as given.
	content := `{"workload_id":"wl-7","primary_provider_npub":"` + primary.PublicKey() + `","standby_providers":["` +
		s1.Npub() + `","not-a-key","` + s2.PublicKey() + `"],"reason":"lost relay quorum","revoked_at":` + itoa(ts) + `,"version":1}`
	tags := nostr.Tags{
		{"t", "paygress"}, {"t", "paygress-revocation"},
		{"d", "paygress:revocation:v1:" + primary.PublicKey() + ":wl-7"}, {"v", "1"}, {"workload", "wl-7"},
		{"p", s1.PublicKey()}, {"p", s2.PublicKey()},
	}
	ev := paygressEvent(t, primary, KindRevocation, ts, tags, content)
	r, err := DecodeRevocation(ev)
	if err != nil {
		t.Fatalf("DecodeRevocation(paygress) = %v", err)
	}
	want := &Revocation{
		EventID: ev.ID, Signer: primary.PublicKey(), CreatedAt: t0, WorkloadID: "wl-7",
		Primary: primary.PublicKey(), PrimaryNpub: primary.PublicKey(),
		Standbys: []string{s1.PublicKey(), s2.PublicKey()}, Reason: "lost relay quorum", RevokedAt: t0,
		Version: 1, Successor: s1.PublicKey(), Epoch: EpochUnknown,
	}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("DecodeRevocation(paygress) = %+v, want %+v", r, want)
	}

	// With state_uri, which Paygress writes only when set, before version.
	content2 := strings.Replace(content, `,"version":1`, `,"state_uri":"blossom://abc","version":1`, 1)
	ev2 := paygressEvent(t, primary, KindRevocation, ts, tags, content2)
	r2, err := DecodeRevocation(ev2)
	if err != nil || r2.StateURI != "blossom://abc" {
		t.Fatalf("DecodeRevocation(state_uri) = %+v, %v, want state_uri blossom://abc", r2, err)
	}
}

func TestDecodePaygressPromotion(t *testing.T) {
	k := testKeys(t, "s1")
	ts := t0.Unix()
	content := `{"workload_id":"wl-7","new_primary_npub":"` + k.PublicKey() + `","promoted_at":` + itoa(ts) + `,"version":1}`
	tags := nostr.Tags{{"t", "paygress"}, {"t", "paygress-promoted"}, {"d", "paygress:promoted:v1:wl-7"}, {"v", "1"}, {"workload", "wl-7"}}
	ev := paygressEvent(t, k, KindPromotion, ts, tags, content)
	p, err := DecodePromotion(ev)
	if err != nil {
		t.Fatalf("DecodePromotion(paygress) = %v", err)
	}
	want := &Promotion{
		Announcement: true,
		EventID:      ev.ID, Signer: k.PublicKey(), CreatedAt: t0, WorkloadID: "wl-7", NewPrimary: k.PublicKey(),
		NewPrimaryNpub: k.PublicKey(), PromotedAt: t0, Version: 1, Epoch: EpochUnknown, Status: ClaimActive,
	}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("DecodePromotion(paygress) = %+v, want %+v", p, want)
	}
}

// TestBuiltEventsReadByPaygress checks that our events carry every v1 field
// Paygress requires, in its order, with lowercase hex keys (as Paygress
// writes them), and the exact v1 tags.
func TestBuiltEventsReadByPaygress(t *testing.T) {
	p, s1, s2 := testKeys(t, "p"), testKeys(t, "s1"), testKeys(t, "s2")
	hb, eph, err := BuildHeartbeats(p, HeartbeatParams{At: t0, Capacity: Capacity{CPUAvailable: 1, MemoryMBAvailable: 2, StorageGBAvailable: 3}, Workloads: []WorkloadEpoch{{ID: "wl-7", Epoch: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := BuildRevocation(p, RevocationParams{WorkloadID: "wl-7", Standbys: []string{s1.Npub(), s2.PublicKey()}, Successor: s1.PublicKey(), Reason: "fenced", At: t0, Epoch: 3})
	if err != nil {
		t.Fatal(err)
	}
	prom, err := BuildAnnouncement(s1, AnnouncementParams{WorkloadID: "wl-7", At: t0, Epoch: 4})
	if err != nil {
		t.Fatal(err)
	}
	ts := itoa(t0.Unix())
	tests := []struct {
		name        string
		ev          *nostr.Event
		kind        int
		fieldPrefix string // v1 fields in Paygress order, then ours
		tags        nostr.Tags
	}{
		{"stored heartbeat", hb, KindHeartbeat,
			`{"provider_npub":"` + p.PublicKey() + `","timestamp":` + ts + `,"active_workloads":1,"available_capacity":{"cpu_available":1,"memory_mb_available":2,"storage_gb_available":3},"version":1,"workloads":[{"id":"wl-7","epoch":3}]}`,
			nostr.Tags{{"t", "paygress-heartbeat"}, {"p", p.PublicKey()}, {"d", "paygress:heartbeat:v1:" + p.PublicKey() + ":" + itoa(t0.Unix()/60)}, {"v", "1"}, {"expiration", itoa(t0.Unix() + 300)}}},
		{"ephemeral heartbeat", eph, KindHeartbeatEphemeral, "",
			nostr.Tags{{"t", "paygress-heartbeat"}, {"p", p.PublicKey()}, {"v", "1"}, {"expiration", itoa(t0.Unix() + 300)}}},
		{"revocation", rev, KindRevocation,
			`{"workload_id":"wl-7","primary_provider_npub":"` + p.PublicKey() + `","standby_providers":["` + s1.PublicKey() + `","` + s2.PublicKey() + `"],"reason":"fenced","revoked_at":` + ts + `,"version":1,"successor":"` + s1.PublicKey() + `","epoch":3}`,
			nostr.Tags{{"t", "paygress"}, {"t", "paygress-revocation"}, {"d", "paygress:revocation:v1:" + p.PublicKey() + ":wl-7"}, {"v", "1"}, {"workload", "wl-7"}, {"p", s1.PublicKey()}, {"p", s2.PublicKey()}}},
		{"announcement", prom, KindPromotion,
			`{"workload_id":"wl-7","new_primary_npub":"` + s1.PublicKey() + `","promoted_at":` + ts + `,"version":1,"epoch":4}`,
			nostr.Tags{{"t", "paygress"}, {"t", "paygress-promoted"}, {"d", "paygress:promoted:v1:wl-7"}, {"v", "1"}, {"workload", "wl-7"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.ev.Kind != tt.kind {
				t.Fatalf("kind = %d, want %d", tt.ev.Kind, tt.kind)
			}
			if tt.fieldPrefix != "" && tt.ev.Content != tt.fieldPrefix {
				t.Fatalf("content = %s, want %s", tt.ev.Content, tt.fieldPrefix)
			}
			if !reflect.DeepEqual(tt.ev.Tags, tt.tags) {
				t.Fatalf("tags = %v, want %v", tt.ev.Tags, tt.tags)
			}
			if ok, err := tt.ev.CheckSignature(); !ok || err != nil || !tt.ev.CheckID() {
				t.Fatalf("signature check = %v, %v, id ok %v, want valid", ok, err, tt.ev.CheckID())
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(tt.ev.Content), &m); err != nil {
				t.Fatal(err)
			}
			for key, v := range m {
				if s, ok := v.(string); ok && strings.HasSuffix(key, "_npub") && !lease.IsHexPubkey(s) {
					t.Fatalf("%s = %q, want a lowercase hex key", key, s)
				}
			}
		})
	}
}

// TestDecodeAcceptsBothKeyForms: we write keys as hex, but events whose key
// fields or d tags use the NIP-19 npub form (older agents, or any
// writer that used npub) still decode, in every combination, to the hex key;
// a d tag naming another key, in either form, does not.
func TestDecodeAcceptsBothKeyForms(t *testing.T) {
	p, s1, other := testKeys(t, "p"), testKeys(t, "s1"), testKeys(t, "other")
	ts := t0.Unix()
	forms := map[string]func(k *identity.Keys) string{"hex": (*identity.Keys).PublicKey, "npub": (*identity.Keys).Npub}
	for _, cf := range []string{"hex", "npub"} {
		for _, df := range []string{"hex", "npub"} {
			name := "content " + cf + ", d " + df
			ck, dk := forms[cf], forms[df]

			hb := paygressEvent(t, p, KindHeartbeat, ts, nostr.Tags{{"t", "paygress-heartbeat"}, {"p", p.PublicKey()},
				{"d", HeartbeatDTag(dk(p), uint64(ts))}, {"v", "1"}},
				`{"provider_npub":"`+ck(p)+`","timestamp":`+itoa(ts)+`,"active_workloads":0,"available_capacity":{"cpu_available":1,"memory_mb_available":2,"storage_gb_available":3},"version":1,"workloads":[]}`)
			h, err := DecodeHeartbeat(hb)
			if err != nil || h.Provider != p.PublicKey() || h.ProviderNpub != ck(p) {
				t.Errorf("%s: DecodeHeartbeat = %+v, %v, want provider %s written as %s", name, h, err, p.PublicKey(), ck(p))
			}

			rev := paygressEvent(t, p, KindRevocation, ts, nostr.Tags{{"t", "paygress"}, {"t", "paygress-revocation"},
				{"d", RevocationDTag(dk(p), "wl-7")}, {"v", "1"}, {"workload", "wl-7"}, {"p", s1.PublicKey()}},
				`{"workload_id":"wl-7","primary_provider_npub":"`+ck(p)+`","standby_providers":["`+ck(s1)+`"],"reason":"r","revoked_at":`+itoa(ts)+`,"version":1,"successor":"`+ck(s1)+`","epoch":2}`)
			r, err := DecodeRevocation(rev)
			if err != nil || r.Primary != p.PublicKey() || r.PrimaryNpub != ck(p) || r.Successor != s1.PublicKey() ||
				len(r.Standbys) != 1 || r.Standbys[0] != s1.PublicKey() {
				t.Errorf("%s: DecodeRevocation = %+v, %v, want primary %s, standby and successor %s", name, r, err, p.PublicKey(), s1.PublicKey())
			}
		}
		prom := paygressEvent(t, s1, KindPromotion, ts, nostr.Tags{{"t", "paygress"}, {"t", "paygress-promoted"},
			{"d", PromotionDTag("wl-7")}, {"v", "1"}, {"workload", "wl-7"}},
			`{"workload_id":"wl-7","new_primary_npub":"`+forms[cf](s1)+`","promoted_at":`+itoa(ts)+`,"version":1,"epoch":3}`)
		pr, err := DecodePromotion(prom)
		if err != nil || pr.NewPrimary != s1.PublicKey() || pr.NewPrimaryNpub != forms[cf](s1) {
			t.Errorf("content %s: DecodePromotion = %+v, %v, want new primary %s", cf, pr, err, s1.PublicKey())
		}
	}

	for df, dk := range forms {
		hb := paygressEvent(t, p, KindHeartbeat, ts, nostr.Tags{{"t", "paygress-heartbeat"}, {"p", p.PublicKey()},
			{"d", HeartbeatDTag(dk(other), uint64(ts))}, {"v", "1"}},
			`{"provider_npub":"`+p.PublicKey()+`","timestamp":`+itoa(ts)+`,"active_workloads":0,"available_capacity":{"cpu_available":1,"memory_mb_available":2,"storage_gb_available":3}}`)
		if _, err := DecodeHeartbeat(hb); ReasonOf(err) != ReasonBadTags {
			t.Errorf("DecodeHeartbeat(d names another key as %s) = %v, want bad_tags", df, err)
		}
		rev := paygressEvent(t, p, KindRevocation, ts, nostr.Tags{{"t", "paygress"}, {"t", "paygress-revocation"},
			{"d", RevocationDTag(dk(other), "wl-7")}, {"v", "1"}, {"workload", "wl-7"}},
			`{"workload_id":"wl-7","primary_provider_npub":"`+p.PublicKey()+`","standby_providers":[],"reason":"r","revoked_at":`+itoa(ts)+`}`)
		if _, err := DecodeRevocation(rev); ReasonOf(err) != ReasonBadTags {
			t.Errorf("DecodeRevocation(d names another key as %s) = %v, want bad_tags", df, err)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	p, s1, s2, issuer := testKeys(t, "p"), testKeys(t, "s1"), testKeys(t, "s2"), testKeys(t, "issuer")
	hb, err := BuildHeartbeat(p, HeartbeatParams{At: t0, Workloads: []WorkloadEpoch{{ID: "a", Epoch: 1}, {ID: "b", Epoch: 9}}, TTL: 90 * time.Second}, false)
	if err != nil {
		t.Fatal(err)
	}
	h, err := DecodeHeartbeat(hb)
	if err != nil {
		t.Fatalf("DecodeHeartbeat(built) = %v", err)
	}
	if !h.ListsWorkloads || !reflect.DeepEqual(h.Workloads, []WorkloadEpoch{{ID: "a", Epoch: 1}, {ID: "b", Epoch: 9}}) || !h.Expiration.Equal(t0.Add(90*time.Second)) {
		t.Fatalf("DecodeHeartbeat(built) = %+v", h)
	}
	if e, ok := h.ClaimsLive("b"); !ok || e != 9 {
		t.Fatalf("ClaimsLive(b) = %d, %v, want 9, true", e, ok)
	}
	if _, ok := h.ClaimsLive("c"); ok {
		t.Fatalf("ClaimsLive(c) = true, want false")
	}
	empty, _ := BuildHeartbeat(p, HeartbeatParams{At: t0}, true)
	he, err := DecodeHeartbeat(empty)
	if err != nil || !he.ListsWorkloads || len(he.Workloads) != 0 || !strings.Contains(empty.Content, `"workloads":[]`) {
		t.Fatalf("DecodeHeartbeat(no workloads) = %+v, %v, want an empty listed set", he, err)
	}
	if _, ok := he.ClaimsLive("a"); ok {
		t.Fatalf("ClaimsLive on an empty list = true, want false")
	}

	rev, err := BuildRevocation(p, RevocationParams{WorkloadID: "a", Standbys: []string{s1.PublicKey(), s2.PublicKey()}, Successor: s2.Npub(), Reason: "r", At: t0, Epoch: 1, StateURI: "blossom://x"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := DecodeRevocation(rev)
	if err != nil || r.Successor != s2.PublicKey() || !r.HasSuccessor || r.Epoch != 1 || !r.HasEpoch || r.StateURI != "blossom://x" {
		t.Fatalf("DecodeRevocation(built) = %+v, %v", r, err)
	}

	none, err := BuildRevocation(p, RevocationParams{WorkloadID: "a", Standbys: []string{s1.PublicKey()}, Reason: "r", At: t0, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(none.Content, `"successor":""`) {
		t.Fatalf("revocation without successor content = %s, want an explicit empty successor", none.Content)
	}
	rn, err := DecodeRevocation(none)
	if err != nil || rn.Successor != "" || !rn.HasSuccessor {
		t.Fatalf("DecodeRevocation(no successor) = %+v, %v, want explicitly none", rn, err)
	}

	wd, err := BuildPromotion(s1, PromotionParams{WorkloadID: "a", At: t0, Epoch: 2, Status: ClaimWithdrawn})
	if err != nil {
		t.Fatal(err)
	}
	pr, err := DecodePromotion(wd)
	if err != nil || pr.Status != ClaimWithdrawn || pr.Epoch != 2 || !pr.HasEpoch {
		t.Fatalf("DecodePromotion(withdrawn) = %+v, %v", pr, err)
	}

	lg, err := BuildLeaseGrant(issuer, LeaseGrantParams{
		WorkloadID: "a", Primary: p.Npub(), Standbys: []string{s1.PublicKey()},
		Relays: []string{"wss://Relay.One/", "ws://127.0.0.1:7777"}, Quorum: 2,
		Replication: lease.ReplicationWarmStandby, RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure, MaxAttempts: 3},
		Command: []string{"/bin/app", "--serve"}, ExpiresAt: t0.Add(time.Hour), At: t0,
	})
	if err != nil {
		t.Fatal(err)
	}
	g, err := DecodeLeaseGrant(lg)
	if err != nil {
		t.Fatalf("DecodeLeaseGrant(built) = %v", err)
	}
	want := &LeaseGrant{
		EventID: lg.ID, Issuer: issuer.PublicKey(),
		Spec: lease.Spec{
			ID: "a", Primary: p.PublicKey(), Standbys: []string{s1.PublicKey()},
			Replication: lease.ReplicationWarmStandby, RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure, MaxAttempts: 3},
			Epoch: 1, Command: []string{"/bin/app", "--serve"}, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour),
			Relays: []string{"wss://relay.one", "ws://127.0.0.1:7777"}, Quorum: 2,
		},
	}
	if !reflect.DeepEqual(g, want) {
		t.Fatalf("DecodeLeaseGrant(built) = %+v, want %+v", g, want)
	}
}

func TestBuildRejectsBadParams(t *testing.T) {
	p, s1 := testKeys(t, "p"), testKeys(t, "s1")
	tests := []struct {
		name string
		err  error
	}{
		{"heartbeat bad workload id", func() error {
			_, err := BuildHeartbeat(p, HeartbeatParams{At: t0, Workloads: []WorkloadEpoch{{ID: "", Epoch: 1}}}, false)
			return err
		}()},
		{"heartbeat epoch 0", func() error {
			_, err := BuildHeartbeat(p, HeartbeatParams{At: t0, Workloads: []WorkloadEpoch{{ID: "a", Epoch: 0}}}, false)
			return err
		}()},
		{"heartbeat duplicate workload", func() error {
			_, err := BuildHeartbeat(p, HeartbeatParams{At: t0, Workloads: []WorkloadEpoch{{ID: "a", Epoch: 1}, {ID: "a", Epoch: 2}}}, false)
			return err
		}()},
		{"heartbeat expiration beyond year 9999", func() error {
			_, err := BuildHeartbeat(p, HeartbeatParams{At: time.Unix(maxUnix-10, 0)}, false)
			return err
		}()},
		{"revocation successor not standby", func() error {
			_, err := BuildRevocation(p, RevocationParams{WorkloadID: "a", Standbys: []string{s1.PublicKey()}, Successor: p.PublicKey(), At: t0, Epoch: 1})
			return err
		}()},
		{"revocation bad standby", func() error {
			_, err := BuildRevocation(p, RevocationParams{WorkloadID: "a", Standbys: []string{"nope"}, At: t0, Epoch: 1})
			return err
		}()},
		{"promotion bad status", func() error {
			_, err := BuildPromotion(p, PromotionParams{WorkloadID: "a", At: t0, Epoch: 1, Status: "maybe"})
			return err
		}()},
		{"lease quorum above relays", func() error {
			_, err := BuildLeaseGrant(p, LeaseGrantParams{WorkloadID: "a", Primary: p.PublicKey(), Relays: []string{"wss://r"}, Quorum: 2, Replication: lease.ReplicationNone, RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever}, Manifest: "m", At: t0})
			return err
		}()},
		{"lease warm standby without standby", func() error {
			_, err := BuildLeaseGrant(p, LeaseGrantParams{WorkloadID: "a", Primary: p.PublicKey(), Relays: []string{"wss://r"}, Quorum: 1, Replication: lease.ReplicationWarmStandby, RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever}, Manifest: "m", At: t0})
			return err
		}()},
		{"lease command and manifest", func() error {
			_, err := BuildLeaseGrant(p, LeaseGrantParams{WorkloadID: "a", Primary: p.PublicKey(), Relays: []string{"wss://r"}, Quorum: 1, Replication: lease.ReplicationNone, RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever}, Manifest: "m", Command: []string{"x"}, At: t0})
			return err
		}()},
		{"lease http relay", func() error {
			_, err := BuildLeaseGrant(p, LeaseGrantParams{WorkloadID: "a", Primary: p.PublicKey(), Relays: []string{"https://r"}, Quorum: 1, Replication: lease.ReplicationNone, RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever}, Manifest: "m", At: t0})
			return err
		}()},
	}
	for _, tt := range tests {
		if tt.err == nil {
			t.Errorf("%s: err = nil, want an error", tt.name)
		}
	}
}

func itoa(v int64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestClaimAndAnnouncementForms: claims and withdrawn markers live under
// ClaimDTag and carry an epoch; announcements under PromotionDTag; each
// decodes as what it is, and a claim that lacks an epoch or names another
// workload in its d tag is refused.
func TestClaimAndAnnouncementForms(t *testing.T) {
	k := testKeys(t, "s1")
	claim, err := BuildPromotion(k, PromotionParams{WorkloadID: "wl-7", At: t0, Epoch: 4, Status: ClaimWithdrawn})
	if err != nil {
		t.Fatal(err)
	}
	ann, err := BuildAnnouncement(k, AnnouncementParams{WorkloadID: "wl-7", At: t0, Epoch: 4})
	if err != nil {
		t.Fatal(err)
	}
	c, err := DecodePromotion(claim)
	if err != nil || c.Announcement || c.Epoch != 4 || c.Status != ClaimWithdrawn {
		t.Fatalf("DecodePromotion(claim) = %+v, %v, want a withdrawn claim of epoch 4", c, err)
	}
	a, err := DecodePromotion(ann)
	if err != nil || !a.Announcement || a.Epoch != 4 || a.Status != ClaimActive {
		t.Fatalf("DecodePromotion(announcement) = %+v, %v, want an active announcement of epoch 4", a, err)
	}
	ts := t0.Unix()
	noEpoch := paygressEvent(t, k, KindPromotion, ts,
		nostr.Tags{{"t", "provider-agent-claim"}, {"d", "provider-agent:claim:v1:wl-7"}, {"v", "1"}, {"workload", "wl-7"}},
		`{"workload_id":"wl-7","new_primary_npub":"`+k.PublicKey()+`","promoted_at":`+itoa(ts)+`,"version":1}`)
	if _, err := DecodePromotion(noEpoch); ReasonOf(err) != ReasonDecode {
		t.Fatalf("DecodePromotion(claim without epoch) = %v, want a decode rejection", err)
	}
	wrongD := paygressEvent(t, k, KindPromotion, ts,
		nostr.Tags{{"t", "provider-agent-claim"}, {"d", "provider-agent:claim:v1:other"}, {"v", "1"}, {"workload", "wl-7"}},
		`{"workload_id":"wl-7","new_primary_npub":"`+k.PublicKey()+`","promoted_at":`+itoa(ts)+`,"version":1,"epoch":4}`)
	if _, err := DecodePromotion(wrongD); ReasonOf(err) != ReasonBadTags {
		t.Fatalf("DecodePromotion(claim with another workload's d tag) = %v, want bad_tags", err)
	}
}
