package lease

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func roundTrip(t testing.TB, snap Snapshot) Snapshot {
	t.Helper()
	b, err := json.Marshal(snap)
	if err != nil {
		t.Fatalf("json.Marshal(snapshot) = %v", err)
	}
	var out Snapshot
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("json.Unmarshal(snapshot) = %v", err)
	}
	return out
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string // substring of the error; empty: valid
	}{
		{"default", func(*Config) {}, ""},
		{"m zero", func(c *Config) { c.M = 0 }, "lease.quorum = 0: must be >= 1"},
		{"m above n", func(c *Config) { c.M = 4 }, "lease.quorum = 4: must be <= number of relays (3)"},
		{"too many relays", func(c *Config) {
			c.N = MaxRelays + 1
			for len(c.Relays) < c.N {
				c.Relays = append(c.Relays, fmt.Sprintf("wss://x%d.test", len(c.Relays)))
			}
		}, "lease.relays = [33 relays]: at most 32 relays"},
		{"no relays", func(c *Config) { c.Relays, c.N = nil, 0 }, "lease.relays = []: at least one relay"},
		{"relay count", func(c *Config) { c.Relays = c.Relays[:2] }, "lease.relays = [2 relays]: n = 3"},
		{"relay scheme", func(c *Config) { c.Relays[1] = "https://x.test" }, `lease.relays[1] = "https://x.test"`},
		{"relay duplicate", func(c *Config) { c.Relays[2] = "WSS://r1.test/" }, `lease.relays[2] = "WSS://r1.test/": duplicate relay`},
		{"t1 zero", func(c *Config) { c.T1 = 0 }, "lease.t1 = 0s: must be > 0"},
		{"negative skew", func(c *Config) { c.MaxSkew = -time.Second }, "lease.max_skew = -1s: must be >= 0"},
		{"zero skew", func(c *Config) { c.MaxSkew = 0 }, ""},
		{"heartbeat interval", func(c *Config) { c.HeartbeatInterval = 0 }, "heartbeat.interval = 0s: must be > 0"},
		{"stale below two heartbeats", func(c *Config) { c.Stale = 119 * time.Second }, "heartbeat.interval = 1m0s: must be at most half of lease.stale (1m59s)"},
		{"provision above t1+t2", func(c *Config) { c.ProvisionTimeout = 421 * time.Second }, "lease.provision_timeout = 7m1s: must be <= t1+t2 (7m0s)"},
		{"takeover at the floor", func(c *Config) { c.TakeoverAfter = 641 * time.Second }, "lease.takeover_after = 10m41s: must exceed the holder's self-fencing time plus relay delay and one second, t1+t2+stale+max_skew+relay_delay+1s (10m41s)"},
		{"takeover just above", func(c *Config) { c.TakeoverAfter = 641*time.Second + time.Millisecond }, ""},
		{"restart max below initial", func(c *Config) { c.RestartMax = time.Second }, "lease.restart_backoff_max = 1s: must be >= lease.restart_backoff_initial (5s)"},
		{"claim max below base", func(c *Config) { c.ClaimRetryMax = time.Second }, "lease.claim_retry_max = 1s: must be >= lease.claim_retry_base (15s)"},
		// Each limit is inclusive: the value at the edge is valid.
		{"stale exactly two heartbeats", func(c *Config) { c.Stale = 2 * c.HeartbeatInterval }, ""},
		{"provision exactly t1+t2", func(c *Config) { c.ProvisionTimeout = c.T1 + c.T2 }, ""},
		{"restart max equal to initial", func(c *Config) { c.RestartMax = c.RestartInitial }, ""},
		{"claim max equal to base", func(c *Config) { c.ClaimRetryMax = c.ClaimRetryBase }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig()
			tt.mod(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate(%s) = %v, want nil", tt.name, err)
				}
				return
			}
			var ce *ConfigError
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) {
				t.Fatalf("Validate(%s) = %v, want a *ConfigError containing %q", tt.name, err, tt.want)
			}
		})
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
}

func TestNormalizeRelayURL(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"wss://relay.example.com", "wss://relay.example.com", true},
		{"WSS://Relay.Example.COM/", "wss://relay.example.com", true},
		{"wss://relay.example.com:443/", "wss://relay.example.com", true},
		{"ws://relay.example.com:80", "ws://relay.example.com", true},
		{"ws://relay.example.com:443", "ws://relay.example.com:443", true}, // only a scheme's own default port is dropped
		{"wss://relay.example.com:80", "wss://relay.example.com:80", true},
		{"ws://relay.example.com:8080", "ws://relay.example.com:8080", true},
		{"wss://relay.example.com:4443/nostr/", "wss://relay.example.com:4443/nostr", true},
		{" wss://relay.example.com#frag", "wss://relay.example.com", true},
		{"wss://[::1]:7777", "wss://[::1]:7777", true},
		{"https://relay.example.com", "", false},
		{"wss://user:pw@relay.example.com", "", false},
		{"wss://", "", false},
		{"", "", false},
		{"::::", "", false},
	}
	for _, tt := range tests {
		got, err := NormalizeRelayURL(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("NormalizeRelayURL(%q) = %q, %v, want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidRelayURL) {
			t.Errorf("NormalizeRelayURL(%q) error %v does not wrap ErrInvalidRelayURL", tt.in, err)
		}
	}
}

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Spec)
		want string
	}{
		{"valid", func(*Spec) {}, ""},
		{"empty id", func(s *Spec) { s.ID = "" }, "id = \"\""},
		{"id with space", func(s *Spec) { s.ID = "a b" }, "printable"},
		{"primary not hex", func(s *Spec) { s.Primary = "npub1xyz" }, "primary"},
		{"standby twice", func(s *Spec) { s.Standbys = append(s.Standbys, s.Standbys[0]) }, "names a provider twice"},
		{"primary as standby", func(s *Spec) { s.Standbys = []string{s.Primary} }, "names a provider twice"},
		{"standbys without warm-standby", func(s *Spec) { s.Replication = ReplicationNone }, "standbys need warm-standby"},
		{"warm-standby without standby", func(s *Spec) { s.Standbys = nil }, "needs at least one standby"},
		{"unknown replication", func(s *Spec) { s.Replication = "hot" }, "replication = \"hot\""},
		{"unknown restart", func(s *Spec) { s.RestartPolicy.Policy = "always" }, "restart_policy.policy"},
		{"negative attempts", func(s *Spec) { s.RestartPolicy.MaxAttempts = -1 }, "max_attempts = -1"},
		{"no attempts", func(s *Spec) { s.RestartPolicy.MaxAttempts = 0 }, ""},
		{"most attempts", func(s *Spec) { s.RestartPolicy.MaxAttempts = MaxRestartAttempts }, ""},
		{"too many attempts", func(s *Spec) { s.RestartPolicy.MaxAttempts = MaxRestartAttempts + 1 }, "max_attempts = 1001"},
		{"longest id", func(s *Spec) { s.ID = strings.Repeat("x", MaxIDBytes) }, ""},
		{"id too long", func(s *Spec) { s.ID = strings.Repeat("x", MaxIDBytes+1) }, "232 bytes"},
		{"id of the printable edges", func(s *Spec) { s.ID = "!~" }, ""},
		{"id with a control byte", func(s *Spec) { s.ID = "a\x7f" }, "printable"},
		{"primary all digits", func(s *Spec) { s.Primary = strings.Repeat("0123456789", 7)[:64] }, ""},
		{"primary of a to f", func(s *Spec) { s.Primary = strings.Repeat("abcdef", 11)[:64] }, ""},
		{"primary with g", func(s *Spec) { s.Primary = "g" + s.Primary[1:] }, "primary"},
		{"primary with upper case", func(s *Spec) { s.Primary = "A" + s.Primary[1:] }, "primary"},
		{"primary with a colon", func(s *Spec) { s.Primary = ":" + s.Primary[1:] }, "primary"},
		{"primary with a slash", func(s *Spec) { s.Primary = "/" + s.Primary[1:] }, "primary"},
		{"primary with a backtick", func(s *Spec) { s.Primary = "`" + s.Primary[1:] }, "primary"},
		{"primary too short", func(s *Spec) { s.Primary = s.Primary[1:] }, "primary"},
		{"quorum of every relay", func(s *Spec) { s.Quorum = MaxRelays }, ""},
		{"quorum above the relays", func(s *Spec) { s.Quorum = MaxRelays + 1 }, "quorum = 33"},
		{"epoch zero", func(s *Spec) { s.Epoch = 0 }, "epoch = 0"},
		{"highest epoch a standby can succeed", func(s *Spec) { s.Epoch = MaxEpoch - 1 }, ""},
		{"epoch without a successor epoch", func(s *Spec) { s.Epoch = MaxEpoch }, "epoch = 4611686018427387904, must be 1 to 2^62-1"},
		{"expiry before creation", func(s *Spec) { s.ExpiresAt = s.CreatedAt.Add(-time.Second) }, "expires_at"},
		{"bad relay", func(s *Spec) { s.Relays = []string{"http://x"} }, "relays[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := warmSpec("w1", "alice", "bob")
			tt.mod(&sp)
			err := sp.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate(%s) = %v, want nil", tt.name, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("Validate(%s) = %v, want error containing %q", tt.name, err, tt.want)
			}
		})
	}
}

func TestTrackRelaySetAndRegrant(t *testing.T) {
	h := newHarness(t, "alice", nil)
	spec := warmSpec("w1", "alice", "bob")
	spec.Relays = []string{"wss://r3.test", "WSS://r1.test/", "wss://r2.test"}
	spec.Quorum = 2
	h.track(0, spec)
	// identical re-grant and an extension are accepted silently.
	h.wantEffects("Track(same)", h.track(s, spec))
	ext := spec
	ext.ExpiresAt = at(time.Hour)
	h.wantEffects("Track(extended)", h.track(2*s, ext))
	changed := spec
	changed.Epoch = 5
	if _, err := h.m.Track(at(3*s), changed); !errors.Is(err, ErrAlreadyTracked) {
		t.Fatalf("Track(changed epoch) = %v, want %v", err, ErrAlreadyTracked)
	}
	other := warmSpec("w2", "alice", "bob")
	other.Relays = []string{"wss://r1.test", "wss://r2.test", "wss://r4.test"}
	if _, err := h.m.Track(at(3*s), other); !errors.Is(err, ErrRelaySetMismatch) {
		t.Fatalf("Track(other relays) = %v, want %v", err, ErrRelaySetMismatch)
	}
	other.Relays, other.Quorum = nil, 3
	if _, err := h.m.Track(at(3*s), other); !errors.Is(err, ErrRelaySetMismatch) {
		t.Fatalf("Track(other quorum) = %v, want %v", err, ErrRelaySetMismatch)
	}
	// expiry stops the workload.
	effs := h.tick(time.Hour)
	h.wantEffects("Tick(expiry)", effs, "entered w1 provisioning -> expired epoch=1", `stop w1 epoch=1 reason="lease expired"`)
}

func TestSnapshotRoundTrip(t *testing.T) {
	h := newHarness(t, "bob", nil)
	h.track(0, warmSpec("w1", "alice", "bob", "carol"))
	h.track(0, warmSpec("w2", "bob", "carol"))
	h.track(0, warmSpec("w3", "carol", "bob"))
	for d := time.Duration(0); d <= 300*s; d += 60 * s {
		h.hb(d, "alice", all3, []WorkloadEpoch{{ID: "w1", Epoch: 1}})
		h.hb(d, "bob", all3, []WorkloadEpoch{{ID: "w2", Epoch: 1}})
		h.tick(d)
	}
	h.hb(300*s, "carol", []int{1}, nil)
	h.m.ObserveClaim(at(301*s), PromotionClaim{Workload: "w3", Claimer: key("dave"), Epoch: 2, Active: true}) // not named: ignored
	h.m.ObserveRevocation(at(302*s), Revocation{Workload: "w1", Signer: key("alice"), Epoch: 1, Successor: key("bob"), QuorumAt: at(302 * s)})
	h.m.ClaimPublished(at(303*s), ClaimAck{Workload: "w1", Epoch: 2, Accepted: 3})

	snap := h.m.Snapshot()
	rt := roundTrip(t, snap)
	if !reflect.DeepEqual(snap, rt) {
		t.Fatalf("JSON round trip changed the snapshot:\n%+v\nwant\n%+v", rt, snap)
	}
	m2, effs, err := Restore(at(303*s), h.m.Config(), rt)
	if err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	h.wantEffects("Restore", effs,
		`stop w1 epoch=1 reason="restart: not held here (promoting)"`,
		`stop w3 epoch=1 reason="restart: not held here (standby)"`,
		"entered w2 live -> syncing epoch=1")
	m2.RelaySynced(at(303*s), "wss://r1.test")
	m2.RelaySynced(at(303*s), "wss://r2.test")
	if got, want := m2.Snapshot(), h.m.Snapshot(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Restore+sync snapshot = \n%+v\nwant\n%+v", got, want)
	}
	if got := m2.Outstanding(); render(got) != "read-claims w1 epoch=2 at=+5m13s" {
		t.Fatalf("Outstanding() = %v", render(got))
	}
	// Every provider's relay-indexed times lie in one array, one slice
	// after the other (one allocation however many providers: a driver
	// saves a snapshot every few seconds).
	var base *time.Time
	off := 0
	for _, p := range snap.Providers {
		for _, ts := range [][]time.Time{p.Seen, p.Created, p.Unlisted, p.Complete} {
			if len(ts) == 0 {
				continue
			}
			if base == nil {
				base = unsafe.SliceData(ts)
			}
			if got, want := unsafe.SliceData(ts), (*time.Time)(unsafe.Add(unsafe.Pointer(base), off*int(unsafe.Sizeof(time.Time{})))); got != want || cap(ts) != len(ts) {
				t.Fatalf("provider %s: times at %p (cap %d), want at %p in the snapshot's one array (cap %d)", p.ID, got, cap(ts), want, len(ts))
			}
			off += len(ts)
		}
	}
	if off == 0 {
		t.Fatalf("snapshot without relay-indexed times")
	}
	bad := rt
	bad.Version = 99
	if _, _, err := Restore(at(303*s), h.m.Config(), bad); !errors.Is(err, ErrInvalidSnapshot) {
		t.Fatalf("Restore(version 99) = %v, want %v", err, ErrInvalidSnapshot)
	}
}

func FuzzRestore(f *testing.F) {
	h := newHarness(&testing.T{}, "bob", nil)
	h.m.Track(at(0), warmSpec("w1", "alice", "bob"))
	h.m.ObserveHeartbeat(at(10*s), Heartbeat{Provider: key("alice"), Relay: "wss://r1.test", CreatedAt: at(10 * s), Listed: true, Workloads: []WorkloadEpoch{{ID: "w1", Epoch: 1}}})
	b, _ := json.Marshal(h.m.Snapshot())
	f.Add(b)
	// a holder whose respawn was issued and not yet reported
	ha := newHarness(&testing.T{}, "alice", nil)
	ha.m.Track(at(0), warmSpec("w1", "alice", "bob"))
	ha.m.ObserveHeartbeat(at(10*s), Heartbeat{Provider: key("alice"), Relay: "wss://r1.test", CreatedAt: at(10 * s), Listed: true, Workloads: []WorkloadEpoch{{ID: "w1", Epoch: 1}}})
	ha.m.ProcessExited(at(20*s), ProcessExit{Workload: "w1", Epoch: 1})
	ha.m.Tick(at(30 * s))
	b, _ = json.Marshal(ha.m.Snapshot())
	f.Add(b)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"self":"` + key("bob") + `","relays":["wss://r1.test","wss://r2.test","wss://r3.test"],"workloads":[{"state":"live"}]}`))
	cfg := testConfig()
	f.Fuzz(func(t *testing.T, data []byte) {
		var snap Snapshot
		if json.Unmarshal(data, &snap) != nil {
			return
		}
		m, _, err := Restore(at(0), cfg, snap)
		if err != nil {
			return
		}
		// a restored machine must survive any input without panicking.
		m.Tick(at(time.Hour))
		m.ObserveHeartbeat(at(time.Hour), Heartbeat{Provider: key("alice"), Relay: "wss://r2.test", CreatedAt: at(time.Hour), Listed: true, Workloads: []WorkloadEpoch{{ID: "w1", Epoch: 7}}})
		m.RelaySynced(at(time.Hour), "wss://r1.test")
		m.Outstanding()
		m.RelaySynced(at(time.Hour), "wss://r2.test")
		m.Outstanding()
		m.RespawnDone(at(time.Hour), RespawnResult{Workload: "w1", Attempt: 1, OK: true})
		m.Tick(at(100 * time.Hour))
		_ = m.Snapshot()
	})
}

func FuzzSpecValidate(f *testing.F) {
	b, _ := json.Marshal(warmSpec("w1", "alice", "bob"))
	f.Add(b)
	f.Add([]byte(`{"id":"x","primary":"` + key("a") + `","replication":"none","restart_policy":{"policy":"never"},"epoch":1}`))
	cfg := testConfig()
	f.Fuzz(func(t *testing.T, data []byte) {
		var sp Spec
		if json.Unmarshal(data, &sp) != nil {
			return
		}
		if sp.Validate() != nil {
			return
		}
		m, err := New(cfg, sp.Primary)
		if err != nil {
			t.Fatalf("New() = %v", err)
		}
		if _, err := m.Track(at(0), sp); err != nil && !errors.Is(err, ErrRelaySetMismatch) {
			t.Fatalf("Track(valid spec) = %v", err)
		}
		m.Tick(at(time.Hour))
	})
}

// TestRegrantRefusesAnyOtherChange: a grant of a tracked workload is
// accepted when it only extends the expiry or changes the state URI; any
// other field changed, an earlier expiry, or an expiry removed is refused
// with ErrAlreadyTracked and leaves the tracked lease as it was.
func TestRegrantRefusesAnyOtherChange(t *testing.T) {
	policy := func() *CheckpointPolicy {
		return &CheckpointPolicy{Servers: []string{"https://b1.test"}, MinServers: 1, Restore: RestoreRequired, RestoreTimeout: time.Minute}
	}
	base := func(durable bool) Spec {
		sp := warmSpec("w1", "alice", "bob", "carol")
		sp.Command = []string{"sleep", "60"}
		sp.ExpiresAt = at(time.Hour)
		if durable {
			sp.Checkpoint = policy()
		}
		return sp
	}
	tests := []struct {
		name    string
		mod     func(*Spec)
		ok      bool
		durable bool // the first grant has a checkpoint policy
	}{
		{"same", func(*Spec) {}, true, false},
		{"later expiry", func(sp *Spec) { sp.ExpiresAt = at(2 * time.Hour) }, true, false},
		{"state uri", func(sp *Spec) { sp.StateURI = "blossom://x" }, true, false},
		{"earlier expiry", func(sp *Spec) { sp.ExpiresAt = at(time.Minute) }, false, false},
		{"expiry removed", func(sp *Spec) { sp.ExpiresAt = time.Time{} }, false, false},
		{"primary", func(sp *Spec) { sp.Primary = key("dave") }, false, false},
		{"standbys", func(sp *Spec) { sp.Standbys = []string{key("carol"), key("bob")} }, false, false},
		{"restart policy", func(sp *Spec) { sp.RestartPolicy.MaxAttempts = 7 }, false, false},
		{"epoch", func(sp *Spec) { sp.Epoch = 2 }, false, false},
		{"command", func(sp *Spec) { sp.Command = []string{"sleep", "61"} }, false, false},
		{"created at", func(sp *Spec) { sp.CreatedAt = t0.Add(s) }, false, false},
		{"relays", func(sp *Spec) { sp.Relays = testRelays(3) }, false, false},
		{"quorum", func(sp *Spec) { sp.Quorum = 2 }, false, false},
		{"same checkpoint policy", func(*Spec) {}, true, true},
		{"checkpoint policy added", func(sp *Spec) { sp.Checkpoint = policy() }, false, false},
		{"checkpoint policy removed", func(sp *Spec) { sp.Checkpoint = nil }, false, true},
		{"checkpoint min servers", func(sp *Spec) { sp.Checkpoint.MinServers = 0 }, false, true},
		{"checkpoint restore mode", func(sp *Spec) { sp.Checkpoint.Restore = RestoreBestEffort }, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, "bob", nil)
			h.track(0, base(tt.durable))
			sp := base(tt.durable)
			tt.mod(&sp)
			effs, err := h.m.Track(at(s), sp)
			if tt.ok {
				if err != nil || len(effs) != 0 {
					t.Fatalf("Track(%s) = %v, %v; want accepted without effects", tt.name, render(effs), err)
				}
				w, _ := h.m.Workload("w1")
				if !w.Spec.ExpiresAt.Equal(sp.ExpiresAt) || w.Spec.StateURI != sp.StateURI {
					t.Fatalf("after Track(%s): expiry %v, state uri %q; want %v, %q", tt.name, w.Spec.ExpiresAt, w.Spec.StateURI, sp.ExpiresAt, sp.StateURI)
				}
				return
			}
			if !errors.Is(err, ErrAlreadyTracked) {
				t.Fatalf("Track(%s) = %v, want %v", tt.name, err, ErrAlreadyTracked)
			}
			if w, _ := h.m.Workload("w1"); !reflect.DeepEqual(w.Spec, base(tt.durable)) {
				t.Fatalf("after the refused Track(%s): spec %+v, want the first grant's", tt.name, w.Spec)
			}
		})
	}
}

// TestRankStaggerCoversTwoRelayDelays: each rank waits ClaimRetryBase plus
// two relay delays (the standbys' views of the holder's last beat, and the
// lower rank's claim on its way), for the takeover and for a retry.
func TestRankStaggerCoversTwoRelayDelays(t *testing.T) {
	c := DefaultConfig()
	if got, want := c.RankStagger(), 35*time.Second; got != want {
		t.Errorf("DefaultConfig().RankStagger() = %v, want %v (claim_retry_base 15s + 2 x relay_delay 10s)", got, want)
	}
	if got, want := c.ClaimBackoff(1, 2)-c.ClaimBackoff(1, 0), 2*c.RankStagger(); got != want {
		t.Errorf("ClaimBackoff(1, 2) - ClaimBackoff(1, 0) = %v, want 2 x RankStagger = %v", got, want)
	}
}
