package heartbeat

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/lease"
)

// ckptGrant is the params of a valid grant signed by issuer "issuer".
func ckptGrant(t testing.TB, cp *lease.CheckpointPolicy) LeaseGrantParams {
	return LeaseGrantParams{
		WorkloadID: "wl-1", Primary: testKeys(t, "primary").PublicKey(), Standbys: []string{testKeys(t, "standby").PublicKey()},
		Relays: []string{"wss://a.example", "wss://b.example"}, Quorum: 2, Replication: lease.ReplicationWarmStandby,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever}, Command: []string{"run"}, At: t0, Checkpoint: cp,
	}
}

// sealedTo is a policy's keys: payload for each of the test keys named.
func sealedTo(t testing.TB, payload string, names ...string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		out[testKeys(t, n).PublicKey()] = payload
	}
	return out
}

func TestLeaseGrantCheckpointPolicy(t *testing.T) {
	issuer := testKeys(t, "issuer")
	for _, tc := range []struct {
		name string
		in   *lease.CheckpointPolicy
		want *lease.CheckpointPolicy
		wire string // the content's checkpoint object; "" = absent
	}{
		{"none", nil, nil, ""},
		{"full", &lease.CheckpointPolicy{Servers: []string{"https://b1.example", "http://127.0.0.1:7448"}, MinServers: 1, Restore: lease.RestoreRequired, RestoreTimeout: 90 * time.Second},
			&lease.CheckpointPolicy{Servers: []string{"https://b1.example", "http://127.0.0.1:7448"}, MinServers: 1, Restore: lease.RestoreRequired, RestoreTimeout: 90 * time.Second},
			`{"servers":["https://b1.example","http://127.0.0.1:7448"],"min_servers":1,"restore":"required","restore_timeout_s":90}`},
		{"defaults", &lease.CheckpointPolicy{}, &lease.CheckpointPolicy{Restore: lease.RestoreBestEffort}, `{"restore":"best-effort"}`},
		{"the longest restore timeout", &lease.CheckpointPolicy{RestoreTimeout: MaxRestoreTimeout}, &lease.CheckpointPolicy{Restore: lease.RestoreBestEffort, RestoreTimeout: MaxRestoreTimeout},
			`{"restore":"best-effort","restore_timeout_s":3600}`},
		{"a checkpoint key", &lease.CheckpointPolicy{Keys: sealedTo(t, "AgAB", "primary", "standby")},
			&lease.CheckpointPolicy{Restore: lease.RestoreBestEffort, Keys: sealedTo(t, "AgAB", "primary", "standby")},
			`{"restore":"best-effort","keys":{"` + min(testKeys(t, "primary").PublicKey(), testKeys(t, "standby").PublicKey()) + `":"AgAB","` +
				max(testKeys(t, "primary").PublicKey(), testKeys(t, "standby").PublicKey()) + `":"AgAB"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := BuildLeaseGrant(issuer, ckptGrant(t, tc.in))
			if err != nil {
				t.Fatalf("BuildLeaseGrant = %v", err)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(ev.Content), &m); err != nil {
				t.Fatal(err)
			}
			if got := string(m["checkpoint"]); got != tc.wire {
				t.Errorf("content checkpoint = %s, want %s", got, tc.wire)
			}
			g, err := DecodeLeaseGrant(ev)
			if err != nil {
				t.Fatalf("DecodeLeaseGrant = %v", err)
			}
			if !reflect.DeepEqual(g.Spec.Checkpoint, tc.want) {
				t.Errorf("DecodeLeaseGrant.Spec.Checkpoint = %+v, want %+v", g.Spec.Checkpoint, tc.want)
			}
		})
	}
}

// TestLeaseGrantWithoutCheckpointUnchanged: a grant written before the
// checkpoint object existed decodes as before, with no policy.
func TestLeaseGrantWithoutCheckpointUnchanged(t *testing.T) {
	p := ckptGrant(t, nil)
	content := `{"workload_id":"wl-1","primary":"` + p.Primary + `","standbys":["` + p.Standbys[0] + `"],"relays":["wss://a.example","wss://b.example"],` +
		`"quorum":2,"replication":"warm-standby","restart_policy":{"policy":"never"},"command":["run"],"expires_at":0,"epoch":1}`
	ev := &nostr.Event{Kind: KindLeaseGrant, CreatedAt: nostr.Timestamp(t0.Unix()), Content: content,
		Tags: nostr.Tags{{"d", LeaseDTag("wl-1")}, {"workload", "wl-1"}, {"p", p.Primary}, {"p", p.Standbys[0]}}}
	if err := testKeys(t, "issuer").Sign(ev); err != nil {
		t.Fatal(err)
	}
	g, err := DecodeLeaseGrant(ev)
	if err != nil {
		t.Fatalf("DecodeLeaseGrant(old grant) = %v", err)
	}
	if g.Spec.Checkpoint != nil || g.Spec.ID != "wl-1" || g.Spec.Quorum != 2 {
		t.Errorf("DecodeLeaseGrant(old grant) = %+v, want its spec and no checkpoint policy", g)
	}
	rebuilt, err := BuildLeaseGrant(testKeys(t, "issuer"), p)
	if err != nil {
		t.Fatal(err)
	}
	if rebuilt.Content != content {
		t.Errorf("BuildLeaseGrant without a policy writes\n%s\nwant the old content\n%s", rebuilt.Content, content)
	}
}

func TestLeaseGrantCheckpointPolicyRejects(t *testing.T) {
	issuer := testKeys(t, "issuer")
	valid, err := BuildLeaseGrant(issuer, ckptGrant(t, &lease.CheckpointPolicy{Servers: []string{"https://b1.example"}}))
	if err != nil {
		t.Fatal(err)
	}
	many := make([]string, 17)
	for i := range many {
		many[i] = "https://b" + string(rune('a'+i)) + ".example"
	}
	for _, tc := range []struct {
		name string
		cp   any
		want string
	}{
		{"17 servers", map[string]any{"servers": many}, "17 servers, want 0 to 16"},
		{"ws server", map[string]any{"servers": []string{"wss://b.example"}}, `servers[0] "wss://b.example"`},
		{"server twice", map[string]any{"servers": []string{"https://b.example", "https://b.example"}}, "listed twice"},
		{"min_servers negative", map[string]any{"servers": []string{"https://b.example"}, "min_servers": -1}, "checkpoint.min_servers = -1"},
		{"min_servers above servers", map[string]any{"servers": []string{"https://b.example"}, "min_servers": 2}, "checkpoint.min_servers = 2, must be 0 (all) to the number of servers (1)"},
		{"restore word", map[string]any{"restore": "always"}, `checkpoint.restore = "always"`},
		{"timeout negative", map[string]any{"restore_timeout_s": -1}, "restore_timeout_s -1"},
		{"timeout over an hour", map[string]any{"restore_timeout_s": 3601}, "restore_timeout_s 3601"},
		{"timeout string", map[string]any{"restore_timeout_s": "60"}, "restore_timeout_s"},
		{"not an object", "yes", "checkpoint"},
		{"key sealed to a non-member", map[string]any{"keys": map[string]string{testKeys(t, "issuer").PublicKey(): "AgAA"}}, "not a member of the lease"},
		{"key member as npub", map[string]any{"keys": map[string]string{"npub1" + strings.Repeat("q", 58): "AgAA"}}, "want 64 lowercase hex characters"},
		{"key member upper-case hex", map[string]any{"keys": map[string]string{strings.ToUpper(testKeys(t, "primary").PublicKey()): "AgAA"}}, "want 64 lowercase hex characters"},
		{"key payload not base64", map[string]any{"keys": map[string]string{testKeys(t, "primary").PublicKey(): "not base64!"}}, "a NIP-44 payload"},
		{"key payload empty", map[string]any{"keys": map[string]string{testKeys(t, "primary").PublicKey(): ""}}, "a NIP-44 payload"},
		{"key payload over 512 bytes", map[string]any{"keys": map[string]string{testKeys(t, "primary").PublicKey(): strings.Repeat("A", 513)}}, "a NIP-44 payload"},
		{"keys not an object", map[string]any{"keys": []string{"AgAA"}}, "checkpoint"},
	} {
		ev := mutate(t, valid, issuer, setField("checkpoint", tc.cp))
		if _, err := DecodeLeaseGrant(ev); ReasonOf(err) != ReasonDecode || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodeLeaseGrant(%s) = %v, want decode error containing %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		cp   lease.CheckpointPolicy
		want string
	}{
		{lease.CheckpointPolicy{RestoreTimeout: 1500 * time.Millisecond}, "restore_timeout 1.5s, want whole seconds"},
		{lease.CheckpointPolicy{RestoreTimeout: 2 * time.Hour}, "checkpoint.restore_timeout = 2h0m0s"},
		{lease.CheckpointPolicy{Restore: "Required"}, `checkpoint.restore = "Required"`},
		{lease.CheckpointPolicy{Servers: []string{"https://b.example#x"}}, "servers[0]"},
	} {
		if _, err := BuildLeaseGrant(issuer, ckptGrant(t, &tc.cp)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("BuildLeaseGrant(%+v) = %v, want an error containing %q", tc.cp, err, tc.want)
		}
	}
	// Unknown fields of the object are ignored; null is no policy.
	ev := mutate(t, valid, issuer, setField("checkpoint", map[string]any{"servers": []string{"https://b.example"}, "encrypt": true}))
	if g, err := DecodeLeaseGrant(ev); err != nil || g.Spec.Checkpoint == nil || g.Spec.Checkpoint.Restore != lease.RestoreBestEffort {
		t.Errorf("DecodeLeaseGrant(unknown field) = %+v, %v, want the policy", g, err)
	}
	ev = mutate(t, valid, issuer, func(ev *nostr.Event) {
		ev.Content = strings.Replace(ev.Content, `"checkpoint":{"servers":["https://b1.example"],"restore":"best-effort"}`, `"checkpoint":null`, 1)
	})
	if g, err := DecodeLeaseGrant(ev); err != nil || g.Spec.Checkpoint != nil {
		t.Errorf("DecodeLeaseGrant(checkpoint null) = %+v, %v, want no policy", g, err)
	}
}

// TestRevocationStateURI: the state_uri is written only when set, decoded
// as written, and at most MaxStateURIBytes either way.
func TestRevocationStateURI(t *testing.T) {
	p, s1 := testKeys(t, "primary"), testKeys(t, "standby")
	uri := "blossom:" + ckptHash("a") + ".json?xs=https://b1.example&as=" + p.PublicKey() + "&sz=412"
	build := func(stateURI string) (*nostr.Event, error) {
		return BuildRevocation(p, RevocationParams{WorkloadID: "wl-1", Standbys: []string{s1.PublicKey()}, At: t0, Epoch: 2, StateURI: stateURI})
	}
	for _, s := range []string{"", uri, strings.Repeat("u", MaxStateURIBytes)} {
		ev, err := build(s)
		if err != nil {
			t.Fatalf("BuildRevocation(state_uri of %d bytes) = %v", len(s), err)
		}
		if has := strings.Contains(ev.Content, `"state_uri"`); has != (s != "") {
			t.Errorf("content %s: state_uri written = %v, want %v", ev.Content, has, s != "")
		}
		r, err := DecodeRevocation(ev)
		if err != nil || r.StateURI != s {
			t.Errorf("DecodeRevocation.StateURI = %q, %v, want %q", r.StateURI, err, s)
		}
	}
	long := strings.Repeat("u", MaxStateURIBytes+1)
	if _, err := build(long); err == nil || !strings.Contains(err.Error(), "state_uri of 1025 bytes, max 1024") {
		t.Errorf("BuildRevocation(1025-byte state_uri) = %v, want an error naming it", err)
	}
	ev, err := build(uri)
	if err != nil {
		t.Fatal(err)
	}
	forged := mutate(t, ev, p, setField("state_uri", long))
	if _, err := DecodeRevocation(forged); ReasonOf(err) != ReasonDecode || !strings.Contains(err.Error(), "state_uri of 1025 bytes") {
		t.Errorf("DecodeRevocation(1025-byte state_uri) = %v, want a decode error naming it", err)
	}
}

// TestNewCheckpointKeyIsANewPolicy: the same grant (same created_at) with
// a checkpoint key sealed anew is a different grant to a machine already
// tracking it (members holding different keys could not read each
// other's checkpoints): refused as ErrAlreadyTracked; the same keys are
// the same grant.
func TestNewCheckpointKeyIsANewPolicy(t *testing.T) {
	cfg := lease.DefaultConfig()
	cfg.Relays, cfg.N, cfg.M = []string{"wss://a.example", "wss://b.example"}, 2, 2
	m, err := lease.New(cfg, testKeys(t, "standby").PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	issuer := testKeys(t, "issuer")
	spec := func(payload string) lease.Spec {
		ev, err := BuildLeaseGrant(issuer, ckptGrant(t, &lease.CheckpointPolicy{Keys: sealedTo(t, payload, "primary", "standby")}))
		if err != nil {
			t.Fatal(err)
		}
		g, err := DecodeLeaseGrant(ev)
		if err != nil {
			t.Fatal(err)
		}
		return SpecOf(g)
	}
	if _, err := m.Track(t0, spec("AgAB")); err != nil {
		t.Fatalf("Track = %v", err)
	}
	if _, err := m.Track(t0, spec("AgAB")); err != nil {
		t.Errorf("Track(the same grant again) = %v, want nil", err)
	}
	if _, err := m.Track(t0, spec("AgAC")); !errors.Is(err, lease.ErrAlreadyTracked) {
		t.Errorf("Track(the grant with a new checkpoint key) = %v, want ErrAlreadyTracked", err)
	}
}
