package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// courierCLI runs provider-agent with args and returns exit code, stdout
// and stderr.
func courierCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runMain(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// courierUpstream is an httptest server that answers with the status
// chosen per bundle (default 200) and records the bundles it acknowledged.
type courierUpstream struct {
	mu     sync.Mutex
	status map[string]int
	got    []string
	srv    *httptest.Server
}

func newCourierUpstream(t *testing.T) *courierUpstream {
	u := &courierUpstream{status: map[string]int{}}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		defer u.mu.Unlock()
		if s, ok := u.status[string(b)]; ok && s != 200 {
			w.WriteHeader(s)
			return
		}
		u.got = append(u.got, string(b)+"|"+r.Header.Get("X-Courier-Receipt"))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *courierUpstream) set(bundle string, status int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.status[bundle] = status
}

func writeBundle(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCourierCLIWorkflow(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "agent.db")
	t.Setenv("PROVIDER_AGENT_DB", db) // --db defaults to it
	up := newCourierUpstream(t)
	up.set("bad", http.StatusBadRequest)

	ids := map[string]string{}
	for _, b := range []string{"good", "bad"} {
		code, out, errs := courierCLI(t, "courier", "send", writeBundle(t, dir, b, b), "--sender", "alice", "--destination", "http", "--key", "k-"+b)
		if code != 0 {
			t.Fatalf("courier send %s = %d (%s), want 0", b, code, errs)
		}
		ids[b] = strings.Fields(out)[0]
	}
	// Same key again: same receipt.
	if _, out, _ := courierCLI(t, "courier", "send", "--key", "k-good", "--sender", "alice", "--destination", "http", filepath.Join(dir, "good")); strings.Fields(out)[0] != ids["good"] {
		t.Errorf("courier send with used key = %q, want receipt %s", out, ids["good"])
	}
	code, out, _ := courierCLI(t, "courier", "list", "--state", "pending")
	if code != 0 || !strings.Contains(out, ids["good"]) || !strings.Contains(out, ids["bad"]) {
		t.Errorf("courier list --state pending = %d %q, want both receipts", code, out)
	}
	code, out, errs := courierCLI(t, "courier", "flush", "--to", up.srv.URL)
	if code != 1 || !strings.Contains(out, "acknowledged 1") || !strings.Contains(errs, "400") || strings.Count(errs, "\n") != 1 {
		t.Errorf("courier flush = %d %q %q, want exit 1, 1 acknowledged, one line naming the 400", code, out, errs)
	}
	code, out, _ = courierCLI(t, "courier", "dlq", "list")
	if code != 0 || !strings.Contains(out, ids["bad"]) || strings.Contains(out, ids["good"]) {
		t.Errorf("courier dlq list = %d %q, want only the bad receipt", code, out)
	}
	code, out, _ = courierCLI(t, "courier", "show", ids["bad"])
	for _, want := range []string{"state:", "dead", "payload size:", "3 bytes", "last error:", "400"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("courier show = %d %q, want it to contain %q", code, out, want)
		}
	}
	// Export in the DLQ export format.
	exportPath := filepath.Join(dir, "dlq.json")
	if code, _, errs := courierCLI(t, "courier", "dlq", "export", "--out", exportPath); code != 0 {
		t.Fatalf("courier dlq export = %d (%s), want 0", code, errs)
	}
	raw, err := os.ReadFile(exportPath)
	if err != nil {
		t.Fatal(err)
	}
	var entries []struct {
		Receipt  map[string]any `json:"receipt"`
		FailedAt string         `json:"failed_at"`
		Attempts int            `json:"attempts"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil || len(entries) != 1 || entries[0].Receipt["id"] != ids["bad"] || entries[0].Attempts != 1 || entries[0].FailedAt == "" {
		t.Errorf("export = %s (%v), want one entry for %s with attempts and failed_at", raw, err, ids["bad"])
	}
	// Replay while the upstream still refuses: kept, exit 1.
	code, out, _ = courierCLI(t, "courier", "dlq", "replay", "--to", up.srv.URL, "--rate", "1000")
	if code != 1 || !strings.Contains(out, "still failing 1") {
		t.Errorf("courier dlq replay (refused) = %d %q, want exit 1, 1 still failing", code, out)
	}
	// Upstream fixed: replay empties the DLQ.
	up.set("bad", 200)
	code, out, _ = courierCLI(t, "courier", "dlq", "replay", "--to", up.srv.URL, "--rate", "1000")
	if code != 0 || !strings.Contains(out, "acknowledged 1") {
		t.Errorf("courier dlq replay = %d %q, want 1 acknowledged", code, out)
	}
	// Resend an acknowledged receipt and flush it again.
	if code, out, errs := courierCLI(t, "courier", "resend", ids["good"]); code != 0 || !strings.Contains(out, "pending") {
		t.Errorf("courier resend = %d %q %q, want pending", code, out, errs)
	}
	if code, out, errs := courierCLI(t, "courier", "--db", db, "flush", "--to", up.srv.URL); code != 0 || !strings.Contains(out, "acknowledged 1") {
		t.Errorf("courier flush after resend = %d %q %q, want 1 acknowledged", code, out, errs)
	}
	up.mu.Lock()
	if len(up.got) != 3 {
		t.Errorf("upstream received %v, want good, bad, good", up.got)
	}
	up.mu.Unlock()
	// Drop: only dead receipts.
	code, _, errs = courierCLI(t, "courier", "dlq", "drop", ids["good"])
	if code != 1 || !strings.Contains(errs, "not in the dead-letter queue") {
		t.Errorf("courier dlq drop (acknowledged) = %d %q, want exit 1 not in the dead-letter queue", code, errs)
	}
}

func TestCourierCLIDropAndEmptyExport(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "agent.db")
	up := newCourierUpstream(t)
	up.set("x", http.StatusNotFound)
	_, out, _ := courierCLI(t, "courier", "--db", db, "send", writeBundle(t, dir, "x", "x"), "--sender", "s", "--destination", "http")
	id := strings.Fields(out)[0]
	courierCLI(t, "courier", "--db", db, "flush", "--to", up.srv.URL)
	if code, out, errs := courierCLI(t, "courier", "dlq", "drop", "--db", db, id); code != 0 || !strings.Contains(out, "dropped") {
		t.Fatalf("courier dlq drop = %d %q %q, want dropped", code, out, errs)
	}
	code, out, _ := courierCLI(t, "courier", "--db", db, "dlq", "export")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("courier dlq export (empty) = %d %q, want []", code, out)
	}
}

func TestCourierCLIErrors(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "agent.db")
	if code, _, errs := courierCLI(t, "courier", "--db", db, "send", writeBundle(t, dir, "b", "b"), "--sender", "s", "--destination", "http"); code != 0 {
		t.Fatalf("courier send = %d (%s)", code, errs)
	}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no subcommand", []string{"courier"}, 2, "missing subcommand"},
		{"unknown subcommand", []string{"courier", "frob"}, 2, "unknown subcommand"},
		{"missing file", []string{"courier", "--db", db, "send", filepath.Join(dir, "nope"), "--sender", "s", "--destination", "http"}, 1, "no such file"},
		{"missing sender", []string{"courier", "--db", db, "send", filepath.Join(dir, "b"), "--destination", "http"}, 2, "--sender is required"},
		{"bad sender", []string{"courier", "--db", db, "send", filepath.Join(dir, "b"), "--sender", "a b", "--destination", "http"}, 1, "not visible ASCII"},
		{"two files", []string{"courier", "--db", db, "send", "a", "b", "--sender", "s"}, 2, "want one FILE"},
		{"bad id", []string{"courier", "--db", db, "show", "xyz"}, 2, "16 hex digits"},
		{"unknown id", []string{"courier", "--db", db, "show", "00000000000000ff"}, 1, "receipt not found"},
		{"unknown id resend", []string{"courier", "--db", db, "resend", "00000000000000ff"}, 1, "receipt not found"},
		{"unknown id drop", []string{"courier", "--db", db, "dlq", "drop", "00000000000000ff"}, 1, "receipt not found"},
		{"bad state", []string{"courier", "--db", db, "list", "--state", "lost"}, 2, "want pending"},
		{"flush without --to", []string{"courier", "--db", db, "flush"}, 2, "want either --to URL"},
		{"flush with both", []string{"courier", "--db", db, "flush", "--to", "http://x", "--relays"}, 2, "want either --to URL"},
		{"send without destination", []string{"courier", "--db", db, "send", filepath.Join(dir, "b"), "--sender", "s"}, 2, "--destination is required"},
		{"send bad destination", []string{"courier", "--db", db, "send", filepath.Join(dir, "b"), "--sender", "s", "--destination", "smtp"}, 2, "want nostr or http"},
		{"send nostr not an event", []string{"courier", "--db", db, "send", filepath.Join(dir, "b"), "--sender", "s", "--destination", "nostr"}, 1, "not one signed Nostr event"},
		{"flush bad url", []string{"courier", "--db", db, "flush", "--to", "ftp://x"}, 2, "http://"},
		{"flush unreachable", []string{"courier", "--db", db, "flush", "--to", "http://127.0.0.1:1/"}, 1, "connection refused"},
		{"missing db", []string{"courier", "--db", filepath.Join(dir, "none.db"), "list"}, 1, "no such file"},
		{"dlq no sub", []string{"courier", "--db", db, "dlq"}, 2, "missing subcommand"},
		{"dlq bad sub", []string{"courier", "--db", db, "dlq", "purge"}, 2, "unknown subcommand"},
		{"replay bad rate", []string{"courier", "--db", db, "dlq", "replay", "--to", "http://x", "--rate", "0"}, 2, "--rate"},
		{"bad flag", []string{"courier", "--db", db, "list", "--bogus"}, 2, "bogus"},
	}
	for _, tt := range tests {
		code, _, errs := courierCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(errs, tt.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%s: %v = %d %q, want exit %d, one line containing %q", tt.name, tt.args, code, errs, tt.code, tt.want)
		}
	}
}

func TestCourierCLIHelp(t *testing.T) {
	for _, args := range [][]string{
		{"courier", "--help"},
		{"courier", "send", "--help"},
		{"courier", "list", "--help"},
		{"courier", "show", "--help"},
		{"courier", "resend", "--help"},
		{"courier", "flush", "--help"},
		{"courier", "dlq", "--help"},
		{"courier", "dlq", "list", "--help"},
		{"courier", "dlq", "replay", "--help"},
		{"courier", "dlq", "drop", "--help"},
		{"courier", "dlq", "export", "--help"},
	} {
		code, out, _ := courierCLI(t, args...)
		if code != 0 || !strings.Contains(out, "Example") {
			t.Errorf("%v = %d %q, want exit 0 with an example", args, code, out)
		}
	}
}

// The courier subcommands open the outbox as the agent does, with the
// config file's [courier] section: with max_attempts = 1 a flush that the
// upstream refuses with a retryable 503 dead-letters the receipt at once
// (courier's own default of 5 attempts, which the CLI used before, kept it
// pending).
func TestCourierCLIUsesTheConfigsCourierSection(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "agent.toml")
	conf := "[agent]\ndata_dir = " + strconv.Quote(dir) + "\n\n[courier]\nmax_attempts = 1\n"
	if err := os.WriteFile(cfgPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	up := newCourierUpstream(t)
	up.set("busy", http.StatusServiceUnavailable)
	code, out, errs := courierCLI(t, "courier", "--config", cfgPath, "send", writeBundle(t, dir, "busy", "busy"), "--sender", "alice", "--destination", "http")
	if code != 0 {
		t.Fatalf("courier send = %d (%s), want 0", code, errs)
	}
	id := strings.Fields(out)[0]
	if code, out, errs = courierCLI(t, "courier", "--config", cfgPath, "flush", "--to", up.srv.URL); code != 1 || !strings.Contains(errs, "503") {
		t.Fatalf("courier flush = %d %q %q, want exit 1 naming the 503", code, out, errs)
	}
	code, out, _ = courierCLI(t, "courier", "--config", cfgPath, "dlq", "list")
	if code != 0 || !strings.Contains(out, id) {
		t.Errorf("courier dlq list = %d %q, want receipt %s dead after its one attempt (max_attempts = 1)", code, out, id)
	}
}
