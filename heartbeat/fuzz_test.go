package heartbeat

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
	"provideragent/lease"
)

// fuzzKeys signs the fuzzers' seed events; decoders see its public key as the
// signer. Derived once: key derivation would dominate each fuzz iteration.
func fuzzKeys(t testing.TB) *identity.Keys {
	fuzzKeysOnce.Do(func() { fuzzKeysVal = testKeys(t, "fuzz") })
	return fuzzKeysVal
}

var (
	fuzzKeysOnce sync.Once
	fuzzKeysVal  *identity.Keys
)

// seedEvents builds one valid event of every kind plus Paygress-shaped ones
// (hex keys, as Paygress writes them, and npub keys, as older agents did).
func seedEvents(t testing.TB) []*nostr.Event {
	k, s1 := fuzzKeys(t), testKeys(t, "s1")
	var evs []*nostr.Event
	add := func(ev *nostr.Event, err error) {
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	add(BuildHeartbeat(k, HeartbeatParams{At: t0, Capacity: Capacity{CPUAvailable: 1000, MemoryMBAvailable: 2048, StorageGBAvailable: 10}, Workloads: []WorkloadEpoch{{ID: "wl-1", Epoch: 2}}}, false))
	add(BuildHeartbeat(k, HeartbeatParams{At: t0}, true))
	add(BuildRevocation(k, RevocationParams{WorkloadID: "wl-1", Standbys: []string{s1.PublicKey()}, Successor: s1.PublicKey(), Reason: "quorum lost", At: t0, StateURI: "blossom://x", Epoch: 2}))
	add(BuildPromotion(k, PromotionParams{WorkloadID: "wl-1", At: t0, Epoch: 3}))
	add(BuildPromotion(k, PromotionParams{WorkloadID: "wl-1", At: t0, Epoch: 3, Status: ClaimWithdrawn}))
	add(BuildLeaseGrant(k, LeaseGrantParams{WorkloadID: "wl-1", Primary: k.PublicKey(), Standbys: []string{s1.PublicKey()},
		Relays: []string{"wss://a.example", "wss://b.example"}, Quorum: 2, Replication: lease.ReplicationWarmStandby,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure, MaxAttempts: 2}, Command: []string{"run"}, At: t0}))
	beat, err := BuildBeat(k, HeartbeatParams{At: t0, MaxEventBytes: 1100, Workloads: []WorkloadEpoch{
		{ID: "wl-1", Epoch: 2}, {ID: "wl-2", Epoch: 1}, {ID: strings.Repeat("x", 200), Epoch: 7}, {ID: `q"\`, Epoch: 3}, {ID: "wl-5", Epoch: 9}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range beat.Events() {
		add(ev, nil)
	}
	ts := fmt.Sprint(t0.Unix())
	// Paygress-shaped events with keys as Paygress writes them (hex), then
	// the same with npub keys, as older agents wrote them.
	var paygress []struct {
		kind    int
		tags    nostr.Tags
		content string
	}
	for _, key := range []func(*identity.Keys) string{(*identity.Keys).PublicKey, (*identity.Keys).Npub} {
		paygress = append(paygress, []struct {
			kind    int
			tags    nostr.Tags
			content string
		}{
			{KindHeartbeat, nostr.Tags{{"t", "paygress-heartbeat"}, {"p", k.PublicKey()}, {"d", HeartbeatDTag(key(k), uint64(t0.Unix()))}, {"v", "1"}},
				`{"provider_npub":"` + key(k) + `","timestamp":` + ts + `,"active_workloads":0,"available_capacity":{"cpu_available":1,"memory_mb_available":2,"storage_gb_available":3},"version":1}`},
			{KindRevocation, nostr.Tags{{"t", "paygress"}, {"t", "paygress-revocation"}, {"d", RevocationDTag(key(k), "wl-1")}, {"v", "1"}, {"workload", "wl-1"}, {"p", s1.PublicKey()}},
				`{"workload_id":"wl-1","primary_provider_npub":"` + key(k) + `","standby_providers":["` + key(s1) + `"],"reason":"r","revoked_at":` + ts + `,"version":1}`},
			{KindPromotion, nostr.Tags{{"t", "paygress"}, {"t", "paygress-promoted"}, {"d", PromotionDTag("wl-1")}, {"v", "1"}, {"workload", "wl-1"}},
				`{"workload_id":"wl-1","new_primary_npub":"` + key(k) + `","promoted_at":` + ts + `,"version":1}`},
		}...)
	}
	for _, p := range paygress {
		ev := &nostr.Event{Kind: p.kind, CreatedAt: nostr.Timestamp(t0.Unix()), Tags: p.tags, Content: p.content}
		add(ev, k.Sign(ev))
	}
	return evs
}

// fuzzEvent makes an event signed-looking by the fuzz key (signature not
// valid; decoders do not check it) from fuzzed content and tags JSON.
func fuzzEvent(t testing.TB, kind int, content, tagsJSON string) *nostr.Event {
	var tags nostr.Tags
	if err := json.Unmarshal([]byte(tagsJSON), &tags); err != nil {
		tags = nil
	}
	return &nostr.Event{Kind: kind, PubKey: fuzzKeys(t).PublicKey(), CreatedAt: nostr.Timestamp(t0.Unix()), Tags: tags, Content: content}
}

func addDecodeSeeds(f *testing.F, kinds ...int) {
	for _, ev := range seedEvents(f) {
		for _, k := range kinds {
			if ev.Kind == k {
				tags, _ := json.Marshal(ev.Tags)
				f.Add(ev.Content, string(tags))
			}
		}
	}
	f.Add("{}", "[]")
	f.Add(`{"workloads":null}`, `[["t"]]`)
	f.Add("null", "null")
}

// checkDecodeErr asserts a decoder's failure is a well-formed rejection.
func checkDecodeErr(t *testing.T, err error) {
	t.Helper()
	if ReasonOf(err) == "" {
		t.Fatalf("decode error %v is not a RejectError", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("decode error %q spans lines", err)
	}
}

func FuzzDecodeHeartbeat(f *testing.F) {
	addDecodeSeeds(f, KindHeartbeat, KindHeartbeatEphemeral, KindHeartbeatShard)
	f.Fuzz(func(t *testing.T, content, tagsJSON string) {
		// Differential: the fast content decoder agrees with encoding/json on
		// valid JSON (encoding/json matches keys case-insensitively, so only
		// lower-case ASCII input is compared).
		if json.Valid([]byte(content)) && !strings.ContainsFunc(content, func(r rune) bool { return (r >= 'A' && r <= 'Z') || r > 0x7e }) {
			var want heartbeatIn
			wantErr := json.Unmarshal([]byte(content), &want)
			got, gotErr := decodeHeartbeatContent([]byte(content))
			if (wantErr == nil) != (gotErr == nil) {
				t.Fatalf("decodeHeartbeatContent(%q) error = %v, encoding/json error = %v", content, gotErr, wantErr)
			}
			if wantErr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("decodeHeartbeatContent(%q) = %s, encoding/json = %s", content, dump(got), dump(want))
			}
		}
		for _, kind := range []int{KindHeartbeat, KindHeartbeatEphemeral, KindHeartbeatShard} {
			ev := fuzzEvent(t, kind, content, tagsJSON)
			h, err := DecodeHeartbeat(ev)
			if err != nil {
				checkDecodeErr(t, err)
				continue
			}
			if h.Provider != ev.PubKey || h.Ephemeral != (kind == KindHeartbeatEphemeral) {
				t.Fatalf("DecodeHeartbeat = %+v for signer %s kind %d", h, ev.PubKey, kind)
			}
			if err := validateWorkloads(h.Workloads); err != nil {
				t.Fatalf("DecodeHeartbeat accepted invalid workloads: %v", err)
			}
			if h.Shards < 1 || h.Shards > lease.MaxShards || h.Shard < 0 || h.Shard >= h.Shards || (kind == KindHeartbeatShard) != (h.Shard > 0) {
				t.Fatalf("DecodeHeartbeat(kind %d) = shard %d of %d", kind, h.Shard, h.Shards)
			}
			if kind == KindHeartbeatShard {
				continue // no single-event round trip for a continuation
			}
			// Round trip: rebuilding from the decoded values decodes the same
			// (unless the expiration would pass year 9999, which the builder
			// refuses).
			if h.Timestamp.Unix() > maxUnix-int64(DefaultHeartbeatTTL/time.Second) {
				continue
			}
			re, err := BuildHeartbeat(fuzzKeys(t), HeartbeatParams{At: h.Timestamp, ActiveWorkloads: h.ActiveWorkloads, Capacity: h.Capacity, Workloads: h.Workloads}, h.Ephemeral)
			if err != nil {
				t.Fatalf("BuildHeartbeat(decoded %+v) = %v", h, err)
			}
			h2, err := DecodeHeartbeat(re)
			if err != nil || !reflect.DeepEqual(h2.Workloads, nonNilWorkloads(h.Workloads)) || h2.Capacity != h.Capacity || !h2.Timestamp.Equal(h.Timestamp) {
				t.Fatalf("round trip of %+v = %+v, %v", h, h2, err)
			}
		}
	})
}

func nonNilWorkloads(ws []WorkloadEpoch) []WorkloadEpoch {
	if ws == nil {
		return []WorkloadEpoch{}
	}
	return ws
}

func dump(v heartbeatIn) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func FuzzDecodeRevocation(f *testing.F) {
	addDecodeSeeds(f, KindRevocation)
	f.Fuzz(func(t *testing.T, content, tagsJSON string) {
		ev := fuzzEvent(t, KindRevocation, content, tagsJSON)
		r, err := DecodeRevocation(ev)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		if r.Signer != ev.PubKey || r.Primary != ev.PubKey {
			t.Fatalf("DecodeRevocation = %+v, signer %s", r, ev.PubKey)
		}
		if ValidateWorkloadID(r.WorkloadID) != nil || (r.HasEpoch && r.Epoch == 0) {
			t.Fatalf("DecodeRevocation accepted %+v", r)
		}
		if r.Successor != "" && !containsString(r.Standbys, r.Successor) {
			t.Fatalf("DecodeRevocation successor %s not among standbys %v", r.Successor, r.Standbys)
		}
		for _, s := range r.Standbys {
			if !lease.IsHexPubkey(s) || s == r.Primary {
				t.Fatalf("DecodeRevocation standby %q", s)
			}
		}
	})
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func FuzzDecodePromotion(f *testing.F) {
	addDecodeSeeds(f, KindPromotion)
	f.Fuzz(func(t *testing.T, content, tagsJSON string) {
		ev := fuzzEvent(t, KindPromotion, content, tagsJSON)
		p, err := DecodePromotion(ev)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		if p.Signer != ev.PubKey || p.NewPrimary != ev.PubKey || ValidateWorkloadID(p.WorkloadID) != nil ||
			(p.Status != ClaimActive && p.Status != ClaimWithdrawn) || (p.HasEpoch && p.Epoch == 0) {
			t.Fatalf("DecodePromotion accepted %+v", p)
		}
	})
}

func FuzzDecodeLease(f *testing.F) {
	addDecodeSeeds(f, KindLeaseGrant)
	f.Fuzz(func(t *testing.T, content, tagsJSON string) {
		ev := fuzzEvent(t, KindLeaseGrant, content, tagsJSON)
		g, err := DecodeLeaseGrant(ev)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		if err := g.Spec.Validate(); err != nil {
			t.Fatalf("DecodeLeaseGrant accepted an invalid spec: %v", err)
		}
		if g.Spec.Quorum < 1 || g.Spec.Quorum > len(g.Spec.Relays) || (len(g.Spec.Command) > 0) == (g.Manifest != "") {
			t.Fatalf("DecodeLeaseGrant accepted %+v", g)
		}
	})
}

// allowAll is a SignerPolicy that lets everything through (the fuzzer is
// about parsing and verification, not lease state).
type allowAll struct{}

func (allowAll) CurrentPrimary(string) (string, bool) { return "", false }
func (allowAll) IsMember(string, string) bool         { return true }
func (allowAll) AllowedIssuer(string) bool            { return true }

func FuzzIngestRaw(f *testing.F) {
	for _, ev := range seedEvents(f) {
		raw, _ := ev.MarshalJSON()
		f.Add(raw)
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"id":"","kind":38384,"tags":[[]],"content":"x"}`))
	in, err := NewIngestor(DefaultConfig(), allowAll{}, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		res, err := in.IngestRaw(context.Background(), t0, raw)
		if err != nil {
			if ReasonOf(err) == "" {
				t.Fatalf("IngestRaw error %v is not a RejectError", err)
			}
			return
		}
		ev := res.Event
		if !ev.CheckID() {
			t.Fatalf("IngestRaw accepted an event whose id does not match")
		}
		if ok, err := ev.CheckSignature(); !ok || err != nil {
			t.Fatalf("IngestRaw accepted an event whose signature does not verify")
		}
		n := 0
		for _, p := range []bool{res.Heartbeat != nil, res.Revocation != nil, res.Promotion != nil, res.LeaseGrant != nil, res.Checkpoint != nil} {
			if p {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("IngestRaw result has %d decoded values, want 1", n)
		}
	})
}

// TestWriteFuzzCorpus regenerates testdata/fuzz seed files from seedEvents
// when HEARTBEAT_WRITE_CORPUS=1 (the files are committed, so plain `go test`
// replays them).
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("HEARTBEAT_WRITE_CORPUS") != "1" {
		t.Skip("set HEARTBEAT_WRITE_CORPUS=1 to regenerate testdata/fuzz seeds")
	}
	write := func(fuzzer, name string, values ...any) {
		dir := filepath.Join("testdata", "fuzz", fuzzer)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		b.WriteString("go test fuzz v1\n")
		for _, v := range values {
			switch v := v.(type) {
			case string:
				fmt.Fprintf(&b, "string(%q)\n", v)
			case []byte:
				fmt.Fprintf(&b, "[]byte(%q)\n", v)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	byKind := map[int]string{
		KindHeartbeat: "FuzzDecodeHeartbeat", KindHeartbeatEphemeral: "FuzzDecodeHeartbeat",
		KindRevocation: "FuzzDecodeRevocation", KindPromotion: "FuzzDecodePromotion", KindLeaseGrant: "FuzzDecodeLease",
	}
	for i, ev := range seedEvents(t) {
		tags, _ := json.Marshal(ev.Tags)
		write(byKind[ev.Kind], fmt.Sprintf("seed-%02d", i), ev.Content, string(tags))
		raw, _ := ev.MarshalJSON()
		write("FuzzIngestRaw", fmt.Sprintf("seed-%02d", i), raw)
	}
}

// FuzzBuildBeat: whatever the held list and the byte budget, every event of
// a beat fits the budget, decodes, and the shards list exactly the held
// workloads, in order.
func FuzzBuildBeat(f *testing.F) {
	f.Add("wl-1,wl-2,wl-3", 1, 2000)
	f.Add(strings.Repeat("a-long-workload-name-of-forty-characters,", 200), 3, 60*1024)
	f.Add(`q"\,<&>,x`, 9, 700)
	k := fuzzKeys(f)
	f.Fuzz(func(t *testing.T, ids string, epoch int, budget int) {
		var held []WorkloadEpoch
		seen := map[string]bool{}
		for _, id := range strings.Split(ids, ",") {
			if ValidateWorkloadID(id) != nil || seen[id] || len(held) >= 5000 {
				continue
			}
			seen[id] = true
			held = append(held, WorkloadEpoch{ID: id, Epoch: uint64(epoch&0xffff) + 1})
		}
		budget = 600 + budget%(64*1024)
		if budget < 0 {
			budget = -budget
		}
		b, err := BuildBeat(k, HeartbeatParams{At: t0, Workloads: held, MaxEventBytes: budget})
		if err != nil {
			if strings.Contains(err.Error(), "alone does not fit") {
				return // one id longer than the budget allows
			}
			t.Fatalf("BuildBeat(%d workloads, budget %d) = %v", len(held), budget, err)
		}
		var got []WorkloadEpoch
		for i, ev := range b.Stored {
			if n := len(ev.String()); n > budget {
				t.Fatalf("event %d is %d bytes, budget %d", i, n, budget)
			}
			h, err := DecodeHeartbeat(ev)
			if err != nil || h.Shard != i || h.Shards != len(b.Stored) {
				t.Fatalf("DecodeHeartbeat(shard %d) = %+v, %v", i, h, err)
			}
			got = append(got, h.Workloads...)
		}
		if !reflect.DeepEqual(nonNilWorkloads(got), nonNilWorkloads(held)) {
			t.Fatalf("shards list %d workloads, want the %d held, in order", len(got), len(held))
		}
	})
}
