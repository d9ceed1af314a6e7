package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/agent"
	"provideragent/config"
)

// TestRunRejectsBadConfig: invalid settings stop startup with one line that
// names the field and the value, and exit 78 (EX_CONFIG, which the units'
// RestartPreventExitStatus= names: restarting cannot fix them); other
// failures to start exit 1.
func TestRunRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil { // no data dir mode WARN
		t.Fatal(err)
	}
	relays := []string{"--relay", "ws://127.0.0.1:1", "--relay", "ws://127.0.0.1:2", "--relay", "ws://127.0.0.1:3"}
	badTOML := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(badTOML, []byte("[lease]\nquorum = \"two\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
		code int
	}{
		{"quorum above relays", append([]string{"--data-dir", dir, "--quorum", "4"}, relays...), "lease.quorum", exitConfig},
		{"bad relay url", []string{"--data-dir", dir, "--relay", "http://x", "--quorum", "1"}, "lease.relays", exitConfig},
		{"missing config file", []string{"--config", filepath.Join(dir, "nope.toml")}, "nope.toml", exitConfig},
		{"unparsable config file", []string{"--config", badTOML}, "bad.toml", exitConfig},
		{"unknown flag", []string{"--nope"}, "flag provided but not defined", 2},
		{"missing key file", append([]string{"--data-dir", dir}, relays...), "identity.key", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runMain(context.Background(), append([]string{"run"}, tt.args...), &out, &errb)
			msg := strings.TrimSpace(errb.String())
			if code != tt.code || !strings.Contains(msg, tt.want) {
				t.Fatalf("run %v = exit %d %q, want exit %d mentioning %q", tt.args, code, msg, tt.code, tt.want)
			}
			if strings.Count(msg, "\n") > 0 && tt.code != 2 {
				t.Fatalf("run %v error spans %d lines, want one: %q", tt.args, strings.Count(msg, "\n")+1, msg)
			}
		})
	}
}

// TestRunRefusesOpenKeyFile: a key file readable by others stops startup.
func TestRunRefusesOpenKeyFile(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "identity.key")
	if _, err := config.GenerateKeyFile(key); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	args := []string{"run", "--data-dir", dir, "--relay", "ws://127.0.0.1:1", "--relay", "ws://127.0.0.1:2", "--quorum", "1"}
	code := runMain(context.Background(), args, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "0644") {
		t.Fatalf("run with a 0644 key file = exit %d %q, want exit 1 naming the mode", code, errb.String())
	}
}

func TestRunHelp(t *testing.T) {
	for _, name := range []string{"run", "demo", "status", "workloads", "dev-relay"} {
		var out, errb bytes.Buffer
		code := runMain(context.Background(), []string{name, "--help"}, &out, &errb)
		if code != 0 || !strings.Contains(out.String(), "Example") {
			t.Errorf("%s --help = exit %d, output %q, want exit 0 with an example", name, code, out.String())
		}
	}
}

func TestRunPrintExampleConfig(t *testing.T) {
	var out, errb bytes.Buffer
	code := runMain(context.Background(), []string{"run", "--print-example-config"}, &out, &errb)
	if code != 0 || out.String() != config.Example() {
		t.Fatalf("run --print-example-config = exit %d, %d bytes (stderr %q), want exit 0 and config.Example()", code, out.Len(), errb.String())
	}
}

// TestAgentConfigMapsSettings: the agent-level settings of the file reach
// agent.Config, and the file's defaults are the agent's.
func TestAgentConfigMapsSettings(t *testing.T) {
	key := nostr.GeneratePrivateKey()
	base := config.Default()
	base.Lease.Relays = []string{"wss://a.example", "wss://b.example", "wss://c.example"}
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	def, want := base.AgentConfig(key), agent.DefaultConfig()
	if def.TickInterval != want.TickInterval || def.PublishTimeout != want.PublishTimeout ||
		def.MaxStepAge != want.MaxStepAge || def.RestartMaxAttempts != want.RestartMaxAttempts {
		t.Errorf("AgentConfig(defaults) = tick %v publish %v step age %v restarts %d, want agent.DefaultConfig's %v %v %v %d",
			def.TickInterval, def.PublishTimeout, def.MaxStepAge, def.RestartMaxAttempts,
			want.TickInterval, want.PublishTimeout, want.MaxStepAge, want.RestartMaxAttempts)
	}

	c := base
	c.Agent.TickInterval = 100 * time.Millisecond
	c.Agent.PublishTimeout = 7 * time.Second
	c.Agent.MaxStepAge = time.Minute
	c.Lease.RestartMaxAttempts = 2
	c.Lease.DialAddrs = map[string]string{"wss://b.example": "ws://127.0.0.1:7000"}
	c.Heartbeat.TTL = 48 * time.Hour
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	got := c.AgentConfig(key)
	if got.TickInterval != 100*time.Millisecond || got.PublishTimeout != 7*time.Second || got.MaxStepAge != time.Minute ||
		got.RestartMaxAttempts != 2 || got.DialAddrs["wss://b.example"] != "ws://127.0.0.1:7000" || got.HeartbeatTTL != 48*time.Hour {
		t.Errorf("AgentConfig() = %+v, want the file's tick_interval, publish_timeout, max_step_age, restart_max_attempts, dial_addrs, heartbeat.ttl", got)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("AgentConfig().Validate() = %v, want nil", err)
	}
}

// TestRunWarnsOfAQuorumAtMostHalf: a quorum of at most half the relays is
// allowed (the single-writer rule needs only M of N against N-M+1), with a
// WARN that two holders of one epoch might not resolve; above half, none.
func TestRunWarnsOfAQuorumAtMostHalf(t *testing.T) {
	for _, tt := range []struct {
		quorum string
		warn   bool
	}{{"1", true}, {"2", false}} {
		dir := t.TempDir()
		var out, errb bytes.Buffer
		// No key file: run stops after its start checks, with exit 1.
		args := []string{"run", "--data-dir", dir, "--quorum", tt.quorum,
			"--relay", "ws://127.0.0.1:1", "--relay", "ws://127.0.0.1:2", "--relay", "ws://127.0.0.1:3"}
		code := runMain(context.Background(), args, &out, &errb)
		got := strings.Contains(errb.String(), "lease.quorum is at most half of lease.relays")
		if code != 1 || got != tt.warn {
			t.Fatalf("run --quorum %s of 3 relays = exit %d, warned %v (%q), want exit 1, warned %v", tt.quorum, code, got, errb.String(), tt.warn)
		}
	}
}
