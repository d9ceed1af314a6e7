package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/agent"
	"provideragent/heartbeat"
	"provideragent/internal/relaytest"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runMain(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestWorkloadsGrantListRelease: grants and releases are queued in the
// database; list shows them pending; status falls back to the database when
// no agent answers.
func TestWorkloadsGrantListRelease(t *testing.T) {
	dir := t.TempDir()
	primary, _ := nostr.GetPublicKey(nostr.GeneratePrivateKey())
	standby, _ := nostr.GetPublicKey(nostr.GeneratePrivateKey())
	code, out, errs := run(t, "workloads", "grant", "--data-dir", dir, "--id", "web-1", "--primary", primary,
		"--standby", standby, "--command", "sleep 100", "--relay", "ws://127.0.0.1:1", "--quorum", "1")
	if code != 0 || !strings.Contains(out, "queued grant") {
		t.Fatalf("workloads grant = exit %d %q %q, want a queued grant", code, out, errs)
	}
	code, out, _ = run(t, "workloads", "list", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "pending: grant web-1") {
		t.Fatalf("workloads list = exit %d %q, want the pending grant", code, out)
	}
	code, out, _ = run(t, "workloads", "release", "--data-dir", dir, "web-1")
	if code != 0 || !strings.Contains(out, "queued release") {
		t.Fatalf("workloads release = exit %d %q, want a queued release", code, out)
	}
	code, out, errs = run(t, "status", "--data-dir", dir, "--listen", "127.0.0.1:1")
	if code != 0 || !strings.Contains(errs, "showing the database") || !strings.Contains(out, "source: database") {
		t.Fatalf("status = exit %d %q %q, want the database fallback", code, out, errs)
	}
}

func TestWorkloadsGrantRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no id", []string{"--primary", strings.Repeat("a", 64), "--command", "x"}, "--id"},
		{"no command", []string{"--id", "w", "--primary", strings.Repeat("a", 64)}, "--command"},
		{"bad primary", []string{"--id", "w", "--primary", "npub1nope", "--command", "x"}, "primary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := run(t, append([]string{"workloads", "grant", "--data-dir", dir}, tt.args...)...)
			if code == 0 || !strings.Contains(errs, tt.want) {
				t.Fatalf("workloads grant %v = exit %d %q, want an error naming %q", tt.args, code, errs, tt.want)
			}
		})
	}
	if code, _, _ := run(t, "workloads", "show", "--data-dir", t.TempDir(), "nope"); code == 0 {
		t.Fatalf("workloads show on a missing database = exit 0, want an error")
	}
}

// TestWorkloadsGrantPublish: --publish signs the grant with the key file and
// publishes it as kind 38388 to the relays, which store it.
func TestWorkloadsGrantPublish(t *testing.T) {
	dir := t.TempDir()
	if code, _, errs := run(t, "keygen", "--out", filepath.Join(dir, "identity.key")); code != 0 {
		t.Fatalf("keygen = exit %d %q", code, errs)
	}
	args := []string{"workloads", "grant", "--data-dir", dir, "--id", "pub-1", "--command", "sleep 100", "--publish", "--quorum", "2"}
	var relays []*relaytest.Relay
	for range 3 {
		r := relaytest.Start(t)
		relays = append(relays, r)
		args = append(args, "--relay", r.URL())
	}
	code, out, errs := run(t, args...)
	if code != 0 || !strings.Contains(out, "accepted by 3 of 3 relays") {
		t.Fatalf("workloads grant --publish = exit %d %q %q, want 3 of 3 accepted", code, out, errs)
	}
	c := relaytest.Dial(t, relays[0].URL())
	defer c.Close()
	c.Send(nostr.ReqEnvelope{SubscriptionID: "g", Filters: nostr.Filters{{Kinds: []int{heartbeat.KindLeaseGrant}}}})
	env, err := c.Read(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ev, ok := env.(*nostr.EventEnvelope)
	if !ok {
		t.Fatalf("first reply = %v, want the stored grant", env)
	}
	g, err := heartbeat.DecodeLeaseGrant(&ev.Event)
	if err != nil || g.Spec.ID != "pub-1" {
		t.Fatalf("DecodeLeaseGrant() = %+v, %v; want workload pub-1", g, err)
	}
}

// TestWorkloadsGrantPublishThroughDialAddrs: the lease's relays are names
// this machine cannot resolve, reached through lease.dial_addrs (a tunnel):
// --publish dials those addresses, as run and the courier's --relays do.
func TestWorkloadsGrantPublishThroughDialAddrs(t *testing.T) {
	dir := t.TempDir()
	if code, _, errs := run(t, "keygen", "--out", filepath.Join(dir, "identity.key")); code != 0 {
		t.Fatalf("keygen = exit %d %q", code, errs)
	}
	var names, dials []string
	for i := range 2 {
		r := relaytest.Start(t)
		name := fmt.Sprintf("ws://relay-%d.invalid", i)
		names = append(names, fmt.Sprintf("%q", name))
		dials = append(dials, fmt.Sprintf("%q = %q", name, r.URL()))
	}
	cfgFile := filepath.Join(dir, "agent.toml")
	toml := fmt.Sprintf("[agent]\ndata_dir = %q\n\n[lease]\nrelays = [%s]\nquorum = 2\ndial_addrs = {%s}\n",
		dir, strings.Join(names, ", "), strings.Join(dials, ", "))
	if err := os.WriteFile(cfgFile, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, "workloads", "grant", "--config", cfgFile, "--id", "pub-2", "--command", "sleep 100", "--publish")
	if code != 0 || !strings.Contains(out, "accepted by 2 of 2 relays") {
		t.Fatalf("workloads grant --publish through dial_addrs = exit %d %q %q, want 2 of 2 accepted", code, out, errs)
	}
}

// TestGrantChecksTheAgentsLease: a local grant names the relays and quorum
// the agent runs with. Without --config on a data dir no agent ran on, it
// is refused, saying what to pass; once run recorded its settings, a grant
// with --data-dir alone takes them (and the agent runs it); one that names
// other relays is refused while the agent runs, and warned about when it
// does not.
func TestGrantChecksTheAgentsLease(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "data")
	newKey(t, filepath.Join(dir, "identity.key"))
	grant := func(id string, extra ...string) cliResult {
		return cli(t, nil, append([]string{"workloads", "grant", "--data-dir", dir, "--id", id, "--command", "sleep 7412", "--restart", "never"}, extra...)...)
	}
	if r := grant("early"); r.code != 1 || !strings.Contains(r.stderr, "--config") || !strings.Contains(r.stderr, "no agent has run on "+dir) {
		t.Fatalf("grant --data-dir before any run = exit %d %q, want exit 1 asking for --config", r.code, r.stderr)
	}
	relay := relaytest.Start(t).URL()
	a := startRun(t, "--data-dir", dir, "--relay", relay, "--quorum", "1", "--listen", "127.0.0.1:0")
	r := grant("w1")
	if r.code != 0 || !strings.Contains(r.stderr, "relays and quorum of the agent that last ran on "+dir) {
		t.Fatalf("grant --data-dir beside a running agent = exit %d %q, want the agent's relays", r.code, r.stderr)
	}
	a.waitStatus(t, "w1 running", 60*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "w1")
		return ok && w.Running
	})
	other := []string{"--relay", "ws://127.0.0.1:1", "--quorum", "1"}
	if r := grant("w2", other...); r.code != 1 || !strings.Contains(r.stderr, "runs now and would refuse it") {
		t.Errorf("grant with other relays while the agent runs = exit %d %q, want a refusal", r.code, r.stderr)
	}
	a.stop(t)
	if r := grant("w3", other...); r.code != 0 || !strings.Contains(r.stderr, "warning") {
		t.Errorf("grant with other relays while no agent runs = exit %d %q, want a warning", r.code, r.stderr)
	}
}
