package heartbeat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
	"provideragent/lease"
)

// mutate copies ev, applies change to it, and re-signs it with k.
func mutate(t *testing.T, ev *nostr.Event, k *identity.Keys, change func(ev *nostr.Event)) *nostr.Event {
	t.Helper()
	c := copyEvent(ev)
	change(&c)
	if err := k.Sign(&c); err != nil {
		t.Fatal(err)
	}
	return &c
}

// setField rewrites one content JSON field (nil deletes it).
func setField(key string, v any) func(ev *nostr.Event) {
	return func(ev *nostr.Event) {
		var m map[string]any
		if err := json.Unmarshal([]byte(ev.Content), &m); err != nil {
			panic(err)
		}
		if v == nil {
			delete(m, key)
		} else {
			m[key] = v
		}
		b, _ := json.Marshal(m)
		ev.Content = string(b)
	}
}

func setTag(key, value string) func(ev *nostr.Event) {
	return func(ev *nostr.Event) {
		for i, tag := range ev.Tags {
			if tag[0] == key {
				if value == "" {
					ev.Tags = append(ev.Tags[:i:i], ev.Tags[i+1:]...)
				} else {
					ev.Tags[i] = nostr.Tag{key, value}
				}
				return
			}
		}
		ev.Tags = append(ev.Tags, nostr.Tag{key, value})
	}
}

func content(s string) func(ev *nostr.Event) { return func(ev *nostr.Event) { ev.Content = s } }

func TestDecodeRejects(t *testing.T) {
	p, s1, other := testKeys(t, "p"), testKeys(t, "s1"), testKeys(t, "other")
	hb, err := BuildHeartbeat(p, HeartbeatParams{At: t0, Workloads: []WorkloadEpoch{{ID: "a", Epoch: 1}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := BuildRevocation(p, RevocationParams{WorkloadID: "a", Standbys: []string{s1.PublicKey()}, At: t0, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	prom, err := BuildPromotion(s1, PromotionParams{WorkloadID: "a", At: t0, Epoch: 2})
	if err != nil {
		t.Fatal(err)
	}
	lg, err := BuildLeaseGrant(other, LeaseGrantParams{WorkloadID: "a", Primary: p.PublicKey(), Standbys: []string{s1.PublicKey()},
		Relays: []string{"wss://r1", "wss://r2"}, Quorum: 2, Replication: lease.ReplicationWarmStandby, RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure},
		Manifest: "image: x", At: t0})
	if err != nil {
		t.Fatal(err)
	}
	decode := map[int]func(*nostr.Event) error{
		KindHeartbeat:          func(ev *nostr.Event) error { _, err := DecodeHeartbeat(ev); return err },
		KindHeartbeatEphemeral: func(ev *nostr.Event) error { _, err := DecodeHeartbeat(ev); return err },
		KindRevocation:         func(ev *nostr.Event) error { _, err := DecodeRevocation(ev); return err },
		KindPromotion:          func(ev *nostr.Event) error { _, err := DecodePromotion(ev); return err },
		KindLeaseGrant:         func(ev *nostr.Event) error { _, err := DecodeLeaseGrant(ev); return err },
	}
	tests := []struct {
		name   string
		ev     *nostr.Event
		signer *identity.Keys
		change func(*nostr.Event)
		want   RejectReason
	}{
		{"hb signed by other", hb, other, func(*nostr.Event) {}, ReasonWrongSigner},
		{"hb p tag other", hb, p, setTag("p", other.PublicKey()), ReasonWrongSigner},
		{"hb provider_npub other", hb, p, setField("provider_npub", other.PublicKey()), ReasonWrongSigner},
		{"hb provider_npub other npub", hb, p, setField("provider_npub", other.Npub()), ReasonWrongSigner},
		{"hb no p tag", hb, p, setTag("p", ""), ReasonBadTags},
		{"hb no t tag", hb, p, setTag("t", ""), ReasonBadTags},
		{"hb v2 tag", hb, p, setTag("v", "2"), ReasonBadTags},
		{"hb no d", hb, p, setTag("d", ""), ReasonBadTags},
		{"hb d other bucket", hb, p, setTag("d", HeartbeatDTag(p.PublicKey(), uint64(t0.Unix()-120))), ReasonBadTags},
		{"hb d other bucket npub", hb, p, setTag("d", HeartbeatDTag(p.Npub(), uint64(t0.Unix()-120))), ReasonBadTags},
		{"hb d upper-case hex", hb, p, setTag("d", HeartbeatDTag(strings.ToUpper(p.PublicKey()), uint64(t0.Unix()))), ReasonBadTags},
		{"hb bad expiration", hb, p, setTag("expiration", "soon"), ReasonBadTags},
		{"hb not json", hb, p, content("{"), ReasonDecode},
		{"hb json array", hb, p, content("[]"), ReasonDecode},
		{"hb no timestamp", hb, p, setField("timestamp", nil), ReasonDecode},
		{"hb negative timestamp", hb, p, setField("timestamp", -1), ReasonDecode},
		{"hb no capacity", hb, p, setField("available_capacity", nil), ReasonDecode},
		{"hb partial capacity", hb, p, setField("available_capacity", map[string]int{"cpu_available": 1}), ReasonDecode},
		{"hb version 2", hb, p, setField("version", 2), ReasonDecode},
		{"hb provider_npub garbage", hb, p, setField("provider_npub", "npub1xyz"), ReasonDecode},
		{"hb workload epoch 0", hb, p, setField("workloads", []map[string]any{{"id": "a", "epoch": 0}}), ReasonDecode},
		{"hb workload dup", hb, p, setField("workloads", []map[string]any{{"id": "a", "epoch": 1}, {"id": "a", "epoch": 2}}), ReasonDecode},
		{"hb workload no id", hb, p, setField("workloads", []map[string]any{{"epoch": 1}}), ReasonDecode},
		{"hb workload control char", hb, p, setField("workloads", []map[string]any{{"id": "a\nb", "epoch": 1}}), ReasonDecode},
		{"rev signed by standby", rev, s1, func(*nostr.Event) {}, ReasonWrongSigner},
		{"rev workload tag", rev, p, setTag("workload", "b"), ReasonBadTags},
		{"rev d tag", rev, p, setTag("d", RevocationDTag(p.PublicKey(), "b")), ReasonBadTags},
		{"rev d tag npub", rev, p, setTag("d", RevocationDTag(p.Npub(), "b")), ReasonBadTags},
		{"rev no revocation t", rev, p, func(ev *nostr.Event) { ev.Tags = ev.Tags[:1:1] }, ReasonBadTags},
		{"rev successor not standby", rev, p, setField("successor", other.PublicKey()), ReasonDecode},
		{"rev successor not standby npub", rev, p, setField("successor", other.Npub()), ReasonDecode},
		{"rev successor garbage", rev, p, setField("successor", "x"), ReasonDecode},
		{"rev epoch 0", rev, p, setField("epoch", 0), ReasonDecode},
		{"rev no reason", rev, p, setField("reason", nil), ReasonDecode},
		{"rev standbys not a list", rev, p, setField("standby_providers", "x"), ReasonDecode},
		{"rev empty workload", rev, p, setField("workload_id", ""), ReasonDecode},
		{"prom signed by other", prom, other, func(*nostr.Event) {}, ReasonWrongSigner},
		{"prom bad status", prom, s1, setField("status", "maybe"), ReasonDecode},
		{"prom epoch 0", prom, s1, setField("epoch", 0), ReasonDecode},
		{"prom no promoted_at", prom, s1, setField("promoted_at", nil), ReasonDecode},
		{"prom d tag", prom, s1, setTag("d", PromotionDTag("b")), ReasonBadTags},
		{"lease extra p", lg, other, func(ev *nostr.Event) { ev.Tags = append(ev.Tags, nostr.Tag{"p", other.PublicKey()}) }, ReasonBadTags},
		{"lease missing p", lg, other, func(ev *nostr.Event) { ev.Tags = ev.Tags[:3] }, ReasonBadTags},
		{"lease d tag", lg, other, setTag("d", LeaseDTag("b")), ReasonBadTags},
		{"lease quorum 0", lg, other, setField("quorum", 0), ReasonDecode},
		{"lease replication", lg, other, setField("replication", "raid"), ReasonDecode},
		{"lease restart", lg, other, setField("restart_policy", "sometimes"), ReasonDecode},
		{"lease dup relay", lg, other, setField("relays", []string{"wss://r1", "wss://R1/"}), ReasonDecode},
		{"lease primary as standby", lg, other, setField("standbys", []string{p.PublicKey()}), ReasonDecode},
		{"lease no epoch", lg, other, setField("epoch", nil), ReasonDecode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := mutate(t, tt.ev, tt.signer, tt.change)
			err := decode[ev.Kind](ev)
			if got := ReasonOf(err); got != tt.want {
				t.Fatalf("decode(%s) = %v (reason %q), want reason %q", tt.name, err, got, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("decode(%s) error has a newline: %q", tt.name, err)
			}
		})
	}
	// Wrong kind for each decoder.
	if _, err := DecodeHeartbeat(rev); ReasonOf(err) != ReasonBadKind {
		t.Errorf("DecodeHeartbeat(revocation) = %v, want bad_kind", err)
	}
	if _, err := DecodeRevocation(hb); ReasonOf(err) != ReasonBadKind {
		t.Errorf("DecodeRevocation(heartbeat) = %v, want bad_kind", err)
	}
	if _, err := DecodePromotion(hb); ReasonOf(err) != ReasonBadKind {
		t.Errorf("DecodePromotion(heartbeat) = %v, want bad_kind", err)
	}
	if _, err := DecodeLeaseGrant(hb); ReasonOf(err) != ReasonBadKind {
		t.Errorf("DecodeLeaseGrant(heartbeat) = %v, want bad_kind", err)
	}
}
