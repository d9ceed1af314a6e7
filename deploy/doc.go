// Package deploy holds what an operator installs beside the provider-agent
// binary: systemd units (systemd/), Prometheus alerting rules with their
// promtool unit tests, an example of Alertmanager inhibit rules and a
// Grafana dashboard (prometheus/); the rules' generator (alertgen/, for a
// selector of your own) and the Debian package's builder (package/) are
// programs of their own. This package has no Go code; its tests check those
// files: every metric they name is one the agent documents (docs/*.md's
// generated metric tables), every alert rule has a promtool test that
// fires it and one that does not and a runbook in docs/runbooks.md, every
// dashboard expression parses (promtool), and the units pass
// systemd-analyze verify. docs/deployment.md says how to install them.
package deploy
