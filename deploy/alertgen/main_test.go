package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestShippedRulesAreGenerated: deploy/prometheus/alerts.yml is the
// template rendered with the defaults (edit the template, then
// go run ./deploy/alertgen -o deploy/prometheus/alerts.yml).
func TestShippedRulesAreGenerated(t *testing.T) {
	want, err := Render(Defaults)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("deploy/prometheus/alerts.yml is not the template rendered with the defaults: run go run ./deploy/alertgen -o deploy/prometheus/alerts.yml")
	}
}

// TestCustomSelector: rules generated with another selector and runbook
// location select only by it, link only there, and pass promtool check
// rules (where promtool is installed; CI installs it).
func TestCustomSelector(t *testing.T) {
	raw, err := Render(Options{Selector: `job="pa",env="prod"`, RunbookURL: "https://wiki.example.org/runbooks", RPOSeconds: 300})
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	if strings.Contains(s, `job="provider-agent"`) || strings.Contains(s, "/usr/share/doc") {
		t.Errorf("rules rendered with another selector still name the defaults")
	}
	if n := strings.Count(s, `job="pa",env="prod"`); n < 14 {
		t.Errorf("the selector appears %d times, want in every rule", n)
	}
	if !strings.Contains(s, "https://wiki.example.org/runbooks#provideragentdown") || !strings.Contains(s, "> 300") {
		t.Errorf("runbook URL or RPO not applied")
	}
	for _, bad := range []Options{{Selector: "", RunbookURL: "x", RPOSeconds: 1}, {Selector: `{job="x"}`, RunbookURL: "x", RPOSeconds: 1},
		{Selector: `job="x"`, RunbookURL: "x#y", RPOSeconds: 1}, {Selector: `job="x"`, RunbookURL: "x", RPOSeconds: 0}} {
		if _, err := Render(bad); err == nil {
			t.Errorf("Render(%+v) = nil error, want one naming the bad option", bad)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("DEPLOY_TOOLS_REQUIRED") != "" {
			t.Fatal("promtool not found and DEPLOY_TOOLS_REQUIRED is set")
		}
		t.Skip("promtool not installed (apt-get install prometheus)")
	}
	path := filepath.Join(t.TempDir(), "alerts.yml")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules (selector job=\"pa\",env=\"prod\"): %v\n%s", err, out)
	}
}
