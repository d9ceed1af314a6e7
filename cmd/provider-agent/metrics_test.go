package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"provideragent/agent"
	"provideragent/courier"
	"provideragent/heartbeat"
	"provideragent/internal/buildinfo"
	"provideragent/internal/devblossom"
	"provideragent/internal/relaytest"
	"provideragent/internal/sqlitedb"
	"provideragent/relay"
	"provideragent/uploader"
)

// metricDoc is one documented metric: the metric tables in docs/ are
// generated from documentedMetrics, and TestMetricsDocumented checks every
// row on the /metrics endpoint of a running agent.
type metricDoc struct {
	section string // agent, heartbeat, relay, courier, uploader
	name    string
	typ     string // counter, gauge, histogram
	labels  []string
	// values are the documented values of bounded labels; each is exported
	// from the start (at 0), so each must be on /metrics, and no other.
	values map[string][]string
	help   string
}

var (
	states       = []string{"standby", "promoting", "provisioning", "syncing", "live", "suspect", "respawning", "evicted", "fenced", "failed", "expired"}
	rejectReason = []string{"malformed", "too_large", "bad_kind", "future", "stale", "expired", "bad_tags", "bad_id", "bad_sig", "decode", "wrong_signer", "unknown_workload", "not_named", "canceled"}
	wireKinds    = []string{"heartbeat", "heartbeat_ephemeral", "heartbeat_shard", "revocation", "promotion", "lease_grant", "checkpoint"}
)

var documentedMetrics = []metricDoc{
	{section: "agent", name: "agent_workloads", typ: "gauge", labels: []string{"state"},
		values: map[string][]string{"state": states},
		help:   "workloads tracked by this agent, by lease state"},
	{section: "agent", name: "agent_transitions_total", typ: "counter", labels: []string{"from", "to"},
		help: "workload state transitions (`from` is `new` for a workload's first state)"},
	{section: "agent", name: "agent_provider_quorum", typ: "gauge", labels: []string{"provider"},
		help: "1 while the provider (this agent, or a holder it watches; hex key) has relay quorum, else 0"},
	{section: "agent", name: "agent_own_quorum", typ: "gauge",
		help: "1 while this agent's own heartbeats are on at least M relays (its relay quorum), else 0: `agent_provider_quorum` of its own key"},
	{section: "agent", name: "agent_workloads_without_standby", typ: "gauge",
		help: "workloads this agent holds that have standbys, none of which it sees alive (no heartbeat within `stale`; `status` says `no standby alive`): nobody takes over if this node fails"},
	{section: "agent", name: "agent_events_accepted_total", typ: "counter", labels: []string{"kind"},
		values: map[string][]string{"kind": {"heartbeat", "revocation", "promotion", "lease_grant"}},
		help:   "events that passed every check and were fed to the lease machine"},
	{section: "agent", name: "agent_events_rejected_total", typ: "counter", labels: []string{"reason"},
		values: map[string][]string{"reason": rejectReason},
		help:   "events the agent's ingest refused (the reasons of `heartbeat_events_rejected_total`)"},
	{section: "agent", name: "agent_revocations_total", typ: "counter", labels: []string{"direction"},
		values: map[string][]string{"direction": {"queued", "sent", "received"}},
		help:   "revocations queued in our outbox, sent (reached quorum), received from a holder"},
	{section: "agent", name: "agent_promotions_total", typ: "counter", labels: []string{"outcome"},
		values: map[string][]string{"outcome": {"claimed", "expired", "withdrawn", "announced"}},
		help:   "promotion claims made (claimed), not published because their claim step timed out while they waited for a publisher (expired: a queue of claims longer than the relays take in `claim_timeout`), withdrawn, and won (announced)"},
	{section: "agent", name: "agent_claims_awaiting_answer", typ: "gauge",
		help: "promotion claims waiting for their publish's answer; at `lease.claim_window` further claim steps (takeovers, retakes, retries) wait for a slot"},
	{section: "agent", name: "agent_respawns_total", typ: "counter",
		help: "workload process respawn attempts"},
	{section: "agent", name: "agent_effects_total", typ: "counter", labels: []string{"type"},
		values: map[string][]string{"type": {"entered_state", "start", "stop", "publish_revocation", "publish_claim",
			"withdraw_claim", "read_claims", "announce_promotion", "attempt_respawn", "failed", "quorum_report",
			"restore_checkpoint", "restore_report"}},
		help: "lease machine effects performed"},
	{section: "agent", name: "agent_step_seconds", typ: "histogram",
		help: "time to persist one machine step and run its effects"},
	{section: "agent", name: "agent_step_errors_total", typ: "counter",
		help: "machine steps whose commit failed (they are held and retried) or whose outbox event could not be built"},
	{section: "agent", name: "agent_heartbeat_events", typ: "gauge",
		help: "events of the last heartbeat beat: its shards and the ephemeral copy"},
	{section: "agent", name: "agent_heartbeat_event_bytes", typ: "gauge",
		help: "largest event of the last beat (NIP-01 JSON bytes); at most 60 KiB, or a relay's advertised limit"},
	{section: "agent", name: "agent_heartbeat_publish_seconds", typ: "histogram",
		help: "time to publish one beat to one relay, until it answered every event of it (at most publish_timeout); each relay takes one beat at a time: times near the heartbeat interval mean that relay barely keeps up"},
	{section: "agent", name: "agent_heartbeats_superseded_total", typ: "counter", labels: []string{"relay"},
		help: "beats never sent to a relay: it was still answering the beat before when a newer one was built, which replaced it (a slow relay gets fewer beats, the others are not delayed)"},
	{section: "agent", name: "agent_backlog_workloads", typ: "gauge",
		help: "workloads of big machine steps waiting for their batch (256 per turn) to be committed"},
	{section: "agent", name: "agent_checkpoint_restores_total", typ: "counter", labels: []string{"result"},
		values: map[string][]string{"result": agent.RestoreResults},
		help:   "checkpoint restores asked before a new epoch's start, by result: `restored`; `fresh`, the workload starts from nothing (none was published, or a `best-effort` attempt failed); `failed`, a `required` attempt failed and is retried"},
	{section: "agent", name: "agent_checkpoint_records_refused_total", typ: "counter", labels: []string{"reason"},
		values: map[string][]string{"reason": agent.RefusalReasons},
		help:   "checkpoint records (or state URIs) a restore refused, by reason: the lease's rules (`wrong_signer`, `later_epoch`, `after_successor_start`, `other_grant`, ...), what fetching found (`hash_mismatch`, `truncated_tile`, `bad_manifest`), the ingest's"},
	{section: "agent", name: "agent_checkpoint_blobs_refused_total", typ: "counter", labels: []string{"server", "reason"},
		values: map[string][]string{"reason": agent.BadCopyReasons},
		help:   "copies of checkpoint blobs (tiles, manifests) a Blossom server served with wrong bytes, by `server` (its URL: `uploader.servers` and the leases' own, each exported at 0 once known) and `reason`, also when another server then served the blob intact; each is a WARN naming the server, the blob and the workload"},
	{section: "agent", name: "agent_checkpoint_blob_deletes_total", typ: "counter", labels: []string{"outcome"},
		values: map[string][]string{"outcome": agent.DeleteOutcomes},
		help:   "copies of superseded checkpoint blobs the holder asked Blossom servers to delete (BUD-12) once a newer checkpoint was acknowledged: `deleted` (or already gone), `failed` (tried again at the next publish, unless the server refused)"},
	{section: "agent", name: "agent_checkpoints_published_total", typ: "counter", labels: []string{"outcome"},
		values: map[string][]string{"outcome": agent.PublishOutcomes},
		help:   "new checkpoints of durable workloads: `published` (every blob on K servers, record on M relays), `abandoned` (no longer held at its epoch), `failed`"},
	{section: "agent", name: "agent_checkpoint_age_seconds", typ: "gauge",
		help: "age of the oldest last published checkpoint among the durable workloads running here (since their start when none was published yet): what a failover now would lose"},
	{section: "agent", name: "agent_moves_total", typ: "counter", labels: []string{"outcome"},
		values: map[string][]string{"outcome": agent.MoveOutcomes},
		help:   "planned moves (`workloads move`) of durable workloads: `moved` (handed over naming the final checkpoint) or `aborted` (restarted here, or no longer held)"},
	{section: "agent", name: "agent_claim_answers_total", typ: "counter", labels: []string{"outcome", "reason"},
		values: map[string][]string{"outcome": publishOutcomes(), "reason": relay.ReasonLabels},
		help:   "each relay's answer to a promotion claim this agent published, with `relay_publish_total`'s outcome and reason (`rate_limited`/`rate-limited`, `rejected`/`invalid`, `timed_out`/`no_ok`, ...): relays refusing a claim storm show here, apart from heartbeats and the outbox"},
	{section: "agent", name: "agent_saved_rows_total", typ: "counter",
		help: "workload rows the periodic save wrote (changed by inputs without an effect; a step writes its own)"},
	{section: "agent", name: "agent_clock_offset_seconds", typ: "gauge",
		help: "the relays' clock minus this node's (median of the relays' HTTP `Date` at the last clock check); positive: this clock is slow"},
	{section: "agent", name: "provider_agent_build_info", typ: "gauge", labels: []string{"version", "revision", "goversion", "tags"},
		help: "always 1; its labels name the running build (`provider-agent version`): module version, commit (12 hex digits, `+dirty` for a modified work tree), Go version, build tags"},
	{section: "agent", name: "agent_clock_suspect", typ: "gauge",
		help: "1 while this node's clock is outside the bound (max(max_skew/2, 2 s)) of the relays': no takeover, and held workloads with a standby are fenced"},

	{section: "heartbeat", name: "heartbeat_events_accepted_total", typ: "counter", labels: []string{"kind"},
		values: map[string][]string{"kind": wireKinds},
		help:   "distinct events accepted (signature checked, decoded, signer rule passed)"},
	{section: "heartbeat", name: "heartbeat_events_duplicate_total", typ: "counter", labels: []string{"kind"},
		values: map[string][]string{"kind": wireKinds},
		help:   "repeated deliveries of an accepted event (no second signature check)"},
	{section: "heartbeat", name: "heartbeat_events_rejected_total", typ: "counter", labels: []string{"reason"},
		values: map[string][]string{"reason": rejectReason},
		help:   "deliveries rejected"},
	{section: "heartbeat", name: "heartbeat_signature_checks_total", typ: "counter",
		help: "Schnorr signature verifications performed"},

	{section: "relay", name: "relay_connected", typ: "gauge", labels: []string{"relay"},
		help: "1 while the websocket to the relay is open"},
	{section: "relay", name: "relay_reconnects_total", typ: "counter", labels: []string{"relay"},
		help: "connection attempts after the first one"},
	{section: "relay", name: "relay_messages_received_total", typ: "counter", labels: []string{"relay"},
		help: "frames received"},
	{section: "relay", name: "relay_publish_total", typ: "counter", labels: []string{"relay", "outcome", "reason"},
		values: map[string][]string{"outcome": publishOutcomes(), "reason": relay.ReasonLabels},
		help:   "publish outcomes by reason: the relay's prefix class, `none` (no reason given), `other` (no known prefix), or a local cause; every pair is exported at 0 from the start (120 series per relay), so `increase()` sees a relay's first refusal"},
	{section: "relay", name: "relay_subscription_closed_total", typ: "counter", labels: []string{"relay", "permanent"},
		values: map[string][]string{"permanent": {"true", "false"}},
		help:   "CLOSED frames for our subscriptions, by whether the reason is permanent (`true`, `false`)"},
	{section: "relay", name: "relay_frames_dropped_total", typ: "counter", labels: []string{"relay", "reason"},
		values: map[string][]string{"reason": relay.DroppedReasons},
		help:   "frames ignored: unparsable, an OK for no publish of ours, an event for no subscription of ours or for a replaced one"},
	{section: "relay", name: "relay_catchup_pages_total", typ: "counter", labels: []string{"relay"},
		help: "pages read because a filter returned the relay's limit of stored events (subscription catch-up after a reconnect, and queries)"},

	{section: "courier", name: "courier_flush_attempt_total", typ: "counter",
		help: "deliveries attempted"},
	{section: "courier", name: "courier_flush_failure_total", typ: "counter",
		help: "deliveries that failed (any class)"},
	{section: "courier", name: "courier_receipts_total", typ: "counter", labels: []string{"status", "success"},
		values: map[string][]string{"status": {"acknowledged", "client_error", "rate_limited", "server_error", "transport_error"}, "success": {"true", "false"}},
		help:   "delivery outcomes: `acknowledged` with success `true`, or the error class with `false`"},
	{section: "courier", name: "courier_receipt_retries_total", typ: "counter",
		help: "receipts rescheduled for another attempt"},
	{section: "courier", name: "courier_dead_letter_queue_size", typ: "gauge",
		help: "receipts in the dead-letter queue"},
	{section: "courier", name: "courier_pending", typ: "gauge",
		help: "receipts waiting for delivery"},

	{section: "uploader", name: "uploader_uploads_total", typ: "counter", labels: []string{"outcome"},
		values: map[string][]string{"outcome": {"success", "partial", "failure", "error"}},
		help:   "upload rounds of the Blossom uploader (`error`: no server reachable, or a local error)"},
	{section: "uploader", name: "uploader_tile_rejections_total", typ: "counter",
		help: "tiles rejected by the servers, per tile per attempt"},
	{section: "uploader", name: "uploader_giveups_total", typ: "counter",
		help: "tiles moved to `upload_giveup` after their attempt budget"},
	{section: "uploader", name: "uploader_retries_total", typ: "counter",
		help: "in-call retries of partial uploads by the retry decorator"},
	{section: "uploader", name: "uploader_bytes_uploaded_total", typ: "counter",
		help: "bytes of tiles the servers accepted, summed over servers"},
}

// publishOutcomes are relay_publish_total's outcome values.
func publishOutcomes() []string {
	out := make([]string, len(relay.PublishOutcomes))
	for i, o := range relay.PublishOutcomes {
		out[i] = string(o)
	}
	return out
}

// undocumentedPrefixes are the Go client's own collectors.
var undocumentedPrefixes = []string{"go_", "process_", "promhttp_"}

// family is one metric family read from /metrics.
type family struct {
	typ     string
	samples []map[string]string // label sets (histogram le and _bucket/_sum/_count folded)
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? \S+$`)

// parseMetrics reads the Prometheus text format (what promhttp serves).
func parseMetrics(r io.Reader) (map[string]*family, error) {
	fams := map[string]*family{}
	get := func(name string) *family {
		if fams[name] == nil {
			fams[name] = &family{}
		}
		return fams[name]
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			get(name).typ = typ
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("unparsable line %q", line)
		}
		name := m[1]
		if f := fams[name]; f == nil {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(name, suffix); ok && fams[base] != nil && fams[base].typ == "histogram" {
					name = base
				}
			}
		}
		labels, err := parseLabels(m[3])
		if err != nil {
			return nil, fmt.Errorf("line %q: %w", line, err)
		}
		delete(labels, "le")
		get(name).samples = append(get(name).samples, labels)
	}
	return fams, sc.Err()
}

// parseLabels reads `a="x",b="y"` (values with \" \\ \n escapes).
func parseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for s != "" {
		name, rest, ok := strings.Cut(s, `="`)
		if !ok {
			return nil, fmt.Errorf("labels %q", s)
		}
		var val strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				if rest[i] == 'n' {
					val.WriteByte('\n')
					continue
				}
			}
			val.WriteByte(rest[i])
		}
		if i == len(rest) {
			return nil, fmt.Errorf("unterminated label value in %q", s)
		}
		out[strings.TrimPrefix(name, ",")] = val.String()
		s = strings.TrimPrefix(rest[i+1:], ",")
	}
	return out, nil
}

// flakyRelay is a websocket endpoint that, to every REQ, answers with a
// transient CLOSED and an unparsable frame, then drops the connection: the
// agent's relay layer counts a closed subscription, a dropped frame and a
// reconnect, as it would with a misbehaving relay.
func flakyRelay(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		for {
			_, data, err := c.Read(ctx)
			if err != nil {
				return
			}
			var frame []json.RawMessage
			if json.Unmarshal(data, &frame) == nil && len(frame) >= 2 && string(frame[0]) == `"REQ"` {
				_ = c.Write(ctx, websocket.MessageText, []byte(`["CLOSED",`+string(frame[1])+`,"error: the test relay closes every subscription"]`))
				_ = c.Write(ctx, websocket.MessageText, []byte(`this is not a nostr frame`))
				_ = c.Close(websocket.StatusNormalClosure, "bye")
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return "ws://" + srv.Listener.Addr().String()
}

// TestMetricsDocumented runs the agent (a child process of the real
// binary) with every component on: relays (three good ones and a flaky
// one), a workload, the courier, and checkpoint uploads to a Blossom
// server. Every documented metric must be on its /metrics with exactly its
// label set and, for bounded labels, exactly the documented values; no
// metric may be there undocumented (but the Go client's go_*, process_*).
// Renaming a metric, or a label, fails it.
func TestMetricsDocumented(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "data")
	newKey(t, filepath.Join(dir, "identity.key"))
	relays := []string{flakyRelay(t)}
	for range 3 {
		relays = append(relays, relaytest.Start(t).URL())
	}
	blossom, err := devblossom.New(devblossom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := blossom.Start(context.Background(), "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blossom.Shutdown(context.Background()) })
	cfg := fastConfig(t, tmp, dir, "127.0.0.1:0", relays, 2)
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "\n[uploader]\nservers = [%q]\n", blossom.URL())
	f.Close()
	must(t, nil, "workloads", "grant", "--config", cfg, "--id", "svc-1", "--command", "sleep 1000")
	a := startRun(t, "--config", cfg)
	metricsURL := strings.TrimSuffix(a.status, "/status") + "/metrics"

	// Scrape until the activity-driven series are there (a bound on a
	// hang, not a timing assertion).
	var fams map[string]*family
	var missing []string
	deadline := time.Now().Add(120 * time.Second)
	for {
		fams, err = scrape(metricsURL)
		missing = missing[:0]
		for _, d := range documentedMetrics {
			if f := fams[d.name]; err != nil || f == nil || len(f.samples) == 0 {
				missing = append(missing, d.name)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("scrape %s: %v", metricsURL, err)
	}
	for _, d := range documentedMetrics {
		t.Run(d.name, func(t *testing.T) {
			f := fams[d.name]
			if f == nil || len(f.samples) == 0 {
				t.Fatalf("%s is not on /metrics (documented in the %s metric table in docs/)", d.name, d.section)
			}
			if f.typ != d.typ {
				t.Errorf("%s type = %s, want %s", d.name, f.typ, d.typ)
			}
			want := slices.Sorted(slices.Values(d.labels))
			seen := map[string]map[string]bool{}
			for _, s := range f.samples {
				got := make([]string, 0, len(s))
				for k, v := range s {
					got = append(got, k)
					if seen[k] == nil {
						seen[k] = map[string]bool{}
					}
					seen[k][v] = true
				}
				sort.Strings(got)
				if !slices.Equal(got, want) {
					t.Fatalf("%s label set = %v, want %v", d.name, got, want)
				}
			}
			for label, vals := range d.values {
				for _, v := range vals {
					if !seen[label][v] {
						t.Errorf("%s{%s=%q} is not on /metrics, want every documented value exported", d.name, label, v)
					}
				}
				for v := range seen[label] {
					if !slices.Contains(vals, v) {
						t.Errorf("%s{%s=%q} is on /metrics but not documented (documented: %v)", d.name, label, v, vals)
					}
				}
			}
		})
	}
	for name := range fams {
		documented := slices.ContainsFunc(documentedMetrics, func(d metricDoc) bool { return d.name == name })
		ignored := slices.ContainsFunc(undocumentedPrefixes, func(p string) bool { return strings.HasPrefix(name, p) })
		if !documented && !ignored {
			t.Errorf("%s is on /metrics but not documented: add it to documentedMetrics and regenerate the tables in docs/", name)
		}
	}
}

func scrape(url string) (map[string]*family, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

var (
	updateDocs = flag.Bool("update-docs", false, "rewrite the generated metric tables in README.md and docs/*.md from documentedMetrics")
	// updateREADME is another name for -update-docs.
	updateREADME = flag.Bool("update-readme", false, "same as -update-docs")
)

// metricsTable renders one section of documentedMetrics as a markdown
// table of the docs.
func metricsTable(section string) string {
	var b strings.Builder
	b.WriteString("| metric | type | labels | what |\n|---|---|---|---|\n")
	for _, d := range documentedMetrics {
		if d.section != section {
			continue
		}
		var labels []string
		for _, l := range d.labels {
			if vals := d.values[l]; len(vals) > 0 {
				labels = append(labels, fmt.Sprintf("`%s`: `%s`", l, strings.Join(vals, "`, `")))
			} else {
				labels = append(labels, "`"+l+"`")
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", d.name, d.typ, strings.Join(labels, "; "), d.help)
	}
	return b.String()
}

var metricsBlock = regexp.MustCompile(`(?s)(<!-- metrics:([a-z]+) [^>]*-->\n)(.*?)(<!-- /metrics:([a-z]+) -->)`)

// TestDocMetricTables: the metric tables of the docs (README.md and
// docs/*.md) are the rendering of documentedMetrics (one generated block per
// section, in whichever file covers that part), and every metric name the
// docs mention is documented. Regenerate with
// go test ./cmd/provider-agent -run TestDocMetricTables -update-docs.
func TestDocMetricTables(t *testing.T) {
	update := *updateDocs || *updateREADME
	root := filepath.Join("..", "..")
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{filepath.Join(root, "README.md")}, docs...)
	sections := map[string]bool{}
	for _, d := range documentedMetrics {
		sections[d.section] = true
	}
	found := map[string]string{} // section -> file holding its block
	mention := regexp.MustCompile("`((?:agent|heartbeat|relay|courier|uploader)_[a-z_]+)(\\{[^`]*\\})?`")
	for _, path := range files {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, path)
		doc := string(raw)
		out := metricsBlock.ReplaceAllStringFunc(doc, func(block string) string {
			m := metricsBlock.FindStringSubmatch(block)
			if m[2] != m[5] {
				t.Errorf("%s: metrics block %q ends as %q", name, m[2], m[5])
				return block
			}
			if prev, ok := found[m[2]]; ok {
				t.Errorf("%s: a second metrics block %q (the first is in %s)", name, m[2], prev)
			}
			found[m[2]] = name
			want := metricsTable(m[2])
			if m[3] != want && !update {
				t.Errorf("%s: the %s metric table differs from documentedMetrics; run: go test ./cmd/provider-agent -run TestDocMetricTables -update-docs\ngot:\n%s\nwant:\n%s", name, m[2], m[3], want)
			}
			return m[1] + want + m[4]
		})
		// Metric-looking names in the prose: counters, histograms, sizes,
		// and anything written with labels.
		for _, m := range mention.FindAllStringSubmatch(doc, -1) {
			looks := m[2] != "" || strings.HasSuffix(m[1], "_total") || strings.HasSuffix(m[1], "_seconds") || strings.HasSuffix(m[1], "_size")
			if looks && !slices.ContainsFunc(documentedMetrics, func(d metricDoc) bool { return d.name == m[1] }) {
				t.Errorf("%s mentions %s, which is not a documented metric", name, m[1])
			}
		}
		if update && out != doc {
			if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("rewrote the metric tables of %s", name)
		}
	}
	for s := range sections {
		if found[s] == "" {
			t.Errorf("no file of the docs has a generated metrics block for %q (<!-- metrics:%s ... --> ... <!-- /metrics:%s -->)", s, s, s)
		}
	}
	// Every metric a component of the agent registers is in a table, and
	// every row is a registered metric: a metric that only appears after
	// an event (relay_catchup_pages_total did) cannot escape the tables.
	registered := registeredMetrics(t)
	for name, typ := range registered {
		i := slices.IndexFunc(documentedMetrics, func(d metricDoc) bool { return d.name == name })
		switch {
		case i < 0:
			t.Errorf("%s (%s) is registered but in no metric table: add it to documentedMetrics and run -update-docs", name, typ)
		case typ != "" && documentedMetrics[i].typ != typ:
			t.Errorf("%s is registered as a %s, documented as a %s", name, typ, documentedMetrics[i].typ)
		}
	}
	for _, d := range documentedMetrics {
		if _, ok := registered[d.name]; !ok {
			t.Errorf("%s is documented but no component registers it", d.name)
		}
	}
}

// describing records the name of every metric of every collector
// registered through it (a vector without a series yet included, which
// Gather would leave out).
type describing struct {
	prometheus.Registerer
	names map[string]string
}

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		if m := descName.FindStringSubmatch(desc.String()); m != nil {
			d.names[m[1]] = ""
		}
	}
	return d.Registerer.Register(c)
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

// registeredMetrics registers, on one registry, what run registers (the
// agent's, the wire layer's, a relay pool's, the courier's, the
// uploader's metrics and the build info) and returns every metric name
// with its type ("" for a vector with no series yet); the Go client's own
// collectors are left out.
func registeredMetrics(t *testing.T) map[string]string {
	t.Helper()
	r := prometheus.NewRegistry()
	reg := &describing{Registerer: r, names: map[string]string{}}
	if err := agent.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := heartbeat.NewIngestor(heartbeat.DefaultConfig(), openPolicy{}, reg, nil); err != nil {
		t.Fatal(err)
	}
	rcfg := relay.DefaultConfig()
	rcfg.URLs = []string{"ws://127.0.0.1:1"}
	pool, err := relay.New(rcfg, relay.Options{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db, err := sqlitedb.Open(context.Background(), filepath.Join(t.TempDir(), "metrics.db"), sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err := courier.Open(context.Background(), db, courier.DefaultConfig(), courier.Deps{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := uploader.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if err := buildinfo.Register(reg, buildinfo.Read()); err != nil {
		t.Fatal(err)
	}
	mfs, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := reg.names
	for _, mf := range mfs {
		out[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	return out
}

// openPolicy is a heartbeat.SignerPolicy that allows everything (only its
// metrics are used).
type openPolicy struct{}

func (openPolicy) CurrentPrimary(string) (string, bool) { return "", false }
func (openPolicy) IsMember(string, string) bool         { return true }
func (openPolicy) AllowedIssuer(string) bool            { return true }
