package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"provideragent/uploader"
)

func TestDefaultMatchesUploader(t *testing.T) {
	if got, want := Default().UploaderConfig(), uploader.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("Default().UploaderConfig() = %+v, want uploader.DefaultConfig() %+v", got, want)
	}
}

// TestUploaderSectionHasEveryKey guards against drift: every key of
// uploader.Config is a key of [uploader], with the same TOML name.
func TestUploaderSectionHasEveryKey(t *testing.T) {
	keys := map[string]bool{}
	st := reflect.TypeOf(UploaderSection{})
	for i := range st.NumField() {
		keys[st.Field(i).Tag.Get("toml")] = true
	}
	ut := reflect.TypeOf(uploader.Config{})
	for i := range ut.NumField() {
		if k := ut.Field(i).Tag.Get("toml"); !keys[k] {
			t.Errorf("UploaderSection lacks uploader.Config's key %q (field %s)", k, ut.Field(i).Name)
		}
	}
	if st.NumField() != ut.NumField() {
		t.Errorf("UploaderSection has %d keys, uploader.Config %d, want the same", st.NumField(), ut.NumField())
	}
}

func TestUploaderConfigMapsEveryField(t *testing.T) {
	c, err := Parse([]byte(`
[lease]
relays = ["wss://a.example", "wss://b.example"]
[uploader]
servers = ["http://127.0.0.1:1", "https://blossom.example/"]
tile_size = 4096
disable_retry = true
max_in_call_retries = 7
max_per_tile_attempts = 9
backoff_base = "1500ms"
backoff_cap = "90s"
concurrency = 16
min_replicas = 2
request_timeout = "12s"
auth_ttl = "2m"
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
	want := uploader.Config{
		Servers:            []string{"http://127.0.0.1:1", "https://blossom.example/"},
		DisableRetry:       true,
		MaxInCallRetries:   7,
		MaxPerTileAttempts: 9,
		BackoffBase:        1.5,
		BackoffCap:         90 * time.Second,
		Concurrency:        16,
		MinReplicas:        2,
		TileSize:           4096,
		RequestTimeout:     12 * time.Second,
		AuthTTL:            2 * time.Minute,
	}
	got := c.UploaderConfig()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("UploaderConfig() = %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("UploaderConfig().Validate() = %v, want nil", err)
	}
	// The copy does not share the section's slice.
	got.Servers[0] = "http://changed"
	if c.Uploader.Servers[0] != "http://127.0.0.1:1" {
		t.Errorf("UploaderConfig() shares Servers with the section")
	}
}

func TestUploaderEnvOverride(t *testing.T) {
	c := valid()
	env := []string{
		"PROVIDER_AGENT_UPLOADER_CONCURRENCY=8",
		"PROVIDER_AGENT_UPLOADER_MIN_REPLICAS=2",
		"PROVIDER_AGENT_UPLOADER_REQUEST_TIMEOUT=5s",
		"PROVIDER_AGENT_UPLOADER_AUTH_TTL=10m",
		"PROVIDER_AGENT_UPLOADER_SERVERS=http://a.example,http://b.example",
	}
	if err := c.ApplyEnv(env); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
	uc := c.UploaderConfig()
	if uc.Concurrency != 8 || uc.MinReplicas != 2 || uc.RequestTimeout != 5*time.Second || uc.AuthTTL != 10*time.Minute || len(uc.Servers) != 2 {
		t.Errorf("UploaderConfig() after ApplyEnv(%q) = %+v, want the overrides", env, uc)
	}
}

func TestValidateUploaderSection(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string // substring of the error; "" = valid
	}{
		{"concurrency zero", func(c *Config) { c.Uploader.Concurrency = 0 }, "uploader.concurrency = 0: want 1..256"},
		{"concurrency too high", func(c *Config) { c.Uploader.Concurrency = 257 }, "uploader.concurrency = 257"},
		{"concurrency max ok", func(c *Config) { c.Uploader.Concurrency = 256 }, ""},
		{"min replicas zero", func(c *Config) { c.Uploader.MinReplicas = 0 }, "uploader.min_replicas = 0"},
		{"min replicas above servers", func(c *Config) {
			c.Uploader.Servers = []string{"http://a.example"}
			c.Uploader.MinReplicas = 2
		}, "uploader.min_replicas = 2: want <= the 1 configured servers"},
		{"min replicas equal servers ok", func(c *Config) {
			c.Uploader.Servers = []string{"http://a.example", "http://b.example"}
			c.Uploader.MinReplicas = 2
		}, ""},
		{"request timeout zero", func(c *Config) { c.Uploader.RequestTimeout = 0 }, "uploader.request_timeout = 0s: want > 0"},
		{"auth ttl below 1s", func(c *Config) { c.Uploader.AuthTTL = 500 * time.Millisecond }, "uploader.auth_ttl = 500ms: want >= 1s"},
		{"backoff base below 1s", func(c *Config) { c.Uploader.BackoffBase = 500 * time.Millisecond }, "uploader.backoff_base = 500ms: must be >= 1s"},
		{"server with query", func(c *Config) { c.Uploader.Servers = []string{"http://a.example/?x=1"} }, `uploader.servers[0] = "http://a.example/?x=1"`},
		{"in-call retries above 100", func(c *Config) { c.Uploader.MaxInCallRetries = 101 }, "uploader.max_in_call_retries = 101"},
		{"tile size above max", func(c *Config) { c.Uploader.TileSize = uploader.MaxTileSize + 1 }, "uploader.tile_size"},
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
			case tc.want != "" && strings.Contains(err.Error(), uploader.ErrBadConfig.Error()):
				t.Fatalf("Validate() = %q, want the config's own wording without the uploader's sentinel text", err)
			}
		})
	}
}
