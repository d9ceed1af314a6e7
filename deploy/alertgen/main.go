// Command alertgen writes provider-agent's Prometheus alerting rules from
// alerts.yml.tmpl with a selector and a runbook location of your own, as
// the upstream monitoring mixins do (node_exporter's nodeExporterSelector):
// every expression selects the agent's series with -selector, and every
// runbook_url is -runbook-url plus the alert's section anchor. The
// defaults produce the shipped deploy/prometheus/alerts.yml.
//
//	go run ./deploy/alertgen -o deploy/prometheus/alerts.yml
//	go run ./deploy/alertgen -selector 'job="pa",env="prod"' -runbook-url https://wiki.example.org/runbooks -o alerts.yml
package main

import (
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/template"
)

//go:embed alerts.yml.tmpl
var rulesTemplate string

// Options are what a generated rule file is made with.
type Options struct {
	// Selector is the label matchers (without braces) every expression
	// selects the agent's series with: `job="provider-agent"`.
	Selector string
	// RunbookURL is the runbooks document; each alert's runbook_url is it
	// with "#" and the alert's anchor (its lower-cased name).
	RunbookURL string
	// RPOSeconds is the checkpoint age ProviderAgentCheckpointStale fires
	// above.
	RPOSeconds int
}

// Defaults are the shipped file's options: the scrape job provider-agent,
// the runbooks where the Debian package installs them, an RPO of 15 min.
var Defaults = Options{
	Selector:   `job="provider-agent"`,
	RunbookURL: "file:///usr/share/doc/provider-agent/docs/runbooks.md",
	RPOSeconds: 900,
}

// Render returns the rule file for o.
func Render(o Options) ([]byte, error) {
	if strings.TrimSpace(o.Selector) == "" || strings.ContainsAny(o.Selector, "{}") {
		return nil, fmt.Errorf("selector %q: want label matchers without braces, e.g. %s", o.Selector, Defaults.Selector)
	}
	if o.RunbookURL == "" || strings.Contains(o.RunbookURL, "#") {
		return nil, fmt.Errorf("runbook url %q: want the runbooks document's URL, without a #fragment", o.RunbookURL)
	}
	if o.RPOSeconds <= 0 {
		return nil, fmt.Errorf("rpo %d s: want a positive number of seconds", o.RPOSeconds)
	}
	t, err := template.New("alerts").Delims("[[", "]]").Funcs(template.FuncMap{
		"sel": func(extra ...string) string { return strings.Join(append([]string{o.Selector}, extra...), ",") },
		"runbook": func(alert string) string {
			return o.RunbookURL + "#" + strings.ToLower(alert)
		},
	}).Parse(rulesTemplate)
	if err != nil {
		return nil, err
	}
	var b strings.Builder
	if err := t.Execute(&b, o); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

const usage = `Usage: go run ./deploy/alertgen [-selector MATCHERS] [-runbook-url URL] [-rpo SECONDS] [-o FILE]

Writes provider-agent's Prometheus alerting rules (stdout, or -o FILE) with
your selector (the label matchers every expression selects the agent's
series with) and the URL of your copy of docs/runbooks.md. The defaults
give the shipped deploy/prometheus/alerts.yml. Check the result with
'promtool check rules FILE'.

Example:
  go run ./deploy/alertgen -selector 'job="pa",env="prod"' \
      -runbook-url https://wiki.example.org/provider-agent/runbooks.md -o /etc/prometheus/rules/provider-agent.yml`

func main() {
	fs := flag.NewFlagSet("alertgen", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprintln(os.Stderr, usage); fs.PrintDefaults() }
	o := Defaults
	fs.StringVar(&o.Selector, "selector", o.Selector, "label `matchers` (no braces) selecting the agent's series")
	fs.StringVar(&o.RunbookURL, "runbook-url", o.RunbookURL, "`URL` of the runbooks document (docs/runbooks.md)")
	fs.IntVar(&o.RPOSeconds, "rpo", o.RPOSeconds, "checkpoint age in `seconds` above which ProviderAgentCheckpointStale fires")
	out := fs.String("o", "", "write to `file` instead of stdout")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	raw, err := Render(o)
	if err == nil {
		var w io.Writer = os.Stdout
		if *out != "" {
			err = os.WriteFile(*out, raw, 0o644)
		} else {
			_, err = w.Write(raw)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "alertgen:", err)
		os.Exit(1)
	}
}
