package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"provideragent/agent"
	"provideragent/backend"
	"provideragent/checkpoint"
	"provideragent/lease"
)

// valid returns a config that validates: the defaults plus three relays.
func valid() Config {
	c := Default()
	c.Lease.Relays = []string{"wss://a.example", "wss://b.example", "ws://127.0.0.1:7777"}
	return c
}

func TestDefaultPlusRelaysValidates(t *testing.T) {
	c := valid()
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate(defaults + relays) = %v, want nil", err)
	}
	if c.Agent.Listen != "127.0.0.1:9464" {
		t.Errorf("default agent.listen = %q, want loopback 127.0.0.1:9464", c.Agent.Listen)
	}
	if got, want := c.DBPath(), filepath.Join("provider-agent-data", "provider-agent.db"); got != want {
		t.Errorf("DBPath() = %q, want %q", got, want)
	}
	if got, want := c.KeyFilePath(), filepath.Join("provider-agent-data", "identity.key"); got != want {
		t.Errorf("KeyFilePath() = %q, want %q", got, want)
	}
	if got, want := c.BackendLogDir(), filepath.Join("provider-agent-data", "logs"); got != want {
		t.Errorf("BackendLogDir() = %q, want %q", got, want)
	}
}

func TestDefaultMatchesLease(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate(Default()) = %v, want nil", err)
	}
	if got, want := c.LeaseConfig(), lease.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("Default().LeaseConfig() = %+v, want lease.DefaultConfig() %+v", got, want)
	}
}

func TestLeaseConfigMapsEveryField(t *testing.T) {
	c := valid()
	c.Lease.Quorum = 3
	c.Lease.EvictWithoutStandby = true
	c.Lease.T1 = 7 * time.Minute
	c.Lease.TakeoverAfter = time.Hour
	c.Heartbeat.Interval = 11 * time.Second
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	lc := c.LeaseConfig()
	if lc.M != 3 || lc.N != 3 || !lc.EvictWithoutStandby || lc.T1 != 7*time.Minute || lc.TakeoverAfter != time.Hour ||
		lc.HeartbeatInterval != 11*time.Second || !reflect.DeepEqual(lc.Relays, c.Lease.Relays) {
		t.Errorf("LeaseConfig() = %+v, want the [lease] and [heartbeat] values", lc)
	}
	if err := lc.Validate(); err != nil {
		t.Errorf("LeaseConfig().Validate() = %v, want nil", err)
	}
}

func TestExampleParsesAndValidates(t *testing.T) {
	c, err := Parse([]byte(Example()))
	if err != nil {
		t.Fatalf("Parse(Example()) = %v, want nil", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate(Example()) = %v, want nil", err)
	}
	// Every setting other than relays and quorum shows its default (the
	// empty issuer list may parse as an empty rather than a nil slice).
	d := Default()
	c.Lease.Relays, d.Lease.Relays = nil, nil
	c.Lease.Quorum = d.Lease.Quorum
	c.Agent.TrustedIssuers, d.Agent.TrustedIssuers = nil, nil
	c.Uploader.Servers, d.Uploader.Servers = nil, nil
	if !reflect.DeepEqual(c, d) {
		t.Errorf("Example() values = %+v, want the defaults %+v", c, d)
	}
}

// TestExampleTrustsNoIssuer: the example config, which operators copy as
// their config, trusts no lease issuer: a trusted key
// whose secret someone else holds could make the node run any command. It
// says how to add one instead.
func TestExampleTrustsNoIssuer(t *testing.T) {
	c, err := Parse([]byte(Example()))
	if err != nil {
		t.Fatalf("Parse(Example()) = %v, want nil", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate(Example()) = %v, want nil", err)
	}
	if len(c.Agent.TrustedIssuers) != 0 {
		t.Errorf("Example() agent.trusted_issuers = %q, want none", c.Agent.TrustedIssuers)
	}
	for _, line := range strings.Split(Example(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if strings.Contains(line, "npub1") || hexKeyRE.MatchString(line) {
			t.Errorf("Example() line %q names a key outside a comment, want none", line)
		}
	}
	if !strings.Contains(Example(), "# trusted_issuers = [\"npub1") {
		t.Errorf("Example() lacks a commented trusted_issuers line showing how to add a key")
	}
}

// hexKeyRE matches a 64-character hex string (a public key).
var hexKeyRE = regexp.MustCompile(`\b[0-9a-fA-F]{64}\b`)

func TestExampleMentionsEveryKey(t *testing.T) {
	var c Config
	md, err := toml.Decode(Example(), &c)
	if err != nil {
		t.Fatal(err)
	}
	walkFields(&c, func(section, key string, _ reflect.Value) {
		if !md.IsDefined(section, key) {
			t.Errorf("Example() lacks %s.%s, want every setting documented", section, key)
		}
	})
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(c *Config)
		want   string // substring of the error; "" = valid
	}{
		{"ok", func(c *Config) {}, ""},
		{"quorum above relays", func(c *Config) { c.Lease.Quorum = 4 },
			"config: lease.quorum = 4: must be <= number of relays (3)"},
		{"quorum zero", func(c *Config) { c.Lease.Quorum = 0 }, "lease.quorum = 0: must be >= 1"},
		{"no relays", func(c *Config) { c.Lease.Relays = nil }, "lease.relays = []: at least one relay"},
		{"http relay", func(c *Config) { c.Lease.Relays[1] = "https://b.example" },
			`lease.relays[1] = "https://b.example": want a ws:// or wss:// URL`},
		{"relay without host", func(c *Config) { c.Lease.Relays[0] = "wss://" }, `lease.relays[0] = "wss://": URL has no host`},
		{"duplicate relay", func(c *Config) { c.Lease.Relays[1] = "WSS://A.example/" }, "lease.relays[1]"},
		{"bad issuer", func(c *Config) { c.Agent.TrustedIssuers = []string{"nope"} }, `agent.trusted_issuers[0] = "nope"`},
		{"bad listen", func(c *Config) { c.Agent.Listen = "localhost" }, `agent.listen = "localhost": want host:port`},
		{"listen off", func(c *Config) { c.Agent.Listen = "" }, ""},
		{"empty data dir", func(c *Config) { c.Agent.DataDir = "" }, "agent.data_dir"},
		{"negative t1", func(c *Config) { c.Lease.T1 = -time.Second }, "lease.t1 = -1s: must be > 0"},
		{"zero stale", func(c *Config) { c.Lease.Stale = 0 }, "lease.stale = 0s: must be > 0"},
		{"zero skew ok", func(c *Config) { c.Lease.MaxSkew = 0 }, ""},
		{"takeover too short", func(c *Config) { c.Lease.TakeoverAfter = 640 * time.Second },
			"lease.takeover_after = 10m40s: must exceed the holder's self-fencing time plus relay delay and one second, t1+t2+stale+max_skew+relay_delay+1s (10m41s)"},
		{"provision above t1+t2", func(c *Config) { c.Lease.ProvisionTimeout = 421 * time.Second }, "lease.provision_timeout = 7m1s: must be <= t1+t2 (7m0s)"},
		{"claim retry max below base", func(c *Config) { c.Lease.ClaimRetryMax = time.Second }, "lease.claim_retry_max = 1s"},
		{"claim timeout", func(c *Config) { c.Lease.ClaimTimeout = 0 }, "lease.claim_timeout = 0s: must be > 0"},
		{"negative restart attempts", func(c *Config) { c.Lease.RestartMaxAttempts = -1 }, "lease.restart_max_attempts = -1: must be 0 to 1000"},
		{"zero restart attempts ok", func(c *Config) { c.Lease.RestartMaxAttempts = 0 }, ""},
		{"too many relays", func(c *Config) {
			c.Lease.Relays = nil
			for i := 0; i < 33; i++ {
				c.Lease.Relays = append(c.Lease.Relays, fmt.Sprintf("wss://r%d.example", i))
			}
		}, "lease.relays = [33 relays]: at most 32 relays"},
		{"backoff max below initial", func(c *Config) { c.Lease.RestartBackoffMax = time.Millisecond }, "lease.restart_backoff_max = 1ms"},
		{"heartbeat above half of stale", func(c *Config) { c.Heartbeat.Interval = 91 * time.Second },
			"heartbeat.interval = 1m31s: must be at most half of lease.stale (3m0s)"},
		{"heartbeat ttl zero", func(c *Config) { c.Heartbeat.TTL = 0 }, "heartbeat.ttl = 0s: must be > 0"},
		{"heartbeat ttl below live window", func(c *Config) { c.Heartbeat.TTL = 299 * time.Second },
			"heartbeat.ttl = 4m59s: must be at least 5m0s: Paygress's live window (5m0s)"},
		{"heartbeat ttl a week", func(c *Config) { c.Heartbeat.TTL = 168 * time.Hour }, ""},
		{"heartbeat ttl below stale + max_skew", func(c *Config) {
			c.Lease.Stale, c.Lease.TakeoverAfter, c.Heartbeat.TTL = 300*time.Second, 900*time.Second, 300*time.Second
		}, "heartbeat.ttl = 5m0s: must be at least 5m30s: Paygress's live window (5m0s) and lease.stale + lease.max_skew (5m30s)"},
		{"heartbeat ttl equal to stale + max_skew", func(c *Config) {
			c.Lease.Stale, c.Lease.TakeoverAfter, c.Heartbeat.TTL = 300*time.Second, 900*time.Second, 330*time.Second
		}, ""},
		{"backend kind", func(c *Config) { c.Backend.Kind = "docker" }, `backend.kind = "docker"`},
		{"backend kind podman", func(c *Config) { c.Backend.Kind = "podman" }, ""},
		{"podman without a PID namespace", func(c *Config) { c.Backend.Kind, c.Backend.Containment = "podman", "cgroup" },
			`backend.containment = "cgroup": want auto or pidns with backend.kind = podman`},
		{"isolation", func(c *Config) { c.Backend.Isolation = "chroot" }, `backend.isolation = "chroot": want user or none`},
		{"isolation none", func(c *Config) { c.Backend.Isolation = "none" }, ""},
		{"workload uids", func(c *Config) { c.Backend.WorkloadUIDs = "10-5" }, `backend.workload_uids = "10-5"`},
		{"workload uids system", func(c *Config) { c.Backend.WorkloadUIDs = "0-65535" }, `backend.workload_uids = "0-65535"`},
		{"workload user", func(c *Config) { c.Backend.WorkloadUser = "a b" }, `backend.workload_user = "a b"`},
		{"stop grace", func(c *Config) { c.Backend.StopGrace = 0 }, "backend.stop_grace = 0s"},
		{"courier attempts", func(c *Config) { c.Courier.MaxAttempts = 0 }, "courier.max_attempts = 0"},
		{"courier cap", func(c *Config) { c.Courier.BackoffCap = time.Millisecond }, "courier.backoff_cap = 1ms"},
		{"uploader server", func(c *Config) { c.Uploader.Servers = []string{"ftp://x"} }, `uploader.servers[0] = "ftp://x"`},
		{"tile size", func(c *Config) { c.Uploader.TileSize = 0 }, "uploader.tile_size = 0"},
		{"tile attempts", func(c *Config) { c.Uploader.MaxPerTileAttempts = 0 }, "uploader.max_per_tile_attempts = 0"},
		{"in-call retries", func(c *Config) { c.Uploader.MaxInCallRetries = -2 }, "uploader.max_in_call_retries = -2"},
		{"uploader cap", func(c *Config) { c.Uploader.BackoffCap = time.Second }, "uploader.backoff_cap = 1s"},
		{"tick interval zero", func(c *Config) { c.Agent.TickInterval = 0 }, "agent.tick_interval = 0s: must be > 0"},
		{"tick interval above stale", func(c *Config) { c.Agent.TickInterval = 4 * time.Minute }, "agent.tick_interval = 4m0s: must be at most lease.stale (3m0s)"},
		{"publish timeout", func(c *Config) { c.Agent.PublishTimeout = -time.Second }, "agent.publish_timeout = -1s: must be > 0"},
		{"memory limit negative", func(c *Config) { c.Agent.MemoryLimitMiB = -1 }, "agent.memory_limit_mib = -1: must be 0 (no limit) to 1048576"},
		{"memory limit too large", func(c *Config) { c.Agent.MemoryLimitMiB = MaxMemoryLimitMiB + 1 }, "agent.memory_limit_mib = 1048577: must be 0 (no limit) to 1048576"},
		{"max step age below tick", func(c *Config) { c.Agent.MaxStepAge = 100 * time.Millisecond }, "agent.max_step_age = 100ms: must exceed agent.tick_interval (250ms)"},
		{"dial addr ok", func(c *Config) { c.Lease.DialAddrs = map[string]string{"WSS://A.example/": "ws://127.0.0.1:7000"} }, ""},
		{"dial addr for unknown relay", func(c *Config) { c.Lease.DialAddrs = map[string]string{"wss://c.example": "ws://127.0.0.1:7000"} },
			`lease.dial_addrs["wss://c.example"] = "ws://127.0.0.1:7000": key is not one of lease.relays`},
		{"dial addr not a websocket", func(c *Config) { c.Lease.DialAddrs = map[string]string{"wss://a.example": "http://127.0.0.1:7000"} },
			`lease.dial_addrs["wss://a.example"] = "http://127.0.0.1:7000": want a ws:// or wss:// URL`},
		{"dial addr mapped twice", func(c *Config) {
			c.Lease.DialAddrs = map[string]string{"wss://a.example": "ws://127.0.0.1:1", "wss://A.example/": "ws://127.0.0.1:2"}
		}, "relay mapped twice"},
		{"checkpoint poll interval", func(c *Config) { c.Checkpoint.PollInterval = 5 * time.Millisecond }, "checkpoint.poll_interval = 5ms: must be 10ms to 1m"},
		{"checkpoint poll interval above a minute", func(c *Config) { c.Checkpoint.PollInterval = 2 * time.Minute }, "checkpoint.poll_interval = 2m0s: must be 10ms to 1m"},
		{"checkpoint max mib zero", func(c *Config) { c.Checkpoint.MaxMiB = 0 }, "checkpoint.max_mib = 0: must be 1 to 65536"},
		{"checkpoint max mib above 64 GiB", func(c *Config) { c.Checkpoint.MaxMiB = 65537 }, "checkpoint.max_mib = 65537: must be 1 to 65536"},
		{"checkpoint publish timeout", func(c *Config) { c.Checkpoint.PublishTimeout = 0 }, "checkpoint.publish_timeout = 0s: must be 1s to 1h"},
		{"checkpoint move timeout", func(c *Config) { c.Checkpoint.MoveTimeout = 2 * time.Hour }, "checkpoint.move_timeout = 2h0m0s: must be 1s to 1h"},
		{"checkpoint bounds ok", func(c *Config) {
			c.Checkpoint = CheckpointSection{PollInterval: 10 * time.Millisecond, MaxMiB: 65536, PublishTimeout: time.Hour, MoveTimeout: time.Second}
		}, ""},
		{"log level", func(c *Config) { c.Log.Level = "verbose" }, `log.level = "verbose"`},
		{"log format", func(c *Config) { c.Log.Format = "xml" }, `log.format = "xml"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.mutate(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate() = %v, want error containing %q", err, tc.want)
			case tc.want != "" && !errors.Is(err, ErrInvalid):
				t.Fatalf("Validate() = %v, want errors.Is ErrInvalid", err)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Fatalf("Validate() = %q, want one line", err)
			}
		})
	}
}

func TestValidateNormalises(t *testing.T) {
	c := valid()
	c.Lease.Relays = []string{"WSS://Relay.Example.COM/", " ws://127.0.0.1:7000/path/ "}
	c.Lease.Quorum = 1
	c.Agent.TrustedIssuers = []string{"npub1flwvqsh5vyveclsd5guhk626q2tk6cmgn4w3ef9d8euhw0qtnflq3cp0yj"}
	c.Lease.DialAddrs = map[string]string{"wss://relay.example.com:443/": "ws://127.0.0.1:9000"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []string{"wss://relay.example.com", "ws://127.0.0.1:7000/path"}
	if !reflect.DeepEqual(c.Lease.Relays, want) {
		t.Errorf("Validate() relays = %q, want %q", c.Lease.Relays, want)
	}
	if got, want := c.Lease.DialAddrs, map[string]string{"wss://relay.example.com": "ws://127.0.0.1:9000"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Validate() dial_addrs = %q, want %q", got, want)
	}
	if got := c.Agent.TrustedIssuers[0]; got != "4fdcc042f461199c7e0da2397b695a02976d63689d5d1ca4ad3e79773c0b9a7e" {
		t.Errorf("Validate() issuer = %q, want hex", got)
	}
}

func TestNormalizeRelayURL(t *testing.T) {
	cases := []struct {
		in, want string
		ok       bool
	}{
		{"wss://relay.example.com", "wss://relay.example.com", true},
		{"wss://Relay.Example.com/", "wss://relay.example.com", true},
		{"ws://localhost:7777", "ws://localhost:7777", true},
		{"wss://relay.example.com:443/", "wss://relay.example.com", true},
		{"ws://[::1]:7777", "ws://[::1]:7777", true},
		{"wss://relay.example.com/nostr?x=1", "wss://relay.example.com/nostr?x=1", true},
		{"https://relay.example.com", "", false},
		{"relay.example.com", "", false},
		{"wss://", "", false},
		{"wss://user:pw@relay.example.com", "", false},
		{"wss://relay.example.com#frag", "", false},
		{"wss://relay.example.com:99999", "", false},
		{"wss://relay.example.com:0", "", false},
		{"", "", false},
		{"wss://a b", "", false},
	}
	for _, tc := range cases {
		got, err := NormalizeRelayURL(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("NormalizeRelayURL(%q) = %q, %v, want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseRejects(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"unknown key", "[lease]\nquorom = 2\n", "unknown key lease.quorom"},
		{"unknown section", "[leases]\nquorum = 2\n", "unknown key leases"},
		{"duration as number", "[lease]\nt1 = 30\n", `lease.t1: want a duration string such as "30s", got integer`},
		{"bad duration", "[lease]\nt1 = \"thirty\"\n", "thirty"},
		{"wrong type", "[lease]\nquorum = \"two\"\n", "quorum"},
		{"syntax", "[lease\n", "config:"},
	}
	for _, tc := range cases {
		_, err := Parse([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%s) = %v, want ErrInvalid containing %q", tc.name, err, tc.want)
		}
	}
}

func TestParseOverlaysDefaults(t *testing.T) {
	c, err := Parse([]byte("[lease]\nrelays = [\"wss://x.example\"]\nquorum = 1\nt1 = \"45s\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Lease.T1 != 45*time.Second || c.Lease.T2 != Default().Lease.T2 || c.Lease.Quorum != 1 {
		t.Errorf("Parse() lease = %+v, want t1=45s, other defaults kept", c.Lease)
	}
}

func TestParseDialAddrs(t *testing.T) {
	c, err := Parse([]byte("[lease]\nrelays = [\"wss://x.example\"]\nquorum = 1\ndial_addrs = {\"wss://x.example\" = \"ws://127.0.0.1:7000\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
	if got, want := c.Lease.DialAddrs, map[string]string{"wss://x.example": "ws://127.0.0.1:7000"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Parse() dial_addrs = %q, want %q", got, want)
	}
	if _, err := Parse([]byte("[lease]\ndial_addrs = {\"wss://x.example\" = 7}\n")); err == nil || !errors.Is(err, ErrInvalid) {
		t.Errorf("Parse(dial_addrs value 7) = %v, want ErrInvalid", err)
	}
}

func TestLoad(t *testing.T) {
	c, err := Load("")
	if err != nil || !reflect.DeepEqual(c, Default()) {
		t.Fatalf("Load(\"\") = %+v, %v, want defaults", c, err)
	}
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.toml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want ErrNotExist", err)
	}
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[agent]\nlisten_addr = \"x\"\n"), 0o644)
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "agent.listen_addr") {
		t.Errorf("Load(bad) = %v, want error naming the file and the key", err)
	}
}

func TestApplyEnv(t *testing.T) {
	c := Default()
	err := c.ApplyEnv([]string{
		"PROVIDER_AGENT_LEASE_RELAYS=wss://a.example, wss://b.example",
		"PROVIDER_AGENT_LEASE_QUORUM=1",
		"PROVIDER_AGENT_LEASE_MAX_SKEW=3s",
		"PROVIDER_AGENT_LEASE_EVICT_WITHOUT_STANDBY=true",
		"PROVIDER_AGENT_AGENT_LISTEN=127.0.0.1:1",
		"PROVIDER_AGENT_AGENT_TICK_INTERVAL=100ms",
		"PROVIDER_AGENT_LEASE_DIAL_ADDRS=wss://a.example=ws://127.0.0.1:1, wss://b.example=ws://127.0.0.1:2",
		"PROVIDER_AGENT_CONFIG=/nowhere.toml",
		"PROVIDER_AGENT_RELAYD_BIN=/other/tool",
		"HOME=/root",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Lease.Relays, []string{"wss://a.example", "wss://b.example"}) || c.Lease.Quorum != 1 ||
		c.Lease.MaxSkew != 3*time.Second || !c.Lease.EvictWithoutStandby || c.Agent.Listen != "127.0.0.1:1" ||
		c.Agent.TickInterval != 100*time.Millisecond ||
		!reflect.DeepEqual(c.Lease.DialAddrs, map[string]string{"wss://a.example": "ws://127.0.0.1:1", "wss://b.example": "ws://127.0.0.1:2"}) {
		t.Errorf("ApplyEnv() = %+v, want overrides applied", c)
	}
	for _, kv := range []string{
		"PROVIDER_AGENT_LEASE_QUORUMM=1",
		"PROVIDER_AGENT_LEASE_QUORUM=two",
		"PROVIDER_AGENT_LEASE_T1=30",
		"PROVIDER_AGENT_UPLOADER_DISABLE_RETRY=maybe",
		"PROVIDER_AGENT_LEASE_DIAL_ADDRS=wss://a.example",
	} {
		c := Default()
		name, _, _ := strings.Cut(kv, "=")
		if err := c.ApplyEnv([]string{kv}); err == nil || !strings.Contains(err.Error(), name) || !errors.Is(err, ErrInvalid) {
			t.Errorf("ApplyEnv(%s) = %v, want ErrInvalid naming %s", kv, err, name)
		}
	}
}

func TestFlagsResolvePrecedence(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.toml")
	os.WriteFile(path, []byte(`[agent]
data_dir = "from-file"
listen = "127.0.0.1:1000"
[lease]
relays = ["wss://file1.example", "wss://file2.example"]
quorum = 2
`), 0o644)
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f := BindFlags(fs)
	err := fs.Parse([]string{"--config", path, "--relay", "wss://flag1.example", "--relay", "wss://flag2.example,wss://flag3.example", "--quorum", "3", "--key-file", "/k"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Resolve([]string{"PROVIDER_AGENT_AGENT_LISTEN=127.0.0.1:2000", "PROVIDER_AGENT_LEASE_QUORUM=1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent.DataDir != "from-file" || c.Agent.Listen != "127.0.0.1:2000" || c.Lease.Quorum != 3 ||
		len(c.Lease.Relays) != 3 || c.Lease.Relays[2] != "wss://flag3.example" || c.Agent.KeyFile != "/k" {
		t.Errorf("Resolve() = %+v, want file < env < flags", c)
	}

	// PROVIDER_AGENT_CONFIG names the file when --config is absent; a bad
	// override fails validation with the field named.
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	f = BindFlags(fs)
	if err := fs.Parse([]string{"--quorum", "5"}); err != nil {
		t.Fatal(err)
	}
	_, err = f.Resolve([]string{EnvConfigPath + "=" + path})
	if err == nil || err.Error() != "config: lease.quorum = 5: must be <= number of relays (2)" {
		t.Errorf("Resolve(--quorum 5) = %v, want the lease.quorum error", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(Example()))
	f.Add([]byte("[lease]\nt1 = 30\n"))
	f.Add([]byte("[lease]\nrelays = [\"wss://x\"]\nquorum = 1\n"))
	f.Add([]byte("[[lease]]\n"))
	f.Add([]byte("agent = 1\n"))
	f.Add([]byte{0xff, 0x00, '['})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse() = %v, want ErrInvalid", err)
			}
			return
		}
		if err := c.Validate(); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("Validate() = %v, want ErrInvalid", err)
		}
	})
}

// TestDefaultsAreTheAgents: the file's defaults come from agent.DefaultConfig
// (one owner per default), so mapping them back changes nothing.
func TestDefaultsAreTheAgents(t *testing.T) {
	got, want := Default().AgentConfig(""), agent.DefaultConfig()
	if got.Listen != want.Listen || got.TickInterval != want.TickInterval || got.PublishTimeout != want.PublishTimeout ||
		got.MaxStepAge != want.MaxStepAge || got.RestartMaxAttempts != want.RestartMaxAttempts {
		t.Errorf("Default().AgentConfig() = listen %q tick %v publish %v step age %v restarts %d, want agent.DefaultConfig's %q %v %v %v %d",
			got.Listen, got.TickInterval, got.PublishTimeout, got.MaxStepAge, got.RestartMaxAttempts,
			want.Listen, want.TickInterval, want.PublishTimeout, want.MaxStepAge, want.RestartMaxAttempts)
	}
	if got.Courier != want.Courier {
		t.Errorf("Default().AgentConfig().Courier = %+v, want agent.DefaultConfig's %+v", got.Courier, want.Courier)
	}
	if g, w := Default().Backend.StopGrace, backend.DefaultProcessConfig().StopGrace; g != w {
		t.Errorf("Default().Backend.StopGrace = %v, want backend.DefaultProcessConfig's %v", g, w)
	}
}

// TestCLIRelaysAndOutboxAreTheAgents: the relay pool and the outbox a CLI
// command builds from the file (RelayConfig, CourierConfig) are the
// running agent's: the [agent] publish_timeout, the lease's relays and
// dial_addrs, the agent's reconnect cap, and the [courier] section.
func TestCLIRelaysAndOutboxAreTheAgents(t *testing.T) {
	c, err := Parse([]byte("[agent]\npublish_timeout = \"7s\"\n[lease]\nrelays = [\"wss://x.example\"]\nquorum = 1\n" +
		"dial_addrs = {\"wss://x.example\" = \"ws://127.0.0.1:7000\"}\n[courier]\nmax_attempts = 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	rc := c.AgentConfig("").RelayConfig()
	if rc.PublishTimeout != 7*time.Second || rc.BackoffMax != agent.RelayBackoffMax ||
		!reflect.DeepEqual(rc.URLs, []string{"wss://x.example"}) || rc.DialAddrs["wss://x.example"] != "ws://127.0.0.1:7000" {
		t.Errorf("RelayConfig() = publish %v backoff cap %v urls %q dial %q, want 7s, %v, the lease's relay and its dial address",
			rc.PublishTimeout, rc.BackoffMax, rc.URLs, rc.DialAddrs, agent.RelayBackoffMax)
	}
	if cc := c.CourierConfig(); cc != c.AgentConfig("").Courier || cc.MaxAttempts != 3 {
		t.Errorf("CourierConfig() = %+v, want the agent's outbox config with max_attempts 3", cc)
	}
}

// TestCheckpointSectionReachesTheAgent: the [checkpoint] keys (from the
// file, or the environment) are what the agent's durable workloads run
// with; the defaults are the packages' own.
func TestCheckpointSectionReachesTheAgent(t *testing.T) {
	d := Default().CheckpointDeps()
	if d.PollInterval != checkpoint.DefaultPollInterval || d.MaxBytes != checkpoint.DefaultMaxBytes ||
		d.PublishTimeout != agent.DefaultCheckpointPublishTimeout || d.MoveTimeout != agent.DefaultMoveTimeout {
		t.Errorf("Default().CheckpointDeps() = poll %v, max %d, publish %v, move %v; want the packages' defaults", d.PollInterval, d.MaxBytes, d.PublishTimeout, d.MoveTimeout)
	}
	c, err := Parse([]byte("[lease]\nrelays = [\"wss://x.example\"]\nquorum = 1\n[uploader]\nservers = [\"http://127.0.0.1:7448\"]\n" +
		"[checkpoint]\npoll_interval = \"100ms\"\nmax_mib = 64\npublish_timeout = \"45s\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyEnv([]string{"PROVIDER_AGENT_CHECKPOINT_MOVE_TIMEOUT=2m"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	d = c.CheckpointDeps()
	if d.PollInterval != 100*time.Millisecond || d.MaxBytes != 64<<20 || d.PublishTimeout != 45*time.Second || d.MoveTimeout != 2*time.Minute ||
		!reflect.DeepEqual(d.Servers, []string{"http://127.0.0.1:7448"}) || d.Uploader.Servers[0] != "http://127.0.0.1:7448" {
		t.Errorf("CheckpointDeps() = %+v, want the file's and the environment's settings", d)
	}
}
