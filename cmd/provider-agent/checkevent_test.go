package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"provideragent/identity"
	"provideragent/internal/conformance"
)

// vectorFiles loads the conformance vectors from the repository.
func vectorFiles(t *testing.T) map[string]conformance.File {
	t.Helper()
	files, err := conformance.LoadFiles(filepath.Join("..", ".."))
	if err != nil || len(files) == 0 {
		t.Fatalf("LoadFiles = %d files, %v", len(files), err)
	}
	return files
}

// TestCheckEventVectors feeds every vector file's events to check-event
// --json, in the file's context (--context), and checks each verdict and
// reason against the vector's.
func TestCheckEventVectors(t *testing.T) {
	dir := t.TempDir()
	for name, f := range vectorFiles(t) {
		ctxFile := filepath.Join(dir, name+".context.json")
		b, _ := json.Marshal(f.Context)
		if err := os.WriteFile(ctxFile, b, 0o600); err != nil {
			t.Fatal(err)
		}
		var in bytes.Buffer
		var want []conformance.Vector
		for _, v := range f.Vectors {
			if v.Context == nil { // a vector of its own context is checked by TestVectors
				in.Write(v.Event)
				in.WriteByte('\n')
				want = append(want, v)
			}
		}
		var out bytes.Buffer
		err := runCheckEvent(context.Background(), []string{"--json", "--context", ctxFile}, &in, &out)
		if err == nil {
			t.Errorf("check-event %s = nil error, want one (every file has refused vectors)", name)
		}
		dec := json.NewDecoder(&out)
		for i, v := range want {
			var got eventVerdict
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("check-event %s: line %d: %v", name, i+1, err)
			}
			if got.Index != i+1 || got.Verdict != v.Verdict || got.Reason != v.Reason {
				t.Errorf("check-event %s#%s = %d %s %s (%s), want %d %s %s", name, v.Name, got.Index, got.Verdict, got.Reason, got.Error, i+1, v.Verdict, v.Reason)
			}
		}
		if dec.More() {
			t.Errorf("check-event %s: more lines than events", name)
		}
	}
}

// example returns the NIP example event of a vector file, as JSON.
func example(t *testing.T, files map[string]conformance.File, file string) string {
	t.Helper()
	for _, v := range files[file].Vectors {
		if v.Name == "example" {
			return string(v.Event)
		}
	}
	t.Fatalf("no example in %s", file)
	return ""
}

// TestCheckEventExitCodes: 0 when all are accepted, 1 when one is
// refused, 2 on bad input and bad flags; the context flags decide the
// verdicts that depend on lease state.
func TestCheckEventExitCodes(t *testing.T) {
	files := vectorFiles(t)
	keys, err := conformance.FixedKeys()
	if err != nil {
		t.Fatal(err)
	}
	primary, standby, issuer := keys["primary"].Public, keys["standby"].Public, keys["issuer"].Public
	hb, rev, grant := example(t, files, "heartbeat.json"), example(t, files, "revocation.json"), example(t, files, "lease-grant.json")
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	now := "--now=2026-01-01T00:00:00Z"
	web1 := "--workload=web-1=" + primary + "," + standby
	tests := []struct {
		name string
		args []string
		code int
		out  string // in stdout
	}{
		{"heartbeat", []string{"--file", write("hb.json", hb), now}, 0, "event 1 (kind 38384, id "},
		{"heartbeat, unix now", []string{"--file", write("hb.json", hb), "--now", "1767225600"}, 0, ": accepted"},
		{"heartbeat a day later", []string{"--file", write("hb.json", hb), "--now", "1767312000"}, 1, "refused stale: heartbeat created_at"},
		{"heartbeat, stale widened", []string{"--file", write("hb.json", hb), "--now", "1767225900", "--stale", "10m"}, 1, "refused expired"},
		{"revocation, no workload", []string{"--file", write("rev.json", rev), now}, 1, "refused unknown_workload"},
		{"revocation, tracked", []string{"--file", write("rev.json", rev), now, web1}, 0, ": accepted"},
		{"revocation, after failover", []string{"--file", write("rev.json", rev), now, "--workload=web-1=" + standby + "," + primary}, 1, "refused wrong_signer"},
		{"revocation, finished", []string{"--file", write("rev.json", rev), now, web1, "--finished", "web-1"}, 1, "refused unknown_workload"},
		{"grant, issuer not trusted", []string{"--file", write("grant.json", grant), now}, 1, "refused wrong_signer"},
		{"grant, issuer trusted", []string{"--file", write("grant.json", grant), now, "--trusted-issuer", issuer}, 0, ": accepted"},
		{"grant, judged by its standby", []string{"--file", write("grant.json", grant), now, "--trusted-issuer", issuer, "--self", standby}, 0, ": accepted"},
		{"grant, judged by a provider it does not name", []string{"--file", write("grant.json", grant), now, "--trusted-issuer", issuer, "--self", issuer}, 1, "refused not_named"},
		{"bad self key", []string{"--file", write("grant.json", grant), now, "--self", "npub1xyz"}, 2, ""},
		{"array", []string{"--file", write("arr.json", "["+hb+","+rev+"]"), now, web1}, 0, "event 2 (kind 38385"},
		{"lines", []string{"--file", write("lines.json", hb+"\n"+rev+"\n"), now}, 1, "event 2 (kind 38385"},
		{"one refused of three", []string{"--file", write("three.json", hb+"\n"+rev+"\n"+grant), now, web1}, 1, "event 3 (kind 38388, id "},
		{"not an event", []string{"--file", write("num.json", `42`), now}, 1, "event 1 (not an event): refused malformed"},
		{"not JSON", []string{"--file", write("bad.json", `{"id":`), now}, 2, ""},
		{"empty", []string{"--file", write("empty.json", " \n"), now}, 2, ""},
		{"no such file", []string{"--file", filepath.Join(dir, "missing.json"), now}, 2, ""},
		{"bad now", []string{"--file", write("hb.json", hb), "--now", "yesterday"}, 2, ""},
		{"bad issuer key", []string{"--file", write("hb.json", hb), "--trusted-issuer", "nsec1xyz"}, 2, ""},
		{"bad workload flag", []string{"--file", write("hb.json", hb), "--workload", "web-1"}, 2, ""},
		{"finished, not a workload", []string{"--file", write("hb.json", hb), "--finished", "web-9"}, 2, ""},
		{"bad context file", []string{"--file", write("hb.json", hb), "--context", write("ctx.json", `{"now":1,"surprise":2}`)}, 2, ""},
		{"positional argument", []string{"events.json"}, 2, ""},
		{"help", []string{"--help"}, 0, "Example:\n  provider-agent check-event --now"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := runMain(context.Background(), append([]string{"check-event"}, tt.args...), &stdout, &stderr)
		if code != tt.code || !strings.Contains(stdout.String(), tt.out) {
			t.Errorf("%s: check-event %v = exit %d, stdout %q, stderr %q; want exit %d and %q", tt.name, tt.args, code, stdout.String(), stderr.String(), tt.code, tt.out)
		}
	}
}

// TestCheckEventStdin: without --file the events come from stdin.
func TestCheckEventStdin(t *testing.T) {
	files := vectorFiles(t)
	var out bytes.Buffer
	in := strings.NewReader(example(t, files, "claim.json"))
	keys, _ := conformance.FixedKeys()
	p, _ := identity.NpubOfHex(keys["primary"].Public)
	s, _ := identity.NpubOfHex(keys["standby"].Public)
	err := runCheckEvent(context.Background(), []string{"--now", "1767225600", "--workload", "web-1=" + p + "," + s}, in, &out)
	if err != nil || !strings.HasSuffix(out.String(), ": accepted\n") {
		t.Fatalf("check-event < claim = %q, %v, want accepted", out.String(), err)
	}
}
