package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"provideragent/internal/unitfile"
)

// requiredEnv, when set, makes the tests that run promtool or
// systemd-analyze fail instead of skipping when the tool is missing (CI
// installs them and sets it).
const requiredEnv = "DEPLOY_TOOLS_REQUIRED"

// tool returns the path of an external tool, skipping the test when it is
// missing and requiredEnv is not set.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(requiredEnv) != "" {
			t.Fatalf("%s not found and $%s is set: %v", name, requiredEnv, err)
		}
		t.Skipf("%s not installed (apt-get install -y %s)", name, map[string]string{"promtool": "prometheus"}[name])
	}
	return p
}

// documented returns the agent's documented metrics and their types, read
// from the metric tables in docs/*.md (generated from
// cmd/provider-agent/metrics_test.go's documentedMetrics, which
// TestMetricsDocumented checks on a running agent's /metrics).
func documented(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)<!-- metrics:(\w+) .*?-->(.*?)<!-- /metrics:\w+ -->`)
	row := regexp.MustCompile("(?m)^\\| `([a-z_:][a-z0-9_:]*)` \\| (\\w+) \\|")
	out := map[string]string{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range block.FindAllStringSubmatch(string(raw), -1) {
			for _, r := range row.FindAllStringSubmatch(b[2], -1) {
				out[r[1]] = r[2]
			}
		}
	}
	if len(out) < 30 || out["agent_workloads"] != "gauge" || out["agent_step_seconds"] != "histogram" {
		t.Fatalf("read %d documented metrics from docs/*.md, want the generated tables", len(out))
	}
	return out
}

// prometheusOwn are series Prometheus makes itself for every target.
var prometheusOwn = map[string]bool{"up": true}

// undocumented returns the metric names expr reads that are neither
// documented (a histogram's _bucket, _sum and _count count as the
// histogram) nor Prometheus's own.
func undocumented(expr string, docs map[string]string) []string {
	var out []string
	for _, name := range promqlMetrics(expr) {
		if docs[name] != "" || prometheusOwn[name] {
			continue
		}
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, suffix); ok {
				base = b
				break
			}
		}
		if docs[base] == "histogram" {
			continue
		}
		out = append(out, name)
	}
	return out
}

var (
	promqlStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promqlMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\[\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promqlIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true,
		"without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true, "atan2": true}
)

// promqlMetrics lists the metric names a PromQL expression selects: the
// identifiers left once strings, label matchers, ranges and grouping
// labels are removed, that are not keywords, numbers or a function's or
// aggregation's name (an identifier followed by "(").
func promqlMetrics(expr string) []string {
	s := promqlStrings.ReplaceAllString(expr, `""`)
	s = promqlMatchers.ReplaceAllString(s, " ")
	s = promqlRanges.ReplaceAllString(s, " ")
	s = promqlGrouping.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range promqlIdent.FindAllStringIndex(s, -1) {
		name := s[loc[0]:loc[1]]
		if loc[0] > 0 && (s[loc[0]-1] == '.' || (s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9')) {
			continue // part of a number or duration: 1e3, 5m
		}
		rest := strings.TrimLeft(s[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") || promqlKeywords[strings.ToLower(name)] {
			continue
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

func TestPromQLMetrics(t *testing.T) {
	for _, tt := range []struct {
		expr string
		want []string
	}{
		{`up{job="provider-agent"} == 0`, []string{"up"}},
		{`sum by (job, instance) (relay_connected) == 0`, []string{"relay_connected"}},
		{`sum(rate(a_total{x=~"y|z"}[5m])) by (instance) / on(instance) group_left(relay) b > 0.5e3`, []string{"a_total", "b"}},
		{`histogram_quantile(0.99, sum by (le) (rate(agent_step_seconds_bucket{instance=~"$instance"}[$__rate_interval])))`, []string{"agent_step_seconds_bucket"}},
		{`label_replace(x, "dst", "$1", "src", "(.*)") unless y offset 5m and bool z`, []string{"x", "y", "z"}},
		{`increase(uploader_giveups_total[1h]) > 0`, []string{"uploader_giveups_total"}},
	} {
		if got := promqlMetrics(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("promqlMetrics(%q) = %v, want %v", tt.expr, got, tt.want)
		}
	}
}

// ruleFile is a Prometheus rule file.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// ruleTests is a promtool unit test file (the parts checked here).
type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			EvalTime  string           `yaml:"eval_time"`
			AlertName string           `yaml:"alertname"`
			ExpAlerts []map[string]any `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// readYAML decodes the YAML file at path into v; strict: a key v has no
// field for is an error (a misspelt "for:" must not pass unnoticed).
func readYAML(t *testing.T, path string, v any, strict bool) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(strict)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// shippedRunbooks is where the shipped rules' runbook_url point: the
// runbooks as the Debian package installs them.
const shippedRunbooks = "file:///usr/share/doc/provider-agent/docs/runbooks.md"

var (
	inhibitFile    = filepath.Join("prometheus", "alertmanager-inhibit.yml")
	runbooksFile   = filepath.Join("..", "docs", "runbooks.md")
	alertsFile     = filepath.Join("prometheus", "alerts.yml")
	alertTestsFile = filepath.Join("prometheus", "alerts_test.yml")
	dashboardFile  = filepath.Join("prometheus", "grafana-dashboard.json")
)

// TestAlertRules checks every alerting rule: it has a for:, a severity of
// critical (wake up) or warning (next morning), a summary, and reads only
// documented metrics.
func TestAlertRules(t *testing.T) {
	docs := documented(t)
	var rf ruleFile
	readYAML(t, alertsFile, &rf, true)
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			n++
			if r.For == "" {
				t.Errorf("%s has no for:", r.Alert)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s severity = %q, want critical or warning", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || len(r.Annotations["description"]) < 60 {
				t.Errorf("%s summary = %q, description = %q; want a summary and a description that says what to do",
					r.Alert, r.Annotations["summary"], r.Annotations["description"])
			}
			want := shippedRunbooks + "#" + strings.ToLower(r.Alert)
			if r.Annotations["runbook_url"] != want {
				t.Errorf("%s runbook_url = %q, want %q (its section of docs/runbooks.md)", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !strings.Contains(r.Expr, `job="provider-agent"`) {
				t.Errorf("%s expr %q does not select job=\"provider-agent\" (the generator's selector)", r.Alert, r.Expr)
			}
			if bad := undocumented(r.Expr, docs); len(bad) > 0 {
				t.Errorf("%s reads %v, not documented metrics of the agent (docs/*.md tables)", r.Alert, bad)
			}
		}
	}
	if n < 14 {
		t.Errorf("%s has %d alerting rules, want the fourteen docs/deployment.md lists", alertsFile, n)
	}
}

// TestAlertRulesTestedBothWays checks that alerts_test.yml has, for every
// rule, a case that fires it and one that does not.
func TestAlertRulesTestedBothWays(t *testing.T) {
	var rf ruleFile
	readYAML(t, alertsFile, &rf, true)
	var rt ruleTests
	readYAML(t, alertTestsFile, &rt, false)
	fires, quiet := map[string]int{}, map[string]int{}
	for _, tc := range rt.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.AlertName]++
			} else {
				quiet[a.AlertName]++
			}
		}
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" && (fires[r.Alert] == 0 || quiet[r.Alert] == 0) {
				t.Errorf("%s: %d promtool cases fire it, %d do not; want at least one of each", r.Alert, fires[r.Alert], quiet[r.Alert])
			}
		}
	}
}

// TestAlertRulesPromtool runs the promtool unit tests (CI runs them
// directly too).
func TestAlertRulesPromtool(t *testing.T) {
	promtool := tool(t, "promtool")
	out, err := exec.Command(promtool, "test", "rules", alertTestsFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", alertTestsFile, err, out)
	}
}

// dashboardExprs returns every PromQL expression of the dashboard: the
// panels' targets (rows' nested panels included) and the template
// variables' label_values queries (their metric argument).
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string  `json:"title"`
		Panels  []panel `json:"panels"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	}
	var d struct {
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out[fmt.Sprintf("panel %q target %s", p.Title, tg.RefID)] = tg.Expr
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\(\s*(.+?)\s*,\s*\w+\s*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: query %q, want label_values(METRIC, LABEL)", v.Name, v.Definition)
			continue
		}
		out["variable "+v.Name] = m[1]
	}
	return out
}

// grafanaVars replaces the dashboard's variables by values PromQL parses.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$instance", ".*")

// TestDashboard checks that every dashboard expression reads only
// documented metrics, and that all of them parse: promtool checks them as
// recording rules of a generated rule file.
func TestDashboard(t *testing.T) {
	docs := documented(t)
	exprs := dashboardExprs(t)
	if len(exprs) < 20 {
		t.Fatalf("%s has %d expressions, want the panels of docs/deployment.md", dashboardFile, len(exprs))
	}
	where := make([]string, 0, len(exprs))
	for w := range exprs {
		where = append(where, w)
	}
	sort.Strings(where)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for i, w := range where {
		e := exprs[w]
		if strings.Contains(grafanaVars.Replace(e), "$") {
			t.Errorf("%s: %q uses a variable the dashboard does not define", w, e)
		}
		if bad := undocumented(e, docs); len(bad) > 0 {
			t.Errorf("%s reads %v, not documented metrics of the agent (docs/*.md tables)", w, bad)
		}
		q, _ := json.Marshal(grafanaVars.Replace(e))
		fmt.Fprintf(&rules, "      - record: dashboard:expr_%d\n        expr: %s\n", i, q)
	}
	promtool := tool(t, "promtool")
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		var names strings.Builder
		for i, w := range where {
			fmt.Fprintf(&names, "dashboard:expr_%d is %s\n", i, w)
		}
		t.Fatalf("promtool check rules (the dashboard's expressions as recording rules): %v\n%s\n%s", err, out, names.String())
	}
}

// unitLines returns a unit file's settings (internal/unitfile).
func unitLines(t *testing.T, path string) []string {
	t.Helper()
	lines, err := unitfile.Settings(path)
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestPodmanUnitDiffersOnlyInExecStart keeps the two units one sandbox:
// the podman unit may differ from the process backend's only in
// Description and in ExecStart's config file.
func TestPodmanUnitDiffersOnlyInExecStart(t *testing.T) {
	proc := unitLines(t, filepath.Join("systemd", "provider-agent.service"))
	pod := unitLines(t, filepath.Join("systemd", "provider-agent-podman.service"))
	if len(proc) != len(pod) {
		t.Fatalf("provider-agent.service has %d settings, provider-agent-podman.service %d; want the same", len(proc), len(pod))
	}
	for i := range proc {
		if proc[i] == pod[i] {
			continue
		}
		key, _, _ := strings.Cut(proc[i], "=")
		if key != "Description" && key != "ExecStart" {
			t.Errorf("the units differ in %q / %q: only Description and ExecStart may", proc[i], pod[i])
		}
	}
}

// TestSystemdUnits runs systemd-analyze verify on both units and the
// unprivileged drop-in, with a stand-in for the binary (verify checks that
// ExecStart's program exists); anything it prints fails (it exits 0 on an
// unknown key or a bad value). CI runs the same check in .ci/run.
func TestSystemdUnits(t *testing.T) {
	analyze := tool(t, "systemd-analyze")
	dir := t.TempDir()
	bin := filepath.Join(dir, "provider-agent")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	units, err := filepath.Glob(filepath.Join("systemd", "*.service"))
	if err != nil || len(units) != 2 {
		t.Fatalf("units %v (%v), want provider-agent.service and provider-agent-podman.service", units, err)
	}
	var names []string
	for _, u := range units {
		raw, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(raw), "/usr/local/bin/provider-agent", bin)
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(u)), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, filepath.Base(u))
	}
	dropins := filepath.Join(dir, "provider-agent.service.d")
	if err := os.Mkdir(dropins, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("systemd", "unprivileged.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dropins, "unprivileged.conf"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, append([]string{"verify"}, names...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":")
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify %v: %v\n%s", names, err, out)
	}
}

// TestUnitsStopOnConfigErrorsAndNameTheirDocs: a configuration error (exit
// 78, EX_CONFIG, cmd/provider-agent's exitConfig) is not restarted for
// ever, and every Documentation= of the units is a file of docs/ (which
// the package installs under /usr/share/doc/provider-agent/docs).
func TestUnitsStopOnConfigErrorsAndNameTheirDocs(t *testing.T) {
	for _, unit := range []string{"provider-agent.service", "provider-agent-podman.service"} {
		var docs []string
		prevent := ""
		for _, l := range unitLines(t, filepath.Join("systemd", unit)) {
			if v, ok := strings.CutPrefix(l, "Documentation="); ok {
				docs = append(docs, strings.Fields(v)...)
			}
			if v, ok := strings.CutPrefix(l, "RestartPreventExitStatus="); ok {
				prevent = v
			}
		}
		if !slices.Contains(strings.Fields(prevent), "78") {
			t.Errorf("%s: RestartPreventExitStatus=%q, want 78 (a config error: restarting cannot fix it)", unit, prevent)
		}
		if len(docs) < 2 {
			t.Errorf("%s: Documentation= names %v, want the deployment docs and the runbooks", unit, docs)
		}
		for _, d := range docs {
			rel, ok := strings.CutPrefix(d, "file:/usr/share/doc/provider-agent/")
			if !ok {
				t.Errorf("%s: Documentation=%s, want a file the package installs under /usr/share/doc/provider-agent/", unit, d)
				continue
			}
			if _, err := os.Stat(filepath.Join("..", rel)); err != nil {
				t.Errorf("%s: Documentation=%s: %v", unit, d, err)
			}
		}
	}
}

// alertNames lists the alerting rules of alerts.yml.
func alertNames(t *testing.T) []string {
	t.Helper()
	var rf ruleFile
	readYAML(t, alertsFile, &rf, true)
	var out []string
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r.Alert)
			}
		}
	}
	return out
}

// TestRunbooks: docs/runbooks.md has one section per alert (the anchor its
// runbook_url names), each saying what the alert means, what to check and
// what to do, and no section for an alert that does not exist.
func TestRunbooks(t *testing.T) {
	raw, err := os.ReadFile(runbooksFile)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	parts := regexp.MustCompile(`(?m)^## `).Split(string(raw), -1)
	for _, p := range parts[1:] {
		title, body, _ := strings.Cut(p, "\n")
		sections[strings.TrimSpace(title)] = body
	}
	alerts := alertNames(t)
	for _, a := range alerts {
		body, ok := sections[a]
		if !ok {
			t.Errorf("%s: no section \"## %s\" in docs/runbooks.md (its runbook_url's anchor)", a, a)
			continue
		}
		for _, part := range []string{"**Means**", "**Check**", "**Do**"} {
			if !strings.Contains(body, part) {
				t.Errorf("docs/runbooks.md section %s has no %s part", a, part)
			}
		}
	}
	for title := range sections {
		if !slices.Contains(alerts, title) {
			t.Errorf("docs/runbooks.md has a section %q, which is no alert of %s", title, alertsFile)
		}
	}
}

// TestInhibitRules: the example inhibit rules parse and name only alerts
// that exist, and every source is a critical alert.
func TestInhibitRules(t *testing.T) {
	var f struct {
		InhibitRules []struct {
			SourceMatchers []string `yaml:"source_matchers"`
			TargetMatchers []string `yaml:"target_matchers"`
			Equal          []string `yaml:"equal"`
		} `yaml:"inhibit_rules"`
	}
	readYAML(t, inhibitFile, &f, true)
	if len(f.InhibitRules) == 0 {
		t.Fatalf("%s has no inhibit_rules", inhibitFile)
	}
	alerts := alertNames(t)
	matcher := regexp.MustCompile(`^alertname(=~|!~|=|!=)"([^"]*)"$`)
	for i, r := range f.InhibitRules {
		if !slices.Equal(r.Equal, []string{"job", "instance"}) {
			t.Errorf("inhibit rule %d: equal %v, want [job instance] (the same node)", i, r.Equal)
		}
		for _, m := range append(append([]string{}, r.SourceMatchers...), r.TargetMatchers...) {
			mm := matcher.FindStringSubmatch(m)
			if mm == nil {
				t.Errorf("inhibit rule %d: matcher %q, want one on alertname", i, m)
				continue
			}
			re := regexp.MustCompile("^(?:" + mm[2] + ")$")
			n := 0
			for _, a := range alerts {
				if re.MatchString(a) {
					n++
				}
			}
			if n == 0 {
				t.Errorf("inhibit rule %d: matcher %q matches no alert of %s", i, m, alertsFile)
			}
			if strings.HasPrefix(mm[1], "=") && strings.Contains(mm[2], "|") {
				for _, alt := range strings.Split(mm[2], "|") {
					if !slices.Contains(alerts, alt) && !strings.ContainsAny(alt, ".*+") {
						t.Errorf("inhibit rule %d: %q names %s, which is no alert", i, m, alt)
					}
				}
			}
		}
	}
}
