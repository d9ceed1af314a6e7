package heartbeat

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/lease"
)

// TestBuildBeatFitsRelays: a held list of 3,000 workloads with 40-character
// ids (about 170 KB as one event, which strfry refuses) is dealt over
// several events of at most 60 KiB each, every one verified and decoded by
// the ingest, and together they list exactly the held pairs; shard 0 stays
// the Paygress-form heartbeat with every v1 field, and a short list is one
// event as before.
func TestBuildBeatFitsRelays(t *testing.T) {
	k := testKeys(t, "p")
	held := make([]WorkloadEpoch, 3000)
	for i := range held {
		held[i] = WorkloadEpoch{ID: fmt.Sprintf("workload-%031d", i), Epoch: uint64(i%7 + 1)}
	}
	b, err := BuildBeat(k, HeartbeatParams{At: t0, Workloads: held})
	if err != nil {
		t.Fatalf("BuildBeat(3000) = %v", err)
	}
	if len(b.Stored) < 3 {
		t.Fatalf("BuildBeat(3000) = %d stored events, want the list split", len(b.Stored))
	}
	cfg := DefaultConfig()
	cfg.MaxEventBytes, cfg.MaxContentBytes = 64*1024, 64*1024
	in, err := NewIngestor(cfg, allowAll{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []WorkloadEpoch
	for i, ev := range b.Events() {
		n := len(ev.String())
		if n > DefaultMaxEventBytes {
			t.Fatalf("event %d (kind %d) is %d bytes, want at most %d", i, ev.Kind, n, DefaultMaxEventBytes)
		}
		size := b.EphemeralSize
		if i < len(b.Sizes) {
			size = b.Sizes[i]
		}
		if size < n || size > n+16 {
			t.Fatalf("event %d: Sizes says %d bytes, it is %d, want a bound within 16 bytes", i, size, n)
		}
		raw, _ := ev.MarshalJSON()
		res, err := in.IngestRaw(context.Background(), t0, raw)
		if err != nil || res.Heartbeat == nil {
			t.Fatalf("IngestRaw(event %d, kind %d) = %+v, %v", i, ev.Kind, res, err)
		}
		h := res.Heartbeat
		if ev == b.Ephemeral {
			if h.Shard != 0 || h.Shards != len(b.Stored) || !reflect.DeepEqual(h.Workloads, held[:len(h.Workloads)]) {
				t.Fatalf("ephemeral = shard %d of %d, want a copy of shard 0", h.Shard, h.Shards)
			}
			continue
		}
		if h.Shard != i || h.Shards != len(b.Stored) || (i == 0) != (ev.Kind == KindHeartbeat) {
			t.Fatalf("event %d: kind %d shard %d of %d", i, ev.Kind, h.Shard, h.Shards)
		}
		got = append(got, h.Workloads...)
	}
	if !reflect.DeepEqual(got, held) {
		t.Fatalf("shards list %d workloads, want the %d held in order", len(got), len(held))
	}
	if h, _ := DecodeHeartbeat(b.Stored[0]); h.ActiveWorkloads != 3000 {
		t.Fatalf("shard 0 active_workloads = %d, want 3000 (every held workload)", h.ActiveWorkloads)
	}

	small, err := BuildBeat(k, HeartbeatParams{At: t0, Workloads: held[:3]})
	if err != nil || len(small.Stored) != 1 {
		t.Fatalf("BuildBeat(3) = %d events, %v, want one", len(small.Stored), err)
	}
	one, err := BuildHeartbeat(k, HeartbeatParams{At: t0, Workloads: held[:3]}, false)
	if err != nil {
		t.Fatal(err)
	}
	if small.Stored[0].Content != one.Content || !reflect.DeepEqual(small.Stored[0].Tags, one.Tags) {
		t.Fatalf("a short beat = %s %v, want BuildHeartbeat's %s %v", small.Stored[0].Content, small.Stored[0].Tags, one.Content, one.Tags)
	}
	// A relay's content limit (NIP-11 max_content_length) applies too.
	tight, err := BuildBeat(k, HeartbeatParams{At: t0, Workloads: held[:200], MaxContentBytes: 2000})
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range tight.Stored {
		if len(ev.Content) > 2000 {
			t.Fatalf("shard %d content is %d bytes, limit 2000", i, len(ev.Content))
		}
	}
}

// TestEntrySizeMatchesEncoding: the sizes BuildBeat computes without
// encoding agree with encoding/json and the event's escaping for every kind
// of id (plain, and with the characters JSON encoders escape).
func TestEntrySizeMatchesEncoding(t *testing.T) {
	for _, we := range []WorkloadEpoch{
		{ID: "a", Epoch: 1}, {ID: "workload-0000000000000000000000000000001", Epoch: 9},
		{ID: "x", Epoch: 10}, {ID: "y", Epoch: 18446744073709551615}, {ID: `q"uote`, Epoch: 2},
		{ID: `back\slash`, Epoch: 3}, {ID: "<tag>&", Epoch: 4}, {ID: "~!#$%^*()_+=-{}[]|:;',.?/`", Epoch: 5},
		{ID: "durable", Epoch: 7, Checkpoint: lease.CheckpointMark{Seq: 1, Manifest: strings.Repeat("ab", 32)}},
		{ID: `q"d`, Epoch: 7, Checkpoint: lease.CheckpointMark{Seq: 18446744073709551615, Manifest: strings.Repeat("0f", 32)}},
	} {
		raw, _ := json.Marshal(we)
		quoted, _ := json.Marshal(string(raw))
		wantEvent, wantContent := len(quoted)-2+1, len(raw)+1
		gotEvent, gotContent, err := entrySize(we)
		if err != nil || gotEvent != wantEvent || gotContent != wantContent {
			t.Errorf("entrySize(%q) = %d, %d, %v, want %d, %d", we.ID, gotEvent, gotContent, err, wantEvent, wantContent)
		}
	}
}

// TestBeatCarriesCheckpointMarksStoredOnly: a held durable workload's
// checkpoint mark rides in the stored events (and comes back out of the
// decoder as it went in); the ephemeral copy leaves it out.
func TestBeatCarriesCheckpointMarksStoredOnly(t *testing.T) {
	k := testKeys(t, "p")
	mark := lease.CheckpointMark{Seq: 42, Manifest: strings.Repeat("c3", 32)}
	p := HeartbeatParams{At: time.Unix(1_800_000_000, 0), Workloads: []WorkloadEpoch{
		{ID: "plain", Epoch: 1}, {ID: "durable", Epoch: 3, Checkpoint: mark},
	}}
	b, err := BuildBeat(k, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ev   *nostr.Event
		want lease.CheckpointMark
	}{{b.Stored[0], mark}, {b.Ephemeral, lease.CheckpointMark{}}} {
		h, err := DecodeHeartbeat(tc.ev)
		if err != nil {
			t.Fatalf("DecodeHeartbeat(kind %d) = %v", tc.ev.Kind, err)
		}
		if got := h.Workloads[1].Checkpoint; got != tc.want {
			t.Fatalf("kind %d lists durable with mark %+v, want %+v", tc.ev.Kind, got, tc.want)
		}
	}
}

// TestHeartbeatCheckpointMarkRefused: a mark without a seq or a sha256,
// with seq 0, or with a sha256 that is not 64 lower-case hex digits makes
// the heartbeat a decode error, in both decoders.
func TestHeartbeatCheckpointMarkRefused(t *testing.T) {
	base, err := BuildHeartbeat(testKeys(t, "p"), HeartbeatParams{At: t0, Workloads: []WorkloadEpoch{{ID: "w1", Epoch: 1}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ck := range []string{`{"seq":1}`, `{"sha256":"` + strings.Repeat("a", 64) + `"}`, `{"seq":0,"sha256":"` + strings.Repeat("a", 64) + `"}`,
		`{"seq":1,"sha256":"` + strings.Repeat("A", 64) + `"}`, `{"seq":1,"sha256":"abc"}`} {
		ev := *base
		ev.Content = strings.Replace(base.Content, `{"id":"w1","epoch":1}`, `{"id":"w1","epoch":1,"ckpt":`+ck+`}`, 1)
		if ev.Content == base.Content {
			t.Fatalf("no held entry to rewrite in %s", base.Content)
		}
		if _, err := DecodeHeartbeat(&ev); ReasonOf(err) != ReasonDecode {
			t.Errorf("DecodeHeartbeat(ckpt %s) = %v, want a decode refusal", ck, err)
		}
	}
}
