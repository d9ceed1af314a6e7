package conformance

import (
	"strings"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/identity"
)

// exampleCapacity is the example heartbeats' available_capacity.
var exampleCapacity = heartbeat.Capacity{CPUAvailable: 2000, MemoryMBAvailable: 4096, StorageGBAvailable: 50}

// shardedWorkloads are held by the example beat split over two events.
var shardedWorkloads = []heartbeat.WorkloadEpoch{
	{ID: "batch-01", Epoch: 1}, {ID: "batch-02", Epoch: 3}, {ID: "batch-03", Epoch: 1},
	{ID: "batch-04", Epoch: 2}, {ID: "batch-05", Epoch: 1}, {ID: "batch-06", Epoch: 7},
}

// shardedMaxEventBytes splits shardedWorkloads over two events.
const shardedMaxEventBytes = 1000

func (g *generator) heartbeatFiles() {
	primary, standby := g.keys["primary"], g.keys["standby"]
	params := heartbeat.HeartbeatParams{
		At: time.Unix(Created, 0), Capacity: exampleCapacity,
		Workloads: []heartbeat.WorkloadEpoch{{ID: WorkloadID, Epoch: 1}},
	}
	stored := g.resign(g.must(heartbeat.BuildHeartbeat(primary.keys, params, false)), primary)
	ephemeral := g.resign(g.must(heartbeat.BuildHeartbeat(primary.keys, params, true)), primary)
	sp := params
	sp.Workloads, sp.MaxEventBytes = shardedWorkloads, shardedMaxEventBytes
	beat, err := heartbeat.BuildBeat(primary.keys, sp)
	if err != nil || len(beat.Stored) != 2 {
		g.fail("build the sharded beat: %d events, %v; want 2", len(beat.Stored), err)
		return
	}
	shard0, shard1 := g.resign(beat.Stored[0], primary), g.resign(beat.Stored[1], primary)

	// The Paygress v1 form (wire.rs HeartbeatContent, publish.rs tags): no
	// workloads list, no expiration.
	created := itoa(Created)
	paygressContent := `{"provider_npub":"` + primary.Public + `","timestamp":` + created +
		`,"active_workloads":2,"available_capacity":{"cpu_available":3500,"memory_mb_available":7168,"storage_gb_available":120},"version":1}`
	paygress := func(kind int) *nostr.Event {
		ev := &nostr.Event{Kind: kind, CreatedAt: Created, Content: paygressContent,
			Tags: nostr.Tags{{"t", "paygress-heartbeat"}, {"p", primary.Public}}}
		if kind == heartbeat.KindHeartbeat {
			ev.Tags = append(ev.Tags, nostr.Tag{"d", heartbeat.HeartbeatDTag(primary.Public, Created)})
		}
		ev.Tags = append(ev.Tags, nostr.Tag{"v", "1"})
		return g.resign(ev, primary)
	}

	f := g.newFile("heartbeat.json", heartbeat.KindHeartbeat, "Stored heartbeat (kind 38384): the first event of a beat")
	g.add(f, vcase{name: "example", example: "heartbeat", ev: stored,
		about: "The NIP's example: the primary's stored heartbeat listing the one workload it holds Live."})
	g.add(f, vcase{name: "paygress", ev: paygress(heartbeat.KindHeartbeat),
		about: "Written as Paygress v1 writes it: no workloads list (it reads as a Live claim of every workload the provider holds), no expiration."})
	g.add(f, vcase{name: "paygress-no-version", ev: g.mutate(paygress(heartbeat.KindHeartbeat), primary, g.editContent(`,"version":1`, "")),
		about: "Paygress v1 without version: version defaults to 1."})
	g.add(f, vcase{name: "shard-0-of-2", ev: shard0,
		about: "The first event of a beat whose list is split over two events (shards 2); heartbeat-shard.json has the second."})
	g.add(f, vcase{name: "workloads-empty", ev: g.resign(g.must(heartbeat.BuildHeartbeat(primary.keys, heartbeat.HeartbeatParams{At: time.Unix(Created, 0), Capacity: exampleCapacity}, false)), primary),
		about: "An empty workloads list: the provider holds nothing Live (unlike no list at all)."})
	g.add(f, vcase{name: "workloads-null", ev: g.mutate(stored, primary, g.editContent(`"workloads":[{"id":"web-1","epoch":1}]`, `"workloads":null`)),
		about: "workloads null reads as absent, as from Paygress: a Live claim of every workload the provider holds."})
	g.add(f, vcase{name: "unknown-field", ev: g.mutate(stored, primary, g.editContent(`,"version":1`, `,"version":1,"region":"eu-west"`)),
		about: "A field nobody defines is ignored."})
	npub, _ := identity.NpubOfHex(primary.Public)
	g.add(f, vcase{name: "provider-npub", ev: g.mutate(stored, primary, func(ev *nostr.Event) {
		ev.Content = g.replace(ev.Content, `"provider_npub":"`+primary.Public+`"`, `"provider_npub":"`+npub+`"`)
		setTag("d", heartbeat.HeartbeatDTag(npub, Created))(ev)
	}), about: "provider_npub and the d tag as NIP-19 npub (older agents wrote them so): accepted; write hex."})
	g.add(f, vcase{name: "provider-npub-hex-d", ev: g.mutate(stored, primary, g.editContent(`"provider_npub":"`+primary.Public+`"`, `"provider_npub":"`+npub+`"`)),
		about: "provider_npub as npub, the d tag in hex: either form of the same key matches."})
	g.add(f, vcase{name: "provider-uppercase-hex", ev: g.mutate(stored, primary, g.editContent(primary.Public+`"`, strings.ToUpper(primary.Public)+`"`)),
		about: "provider_npub in uppercase hex: content keys are read as hex in either case (Paygress compares them as strings: write lowercase)."})
	nsec := "nsec1" + strings.Repeat("q", 58)
	g.add(f, vcase{name: "provider-nsec", want: heartbeat.ReasonDecode, ev: g.mutate(stored, primary, g.editContent(primary.Public+`"`, nsec+`"`)),
		about: "An nsec where a public key belongs: a key form the agent does not accept (refused by its prefix, never decoded)."})
	g.add(f, vcase{name: "provider-0x-hex", want: heartbeat.ReasonDecode, ev: g.mutate(stored, primary, g.editContent(`"`+primary.Public+`"`, `"0x`+primary.Public+`"`)),
		about: "provider_npub as 0x-prefixed hex: a key form the agent does not accept."})
	g.add(f, vcase{name: "provider-other-key", want: heartbeat.ReasonWrongSigner, ev: g.mutate(stored, primary, func(ev *nostr.Event) {
		ev.Content = g.replace(ev.Content, primary.Public, standby.Public)
		setTag("d", heartbeat.HeartbeatDTag(standby.Public, Created))(ev)
	}), about: "provider_npub (and the d tag) name the standby, the primary signed: a heartbeat counts only for its signer."})
	g.add(f, vcase{name: "p-tag-other-key", want: heartbeat.ReasonWrongSigner, ev: g.mutate(stored, primary, setTag("p", standby.Public)),
		about: "The p tag names another provider than the signer."})
	g.add(f, vcase{name: "p-tag-missing", want: heartbeat.ReasonBadTags, ev: g.mutate(stored, primary, setTag("p")), about: "No p tag."})
	g.add(f, vcase{name: "t-tag-missing", want: heartbeat.ReasonBadTags, ev: g.mutate(stored, primary, setTag("t")), about: "No t=paygress-heartbeat tag."})
	g.add(f, vcase{name: "v-tag-2", want: heartbeat.ReasonBadTags, ev: g.mutate(stored, primary, setTag("v", "2")), about: "Schema version tag v=2."})
	g.add(f, vcase{name: "v-tag-missing", want: heartbeat.ReasonBadTags, ev: g.mutate(stored, primary, setTag("v")), about: "No v tag."})
	g.add(f, vcase{name: "d-tag-missing", want: heartbeat.ReasonBadTags, ev: g.mutate(stored, primary, setTag("d")), about: "A stored heartbeat without d tag."})
	g.add(f, vcase{name: "d-tag-other-minute", want: heartbeat.ReasonBadTags,
		ev:    g.mutate(stored, primary, setTag("d", heartbeat.HeartbeatDTag(primary.Public, Created-60))),
		about: "The d tag's bucket is the minute before the content's timestamp."})
	ts := `"timestamp":` + created
	g.add(f, vcase{name: "timestamp-missing", want: heartbeat.ReasonDecode, ev: g.mutate(stored, primary, g.editContent(ts+",", "")), about: "No timestamp."})
	g.add(f, vcase{name: "timestamp-string", want: heartbeat.ReasonDecode, ev: g.mutate(stored, primary, g.editContent(ts, `"timestamp":"`+created+`"`)),
		about: "timestamp as a string: integers are JSON numbers."})
	g.add(f, vcase{name: "timestamp-float", want: heartbeat.ReasonDecode, ev: g.mutate(stored, primary, g.editContent(ts, ts+".0")),
		about: "timestamp with a fraction: integers have none."})
	g.add(f, vcase{name: "timestamp-leading-zero", want: heartbeat.ReasonDecode, ev: g.mutate(stored, primary, g.editContent(ts, `"timestamp":0`+created)),
		about: "A number with a leading zero is not JSON (RFC 8259): refused, as Paygress refuses it."})
	g.add(f, vcase{name: "active-workloads-over-u32", want: heartbeat.ReasonDecode,
		ev: g.mutate(stored, primary, g.editContent(`"active_workloads":1`, `"active_workloads":4294967296`)), about: "active_workloads is a u32."})
	g.add(f, vcase{name: "cpu-negative", want: heartbeat.ReasonDecode,
		ev: g.mutate(stored, primary, g.editContent(`"cpu_available":2000`, `"cpu_available":-1`)), about: "Integers are unsigned."})
	g.add(f, vcase{name: "capacity-incomplete", want: heartbeat.ReasonDecode,
		ev: g.mutate(stored, primary, g.editContent(`,"storage_gb_available":50`, "")), about: "available_capacity without storage_gb_available."})
	g.add(f, vcase{name: "version-2", want: heartbeat.ReasonDecode, ev: g.mutate(stored, primary, g.editContent(`"version":1`, `"version":2`)),
		about: "Content version 2."})
	g.add(f, vcase{name: "epoch-0", want: heartbeat.ReasonDecode, ev: g.mutate(stored, primary, g.editContent(`"epoch":1`, `"epoch":0`)),
		about: "A held workload at epoch 0: epochs start at 1."})
	g.add(f, vcase{name: "epoch-missing", want: heartbeat.ReasonDecode, ev: g.mutate(stored, primary, g.editContent(`,"epoch":1`, "")),
		about: "A held workload without epoch."})
	g.add(f, vcase{name: "workload-id-space", want: heartbeat.ReasonDecode, ev: g.mutate(stored, primary, g.editContent(`"id":"web-1"`, `"id":"web 1"`)),
		about: "A workload id with a space: ids are printable ASCII without spaces."})
	long := strings.Repeat("w", heartbeat.MaxWorkloadIDBytes)
	g.add(f, vcase{name: "workload-id-231-bytes", ev: g.mutate(stored, primary, g.editContent(`"id":"web-1"`, `"id":"`+long+`"`)),
		about: "A workload id of 231 bytes, the most (every d tag and filter item built from it fits 255 bytes)."})
	g.add(f, vcase{name: "workload-id-232-bytes", want: heartbeat.ReasonDecode, ev: g.mutate(stored, primary, g.editContent(`"id":"web-1"`, `"id":"`+long+`w"`)),
		about: "A workload id of 232 bytes."})
	mark := `{"id":"web-1","epoch":1,"ckpt":{"seq":17,"sha256":"` + strings.Repeat("5e", 32) + `"}}`
	g.add(f, vcase{name: "checkpoint-mark", ev: g.mutate(stored, primary, g.editContent(`{"id":"web-1","epoch":1}`, mark)),
		about: "A durable workload held Live with the mark of its newest published checkpoint (ckpt: its record's seq and its manifest's sha256): the evidence a successor's required restore never goes behind."})
	g.add(f, vcase{name: "checkpoint-mark-seq-0", want: heartbeat.ReasonDecode,
		ev:    g.mutate(stored, primary, g.editContent(`{"id":"web-1","epoch":1}`, strings.Replace(mark, `"seq":17`, `"seq":0`, 1))),
		about: "A checkpoint mark with seq 0: seqs start at 1."})
	g.add(f, vcase{name: "checkpoint-mark-sha256-short", want: heartbeat.ReasonDecode,
		ev:    g.mutate(stored, primary, g.editContent(`{"id":"web-1","epoch":1}`, `{"id":"web-1","epoch":1,"ckpt":{"seq":17,"sha256":"5e5e"}}`)),
		about: "A checkpoint mark whose sha256 is not 64 lower-case hex digits."})
	g.add(f, vcase{name: "checkpoint-mark-no-seq", want: heartbeat.ReasonDecode,
		ev:    g.mutate(stored, primary, g.editContent(`{"id":"web-1","epoch":1}`, strings.Replace(mark, `"seq":17,`, ``, 1))),
		about: "A checkpoint mark without seq."})
	g.add(f, vcase{name: "workload-listed-twice", want: heartbeat.ReasonDecode,
		ev:    g.mutate(stored, primary, g.editContent(`{"id":"web-1","epoch":1}`, `{"id":"web-1","epoch":1},{"id":"web-1","epoch":2}`)),
		about: "One workload listed twice."})
	g.add(f, vcase{name: "shard-1-in-stored", want: heartbeat.ReasonDecode, ev: g.mutate(stored, primary, g.editContent(`"version":1`, `"version":1,"shard":1`)),
		about: "A kind 38384 event is shard 0 of its beat."})
	g.add(f, vcase{name: "shards-4097", want: heartbeat.ReasonDecode, ev: g.mutate(stored, primary, g.editContent(`"version":1`, `"version":1,"shards":4097`)),
		about: "shards above 4096."})
	g.add(f, vcase{name: "duplicate-field-nested", want: heartbeat.ReasonDecode,
		ev:    g.mutate(stored, primary, g.editContent(`"cpu_available":2000`, `"cpu_available":2000,"cpu_available":9000`)),
		about: "A field given twice inside available_capacity: refused at any depth."})
	g.add(f, vcase{name: "duplicate-epoch", want: heartbeat.ReasonDecode,
		ev:    g.mutate(stored, primary, g.editContent(`"epoch":1`, `"epoch":1,"epoch":2`)),
		about: "A held workload's epoch given twice: one decoder would read 1, another 2."})
	g.add(f, vcase{name: "duplicate-unknown-field", want: heartbeat.ReasonDecode,
		ev:    g.mutate(stored, primary, g.editContent(`,"version":1`, `,"version":1,"region":"eu","region":"us"`)),
		about: "A field nobody reads given twice: refused all the same, so the verdict does not depend on which fields a receiver knows."})
	g.add(f, vcase{name: "unpaired-surrogate", want: heartbeat.ReasonDecode,
		ev:    g.mutate(stored, primary, g.editContent(`,"version":1`, `,"version":1,"note":"\ud800"`)),
		about: "A \\u escape of an unpaired surrogate: serde_json refuses it, encoding/json replaces it; refused."})
	g.add(f, vcase{name: "stale-limit", ev: g.resign(g.must(heartbeat.BuildHeartbeat(primary.keys, withAt(params, Now-180), false)), primary),
		about: "created_at 180 s before now (stale_s): still counts."})
	g.add(f, vcase{name: "stale", want: heartbeat.ReasonStale, ev: g.resign(g.must(heartbeat.BuildHeartbeat(primary.keys, withAt(params, Now-181), false)), primary),
		about: "created_at 181 s before now: stale (replays and re-served old heartbeats never count)."})
	contentLimit := DefaultLimits().MaxContentBytes
	g.add(f, vcase{name: "content-16384-bytes", ev: g.mutate(stored, primary, padContent(contentLimit)),
		about: "Content of exactly max_content_bytes (an unknown pad field fills it)."})
	g.add(f, vcase{name: "content-16385-bytes", want: heartbeat.ReasonTooLarge, ev: g.mutate(stored, primary, padContent(contentLimit+1)),
		about: "Content one byte over max_content_bytes."})
	g.add(f, vcase{name: "tags-65", want: heartbeat.ReasonTooLarge, ev: g.mutate(stored, primary, func(ev *nostr.Event) {
		for len(ev.Tags) < DefaultLimits().MaxTags+1 {
			ev.Tags = append(ev.Tags, nostr.Tag{"x", "1"})
		}
	}), about: "65 tags, over max_tags."})
	g.add(f, vcase{name: "tag-value-1025-bytes", want: heartbeat.ReasonTooLarge,
		ev:    g.mutate(stored, primary, func(ev *nostr.Event) { ev.Tags = append(ev.Tags, nostr.Tag{"x", strings.Repeat("x", 1025)}) }),
		about: "A tag value over max_tag_bytes."})
	g.add(f, vcase{name: "empty-tag", want: heartbeat.ReasonBadTags, ev: g.mutate(stored, primary, func(ev *nostr.Event) { ev.Tags = append(ev.Tags, nostr.Tag{}) }),
		about: "An empty tag."})
	g.commonCases(f, stored, primary)

	f = g.newFile("heartbeat-ephemeral.json", heartbeat.KindHeartbeatEphemeral, "Ephemeral heartbeat (kind 20384): live presence, a copy of the stored heartbeat without d tag")
	g.add(f, vcase{name: "example", example: "heartbeat-ephemeral", ev: ephemeral,
		about: "The NIP's example: the ephemeral copy of the stored example."})
	g.add(f, vcase{name: "paygress", ev: paygress(heartbeat.KindHeartbeatEphemeral), about: "Written as Paygress v1 writes it."})
	g.add(f, vcase{name: "t-tag-shard", want: heartbeat.ReasonBadTags, ev: g.mutate(ephemeral, primary, setTag("t", "provider-agent-heartbeat")),
		about: "The shard's t tag instead of t=paygress-heartbeat."})
	g.add(f, vcase{name: "stale", want: heartbeat.ReasonStale, ev: g.resign(g.must(heartbeat.BuildHeartbeat(primary.keys, withAt(params, Now-181), true)), primary),
		about: "created_at 181 s before now: stale."})
	g.commonCases(f, ephemeral, primary)

	f = g.newFile("heartbeat-shard.json", heartbeat.KindHeartbeatShard, "Heartbeat shard (kind 38389): the rest of a beat's held list")
	g.add(f, vcase{name: "example", example: "heartbeat-shard", ev: shard1,
		about: "The NIP's example: shard 1 of the two events of a beat (heartbeat.json#shard-0-of-2 is shard 0)."})
	g.add(f, vcase{name: "shard-0", want: heartbeat.ReasonDecode, ev: g.mutate(shard1, primary, g.editContent(`"shard":1`, `"shard":0`)),
		about: "shard 0 in a kind 38389 event: shard 0 is the stored heartbeat."})
	g.add(f, vcase{name: "shard-equals-shards", want: heartbeat.ReasonDecode, ev: g.mutate(shard1, primary, g.editContent(`"shard":1`, `"shard":2`)),
		about: "shard 2 of 2: shards are numbered 0 to shards-1."})
	g.add(f, vcase{name: "shards-missing", want: heartbeat.ReasonDecode, ev: g.mutate(shard1, primary, g.editContent(`,"shards":2`, "")), about: "No shards."})
	g.add(f, vcase{name: "workloads-missing", want: heartbeat.ReasonDecode, ev: g.mutate(shard1, primary, func(ev *nostr.Event) {
		ev.Content = ev.Content[:strings.Index(ev.Content, `,"workloads"`)] + "}"
	}), about: "No workloads list."})
	g.add(f, vcase{name: "d-tag-other-shard", want: heartbeat.ReasonBadTags,
		ev: g.mutate(shard1, primary, setTag("d", heartbeat.ShardDTag(primary.Public, Created, 2))), about: "The d tag names shard 2."})
	g.add(f, vcase{name: "t-tag-paygress", want: heartbeat.ReasonBadTags, ev: g.mutate(shard1, primary, setTag("t", "paygress-heartbeat")),
		about: "t=paygress-heartbeat instead of t=provider-agent-heartbeat."})
	g.add(f, vcase{name: "provider-other-key", want: heartbeat.ReasonWrongSigner, ev: g.mutate(shard1, primary, func(ev *nostr.Event) {
		ev.Content = g.replace(ev.Content, primary.Public, standby.Public)
		setTag("d", heartbeat.ShardDTag(standby.Public, Created, 1))(ev)
	}), about: "provider_npub and the d tag name the standby; the primary signed."})
	g.commonCases(f, shard1, primary)
}

func withAt(p heartbeat.HeartbeatParams, at int64) heartbeat.HeartbeatParams {
	p.At = time.Unix(at, 0)
	return p
}

// padContent adds an unknown "pad" field that brings the content to n
// bytes.
func padContent(n int) func(ev *nostr.Event) {
	return func(ev *nostr.Event) {
		base := ev.Content[:len(ev.Content)-1] + `,"pad":""}`
		if len(base) <= n {
			ev.Content = base[:len(base)-2] + strings.Repeat("x", n-len(base)) + `"}`
		}
	}
}
