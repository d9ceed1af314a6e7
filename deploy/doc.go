// Package deploy holds what an operator installs beside the provider-agent
// binary: systemd units (systemd/), Prometheus alerting rules with their
// promtool unit tests and a Grafana dashboard (prometheus/). It has no Go
// code of its own; its tests check those files: every metric they name is
// one the agent documents (docs/*.md's generated metric tables), every
// alert rule has a promtool test that fires it and one that does not, every
// dashboard expression parses (promtool), and the units pass
// systemd-analyze verify. docs/deployment.md says how to install them.
package deploy
