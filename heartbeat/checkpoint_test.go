package heartbeat

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
	"provideragent/lease"
)

// ckptHash is a fake sha256 (hex) made of one repeated character.
func ckptHash(c string) string { return strings.Repeat(c, 64) }

// ckptRecord is a valid record of workload "wl-1" at epoch 3 held by k.
func ckptRecord(k *identity.Keys) CheckpointRecord {
	return CheckpointRecord{
		WorkloadID: "wl-1", Holder: k.PublicKey(), Epoch: 3, Seq: 41,
		Manifest: ckptHash("a"), ManifestSize: 412, Size: 5 << 20, SHA256: ckptHash("b"),
		TakenAt:  t0.Add(-1500 * time.Millisecond),
		Servers:  []string{"https://blossom.example", "http://127.0.0.1:7448/"},
		StateURI: "blossom:" + ckptHash("a") + ".json?xs=https://blossom.example&sz=412",
		GrantAt:  t0.Add(-time.Hour), Parent: ckptHash("c"), Version: SchemaVersion,
	}
}

func ckptBuild(t testing.TB, k *identity.Keys, r CheckpointRecord) *nostr.Event {
	t.Helper()
	ev, err := BuildCheckpointRecord(k, r, t0)
	if err != nil {
		t.Fatalf("BuildCheckpointRecord(%+v) = %v", r, err)
	}
	return ev
}

func TestCheckpointRecordRoundTrip(t *testing.T) {
	k := testKeys(t, "holder")
	fresh := CheckpointRecord{WorkloadID: "wl-1", Epoch: 4, GrantAt: t0.Add(-time.Hour), Fresh: true}
	final := ckptRecord(k)
	final.Final, final.Parent, final.StateURI = true, "", ""
	for name, r := range map[string]CheckpointRecord{"full": ckptRecord(k), "fresh": fresh, "final": final} {
		t.Run(name, func(t *testing.T) {
			ev := ckptBuild(t, k, r)
			if ok, err := ev.CheckSignature(); !ok || err != nil {
				t.Fatalf("signature = %v, %v", ok, err)
			}
			got, err := DecodeCheckpointRecord(ev)
			if err != nil {
				t.Fatalf("DecodeCheckpointRecord = %v", err)
			}
			want := r
			want.EventID, want.Signer, want.CreatedAt = ev.ID, k.PublicKey(), t0
			want.Holder, want.Version = k.PublicKey(), SchemaVersion
			if want.Servers == nil {
				want.Servers = []string{}
			}
			if !reflect.DeepEqual(*got, want) {
				t.Fatalf("DecodeCheckpointRecord =\n%+v\nwant\n%+v", *got, want)
			}
			wantTags := nostr.Tags{{"d", CheckpointDTag("wl-1", r.Epoch)}, {"workload", "wl-1"}, {"t", "provider-agent-checkpoint"}, {"v", "1"}}
			if !r.Fresh {
				wantTags = append(wantTags, nostr.Tag{"x", r.Manifest})
			}
			if !reflect.DeepEqual(ev.Tags, wantTags) {
				t.Errorf("tags = %v, want %v (no p tags, no expiration)", ev.Tags, wantTags)
			}
			if len(ev.Content) > 1024 {
				t.Errorf("content is %d bytes, want a typical record under 1 KiB", len(ev.Content))
			}
		})
	}
	if d := CheckpointDTag("job-7", 12); d != "provider-agent:checkpoint:v1:job-7:12" {
		t.Errorf("CheckpointDTag = %q", d)
	}
}

func TestBuildCheckpointRecordRefuses(t *testing.T) {
	k, other := testKeys(t, "holder"), testKeys(t, "other")
	for _, tc := range []struct {
		name string
		edit func(r *CheckpointRecord)
		keys *identity.Keys
		want string
	}{
		{"nil keys", func(*CheckpointRecord) {}, nil, "nil keys"},
		{"another holder", func(r *CheckpointRecord) { r.Holder = other.PublicKey() }, k, "is not the signer"},
		{"no grant", func(r *CheckpointRecord) { r.GrantAt = time.Time{} }, k, "grant_at is zero"},
		{"no servers", func(r *CheckpointRecord) { r.Servers = nil }, k, "0 servers, want 1 to 16"},
		{"epoch 0", func(r *CheckpointRecord) { r.Epoch = 0 }, k, "epoch 0"},
		{"taken after created", func(r *CheckpointRecord) { r.TakenAt = t0.Add(time.Second) }, k, "taken_at_ms"},
		{"no taken_at", func(r *CheckpointRecord) { r.TakenAt = time.Time{} }, k, "taken_at_ms 0"},
	} {
		r := ckptRecord(k)
		tc.edit(&r)
		if _, err := BuildCheckpointRecord(tc.keys, r, t0); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("BuildCheckpointRecord(%s) = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestDecodeCheckpointRecordRejects: every rule of the decoder, one
// mutation of a valid record each; the error names the field and value.
func TestDecodeCheckpointRecordRejects(t *testing.T) {
	k := testKeys(t, "holder")
	valid := ckptBuild(t, k, ckptRecord(k))
	fresh := ckptBuild(t, k, CheckpointRecord{WorkloadID: "wl-1", Epoch: 4, GrantAt: t0, Fresh: true})
	long := "https://" + strings.Repeat("b", 250) + ".example"
	many := make([]string, 17)
	for i := range many {
		many[i] = "https://b" + string(rune('a'+i)) + ".example"
	}
	for _, tc := range []struct {
		name   string
		base   *nostr.Event
		change func(ev *nostr.Event)
		reason RejectReason
		want   string // in the error
	}{
		{"not json", valid, content(`{"epoch":`), ReasonDecode, "checkpoint content"},
		{"too large", valid, setField("pad", strings.Repeat("x", 8<<10)), ReasonTooLarge, "max 8192"},
		{"missing workload_id", valid, setField("workload_id", nil), ReasonDecode, "missing workload_id"},
		{"missing holder", valid, setField("holder", nil), ReasonDecode, "missing holder"},
		{"missing epoch", valid, setField("epoch", nil), ReasonDecode, "missing epoch"},
		{"missing seq", valid, setField("seq", nil), ReasonDecode, "missing seq"},
		{"missing grant_at", valid, setField("grant_at", nil), ReasonDecode, "missing grant_at"},
		{"missing servers", valid, setField("servers", nil), ReasonDecode, "missing servers"},
		{"missing version", valid, setField("version", nil), ReasonDecode, "missing version"},
		{"version 2", valid, setField("version", 2), ReasonDecode, "version 2"},
		{"bad workload id", valid, setField("workload_id", "a b"), ReasonDecode, "workload_id"},
		{"epoch string", valid, setField("epoch", "3"), ReasonDecode, "epoch"},
		{"epoch 0", valid, setField("epoch", 0), ReasonDecode, "epoch 0, want 1 to"},
		{"epoch MaxEpoch", valid, setField("epoch", uint64(lease.MaxEpoch)), ReasonDecode, "epoch 4611686018427387904"},
		{"seq negative", valid, setField("seq", -1), ReasonDecode, "number -1"},
		{"seq too large", valid, setField("seq", uint64(MaxCheckpointSeq)), ReasonDecode, "seq 4611686018427387904"},
		{"holder npub", valid, setField("holder", k.Npub()), ReasonDecode, "holder \"npub1"},
		{"holder upper hex", valid, setField("holder", strings.ToUpper(k.PublicKey())), ReasonDecode, "want 64 lowercase hex"},
		{"holder not signer", valid, setField("holder", testKeys(t, "x").PublicKey()), ReasonWrongSigner, "is not the signer"},
		{"manifest short", valid, setField("manifest", "abc"), ReasonDecode, `manifest "abc"`},
		{"manifest missing", valid, setField("manifest", nil), ReasonDecode, `manifest ""`},
		{"sha256 bad", valid, setField("sha256", ckptHash("g")), ReasonDecode, "sha256 \"gggg"},
		{"manifest_size 0", valid, setField("manifest_size", 0), ReasonDecode, "manifest_size 0"},
		{"size negative", valid, setField("size", -5), ReasonDecode, "size -5"},
		{"size float", valid, setField("size", 1.5), ReasonDecode, "size"},
		{"taken_at_ms 0", valid, setField("taken_at_ms", 0), ReasonDecode, "taken_at_ms 0"},
		{"taken_at_ms future", valid, setField("taken_at_ms", t0.UnixMilli()+1000), ReasonDecode, "taken_at_ms 1763800001000"},
		{"grant_at negative", valid, setField("grant_at", -1), ReasonDecode, "grant_at -1"},
		{"grant_at year 10000", valid, setField("grant_at", int64(maxUnix)+1), ReasonDecode, "grant_at 253402300800"},
		{"parent bad", valid, setField("parent", "xyz"), ReasonDecode, `parent "xyz"`},
		{"no servers", valid, setField("servers", []string{}), ReasonDecode, "0 servers, want 1 to 16"},
		{"17 servers", valid, setField("servers", many), ReasonDecode, "17 servers"},
		{"server ftp", valid, setField("servers", []string{"ftp://b.example"}), ReasonDecode, `servers[0] "ftp://b.example"`},
		{"server no host", valid, setField("servers", []string{"https://"}), ReasonDecode, `servers[0] "https://"`},
		{"server query", valid, setField("servers", []string{"https://b.example/?a=1"}), ReasonDecode, "servers[0]"},
		{"server user", valid, setField("servers", []string{"https://u:p@b.example"}), ReasonDecode, "servers[0]"},
		{"server long", valid, setField("servers", []string{long}), ReasonDecode, "is 266 bytes, max 256"},
		{"server twice", valid, setField("servers", []string{"https://b.example", "https://b.example"}), ReasonDecode, "servers[1] \"https://b.example\" listed twice"},
		{"server not string", valid, setField("servers", []int{1}), ReasonDecode, "servers"},
		{"state_uri other blob", valid, setField("state_uri", "blossom:"+ckptHash("d")+".json"), ReasonDecode, "does not name the manifest"},
		{"state_uri long", valid, setField("state_uri", "blossom:"+ckptHash("a")+".json?xs="+strings.Repeat("s", 1000)), ReasonDecode, "state_uri of 1081 bytes, max 1024"},
		{"final bool string", valid, setField("final", "true"), ReasonDecode, "final"},
		{"fresh with manifest", valid, setField("fresh", true), ReasonDecode, "fresh record with checkpoint fields"},
		{"fresh and final", fresh, setField("final", true), ReasonDecode, "final and fresh both set"},
		{"fresh with size", fresh, setField("size", 3), ReasonDecode, "fresh record with checkpoint fields"},
		{"no t tag", valid, setTag("t", ""), ReasonBadTags, "missing tag t=provider-agent-checkpoint"},
		{"v 2", valid, setTag("v", "2"), ReasonBadTags, "v=\"2\""},
		{"workload tag", valid, setTag("workload", "wl-2"), ReasonBadTags, `workload tag "wl-2"`},
		{"d tag other epoch", valid, setTag("d", CheckpointDTag("wl-1", 2)), ReasonBadTags, `"provider-agent:checkpoint:v1:wl-1:2" is not`},
		{"d tag missing", valid, setTag("d", ""), ReasonBadTags, "d tag"},
		{"x tag other", valid, setTag("x", ckptHash("e")), ReasonBadTags, "x tag"},
		{"x tag missing", valid, setTag("x", ""), ReasonBadTags, "x tag"},
		{"x tag on fresh", fresh, setTag("x", ckptHash("e")), ReasonBadTags, "x tag"},
		{"created_at negative", valid, func(ev *nostr.Event) { ev.CreatedAt = -1 }, ReasonDecode, "created_at -1"},
	} {
		ev := mutate(t, tc.base, k, tc.change)
		_, err := DecodeCheckpointRecord(ev)
		if ReasonOf(err) != tc.reason || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodeCheckpointRecord(%s) = %v, want %s containing %q", tc.name, err, tc.reason, tc.want)
		}
	}
	// Unknown fields are ignored; an empty fresh server list is fine.
	for _, ev := range []*nostr.Event{mutate(t, valid, k, setField("future_field", map[string]int{"a": 1})), fresh} {
		if _, err := DecodeCheckpointRecord(ev); err != nil {
			t.Errorf("DecodeCheckpointRecord(%s) = %v, want accepted", ev.Content, err)
		}
	}
	if _, err := DecodeCheckpointRecord(&nostr.Event{Kind: KindPromotion}); ReasonOf(err) != ReasonBadKind {
		t.Errorf("DecodeCheckpointRecord(kind 38386) = %v, want bad_kind", err)
	}
}

// TestIngestCheckpointSignerRule: a record is accepted only from a member
// of the workload's lease, and refused before its signature is checked
// otherwise (wrong_signer); a finished workload's records are refused as
// unknown_workload, and an oversized one as too_large before hashing.
func TestIngestCheckpointSignerRule(t *testing.T) {
	primary, standby, stranger := testKeys(t, "primary"), testKeys(t, "standby"), testKeys(t, "stranger")
	pol := newFakePolicy()
	pol.setWorkload("wl-1", primary.PublicKey(), standby.PublicKey())
	in, reg := newTestIngestor(t, DefaultConfig(), pol)
	ctx, now := context.Background(), t0.Add(time.Minute)

	for _, k := range []*identity.Keys{primary, standby} {
		ev := ckptBuild(t, k, ckptRecord(k))
		res, err := in.Ingest(ctx, now, ev)
		if err != nil || res.Checkpoint == nil || res.Checkpoint.Signer != k.PublicKey() {
			t.Fatalf("Ingest(member's record) = %+v, %v, want the decoded record", res, err)
		}
		dup := copyEvent(ev)
		if res, err := in.Ingest(ctx, now, &dup); err != nil || !res.Duplicate || res.Checkpoint == nil {
			t.Fatalf("Ingest(second delivery) = %+v, %v, want a decoded duplicate", res, err)
		}
	}
	if got := counter(t, reg, "heartbeat_events_accepted_total", map[string]string{"kind": "checkpoint"}); got != 2 {
		t.Errorf("accepted{checkpoint} = %v, want 2", got)
	}
	if got := counter(t, reg, "heartbeat_events_duplicate_total", map[string]string{"kind": "checkpoint"}); got != 2 {
		t.Errorf("duplicate{checkpoint} = %v, want 2", got)
	}

	checks := counter(t, reg, "heartbeat_signature_checks_total", nil)
	_, err := in.Ingest(ctx, now, ckptBuild(t, stranger, ckptRecord(stranger)))
	if ReasonOf(err) != ReasonWrongSigner || !strings.Contains(err.Error(), "non-member") {
		t.Fatalf("Ingest(stranger's record) = %v, want wrong_signer", err)
	}
	if got := counter(t, reg, "heartbeat_signature_checks_total", nil); got != checks {
		t.Errorf("signature checks %v -> %v: a stranger's record must be refused before its signature", checks, got)
	}
	if got := counter(t, reg, "heartbeat_events_rejected_total", map[string]string{"reason": "wrong_signer"}); got != 1 {
		t.Errorf("rejected{wrong_signer} = %v, want 1", got)
	}

	// A member's record for a workload it is not a member of.
	other := ckptRecord(standby)
	other.WorkloadID = "wl-2"
	if _, err := in.Ingest(ctx, now, ckptBuild(t, standby, other)); ReasonOf(err) != ReasonWrongSigner {
		t.Errorf("Ingest(record of another lease) = %v, want wrong_signer", err)
	}

	pol.mu.Lock()
	pol.done["wl-1"] = true
	pol.mu.Unlock()
	late := ckptRecord(primary)
	late.Seq = 42
	if _, err := in.Ingest(ctx, now, ckptBuild(t, primary, late)); ReasonOf(err) != ReasonUnknownWorkload {
		t.Errorf("Ingest(record of a finished workload) = %v, want unknown_workload", err)
	}

	big := ckptBuild(t, primary, ckptRecord(primary))
	big = mutate(t, big, primary, setField("pad", strings.Repeat("x", MaxCheckpointContentBytes)))
	if _, err := in.Ingest(ctx, now, big); ReasonOf(err) != ReasonTooLarge {
		t.Errorf("Ingest(9 KiB record) = %v, want too_large", err)
	}
	// The size limit is inclusive: a record of exactly the maximum passes
	// it (and is refused only by the next check, the finished workload).
	exact := mutate(t, ckptBuild(t, primary, late), primary, padContentTo(MaxCheckpointContentBytes))
	if _, err := in.Ingest(ctx, now, exact); ReasonOf(err) != ReasonUnknownWorkload {
		t.Errorf("Ingest(record of exactly %d bytes) = %v, want unknown_workload (past the size check)", MaxCheckpointContentBytes, err)
	}
}

// padContentTo pads a record's content to exactly n bytes.
func padContentTo(n int) func(ev *nostr.Event) {
	return func(ev *nostr.Event) {
		setField("pad", "")(ev)
		setField("pad", strings.Repeat("x", n-len(ev.Content)))(ev)
	}
}

// ckptSeeds are the fuzz seeds: the content and tags of valid records.
func ckptSeeds(t testing.TB) [][2]string {
	k := fuzzKeys(t)
	fresh := CheckpointRecord{WorkloadID: "wl-1", Epoch: 4, GrantAt: t0, Fresh: true}
	var out [][2]string
	for _, r := range []CheckpointRecord{ckptRecord(k), fresh} {
		ev, err := BuildCheckpointRecord(k, r, t0)
		if err != nil {
			t.Fatal(err)
		}
		tags, _ := json.Marshal(ev.Tags)
		out = append(out, [2]string{ev.Content, string(tags)})
	}
	return out
}

// FuzzDecodeCheckpointRecord: whatever the content and tags, the decoder
// returns a RejectError or a record that satisfies every rule and that
// BuildCheckpointRecord builds again to the same content.
func FuzzDecodeCheckpointRecord(f *testing.F) {
	for _, s := range ckptSeeds(f) {
		f.Add(s[0], s[1])
	}
	f.Add("{}", "[]")
	f.Add(`{"workload_id":"w","holder":"","epoch":1,"seq":0,"servers":[],"grant_at":0,"fresh":true,"version":1}`,
		`[["d","provider-agent:checkpoint:v1:w:1"],["workload","w"],["t","provider-agent-checkpoint"],["v","1"]]`)
	f.Fuzz(func(t *testing.T, content, tagsJSON string) {
		ev := fuzzEvent(t, KindCheckpoint, content, tagsJSON)
		r, err := DecodeCheckpointRecord(ev)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		if r.Signer != ev.PubKey || r.Holder != ev.PubKey || ValidateWorkloadID(r.WorkloadID) != nil ||
			r.Epoch < 1 || r.Epoch >= lease.MaxEpoch || r.Seq >= MaxCheckpointSeq || len(r.Servers) > lease.MaxCheckpointServers ||
			len(r.StateURI) > MaxStateURIBytes || (r.Fresh && (r.Manifest != "" || r.Final)) ||
			(!r.Fresh && (r.Size <= 0 || r.ManifestSize <= 0 || len(r.Servers) == 0 || !isHex64(r.Manifest))) {
			t.Fatalf("DecodeCheckpointRecord accepted %+v", r)
		}
		again, err := BuildCheckpointRecord(fuzzKeys(t), *r, r.CreatedAt)
		if err != nil {
			t.Fatalf("BuildCheckpointRecord(decoded %+v) = %v", r, err)
		}
		r2, err := DecodeCheckpointRecord(again)
		if err != nil {
			t.Fatalf("DecodeCheckpointRecord(rebuilt) = %v", err)
		}
		r2.EventID, r2.CreatedAt = r.EventID, r.CreatedAt
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("rebuilt record differs:\n%+v\n%+v", r, r2)
		}
	})
}

// TestCheckpointRecordBoundsAreInclusive: the last value each range
// allows is accepted, by the builder and the decoder alike, and a refusal
// names the range it checked.
func TestCheckpointRecordBoundsAreInclusive(t *testing.T) {
	k := testKeys(t, "holder")
	fresh := CheckpointRecord{WorkloadID: "wl-1", Epoch: 1, GrantAt: time.Unix(0, 0), Fresh: true}
	for _, created := range []time.Time{time.Unix(0, 0), time.Unix(maxUnix, 0)} {
		if _, err := BuildCheckpointRecord(k, fresh, created); err != nil {
			t.Errorf("BuildCheckpointRecord(created_at %d, grant_at 0, epoch 1) = %v, want built", created.Unix(), err)
		}
	}
	if _, err := BuildCheckpointRecord(k, fresh, time.Unix(maxUnix+1, 0)); err == nil || !strings.Contains(err.Error(), "created_at 253402300800 out of range") {
		t.Errorf("BuildCheckpointRecord(created_at in year 10000) = %v, want out of range", err)
	}
	valid := ckptBuild(t, k, ckptRecord(k))
	for _, tc := range []struct {
		name   string
		change func(ev *nostr.Event)
	}{
		{"content of the maximum size", padContentTo(MaxCheckpointContentBytes)},
		{"created_at 0 (taken_at 0 s)", func(ev *nostr.Event) { setField("taken_at_ms", 1)(ev); ev.CreatedAt = 0 }},
		{"created_at in year 9999", func(ev *nostr.Event) { ev.CreatedAt = maxUnix }},
		{"epoch 1", func(ev *nostr.Event) { setField("epoch", 1)(ev); setTag("d", CheckpointDTag("wl-1", 1))(ev) }},
		{"epoch MaxEpoch-1", func(ev *nostr.Event) {
			setField("epoch", uint64(lease.MaxEpoch-1))(ev)
			setTag("d", CheckpointDTag("wl-1", lease.MaxEpoch-1))(ev)
		}},
		{"seq MaxCheckpointSeq-1", setField("seq", uint64(MaxCheckpointSeq-1))},
		{"grant_at 0", setField("grant_at", 0)},
		{"grant_at in year 9999", setField("grant_at", int64(maxUnix))},
	} {
		ev := mutate(t, valid, k, tc.change)
		if _, err := DecodeCheckpointRecord(ev); err != nil {
			t.Errorf("DecodeCheckpointRecord(%s) = %v, want accepted", tc.name, err)
		}
	}
	if _, err := DecodeCheckpointRecord(mutate(t, valid, k, padContentTo(MaxCheckpointContentBytes+1))); ReasonOf(err) != ReasonTooLarge {
		t.Errorf("DecodeCheckpointRecord(content of the maximum size + 1) = %v, want too_large", err)
	}
	for _, tc := range []struct {
		name   string
		change func(ev *nostr.Event)
		want   string
	}{
		{"epoch 0", setField("epoch", 0), "epoch 0, want 1 to 4611686018427387903"},
		{"seq MaxCheckpointSeq", setField("seq", uint64(MaxCheckpointSeq)), "seq 4611686018427387904, want 0 to 4611686018427387903"},
		{"created_at in year 10000", func(ev *nostr.Event) { ev.CreatedAt = maxUnix + 1 }, "created_at 253402300800 out of range"},
	} {
		_, err := DecodeCheckpointRecord(mutate(t, valid, k, tc.change))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodeCheckpointRecord(%s) = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
