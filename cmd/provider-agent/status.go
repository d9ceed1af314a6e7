package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"provideragent/agent"
	"provideragent/backend"
	"provideragent/config"
	"provideragent/lease"
)

func init() {
	register(command{
		name:    "status",
		summary: "show the agent's workloads, states, epochs and relays (live, or from the database when it is down)",
		run:     runStatus,
	})
}

const statusUsage = `provider-agent status asks the running agent for its /status document
(workloads, states, epochs, holders, the standbys each has left, relays).
When the agent does not answer, it reads the workloads from the agent's
SQLite file instead and says so. Above the table a WARNING line says when
the running agent cannot keep every process of a workload from outliving
its supervisor on this host (backend.containment), and another when its
workloads are not isolated from it and from each other (backend.isolation:
off, or not possible here, and then no workload starts). Under the table it
prints one line per workload that needs attention: why a failed or
respawning workload's process ended (from its log), and a workload held
here none of whose standbys is alive.

` + agentFilesHelp + `

Example:
  provider-agent status --config /etc/provider-agent.toml
  provider-agent status --data-dir ./data --json`

// loadConfigLoose resolves the config without validating the relay set, for
// operator commands that only need the data directory and listen address.
// With several flag sets (a command's, then its subcommand's), the last
// --config given wins and each set's flags are applied in order.
func loadConfigLoose(chain ...*config.Flags) (config.Config, error) {
	environ := os.Environ()
	path := ""
	for _, f := range chain {
		if p := f.Path(nil); p != "" {
			path = p
		}
	}
	if path == "" {
		path = (&config.Flags{}).Path(environ)
	}
	cfg, err := config.Load(path)
	if err != nil {
		return config.Config{}, err
	}
	if err := cfg.ApplyEnv(environ); err != nil {
		return config.Config{}, err
	}
	for _, f := range chain {
		f.Apply(&cfg)
	}
	return cfg, nil
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", statusUsage, stdout)
	files := bindAgentFiles(fs, nil)
	asJSON := fs.Bool("json", false, "print the status document as JSON")
	url := fs.String("url", "", "status endpoint (default http://<agent.listen>/status)")
	if _, err := parseArgs(fs, args, 0, ""); err != nil {
		return err
	}
	cfg, err := files.config()
	if err != nil {
		return err
	}
	endpoint := *url
	if endpoint == "" && cfg.Agent.Listen != "" {
		endpoint = "http://" + cfg.Agent.Listen + "/status"
	}
	var st agent.Status
	var liveErr error
	if endpoint != "" {
		st, liveErr = fetchStatus(ctx, endpoint)
	} else {
		liveErr = errors.New("status endpoint disabled (agent.listen is empty)")
	}
	if liveErr != nil {
		db, path, err := openAgentDB(ctx, files, false)
		if err != nil {
			return fmt.Errorf("status: agent not reachable (%v) and %w", liveErr, err)
		}
		defer db.Close()
		st, err = statusFromDB(ctx, db, cfg)
		if err != nil {
			return fmt.Errorf("status: %w", err)
		}
		fmt.Fprintf(stderr, "provider-agent: agent not reachable (%v); showing the database %s\n", liveErr, path)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	printStatus(stdout, st)
	return nil
}

func fetchStatus(ctx context.Context, url string) (agent.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return agent.Status{}, fmt.Errorf("status url %q: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return agent.Status{}, fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return agent.Status{}, fmt.Errorf("get %s: %s", url, resp.Status)
	}
	var st agent.Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&st); err != nil {
		return agent.Status{}, fmt.Errorf("decode %s: %w", url, err)
	}
	return st, nil
}

// statusFromDB is the status document read from the database while the
// agent is down: the persisted workloads, the standbys each has left, and
// why a failed or respawning workload's process last ended (from its log
// file under backend.log_dir).
func statusFromDB(ctx context.Context, db *sql.DB, cfg config.Config) (agent.Status, error) {
	ws, err := agent.LoadWorkloads(ctx, db)
	if err != nil {
		return agent.Status{}, err
	}
	st := agent.Status{Source: "database", Now: time.Now().UTC()}
	for _, w := range ws {
		v := agent.WorkloadView(w, "")
		if agent.NeedsReason(w.State) {
			v.Reason = backend.ExitReason(backend.LogFile(cfg.BackendLogDir(), w.Spec.ID))
		}
		st.Workloads = append(st.Workloads, v)
	}
	return st, nil
}

func printStatus(w io.Writer, st agent.Status) {
	who := st.Provider
	if who == "" {
		who = "(unknown: agent down)"
	}
	fmt.Fprintf(w, "provider %s (source: %s, synced: %v)\n", who, st.Source, st.Synced)
	if st.Version != "" {
		fmt.Fprintf(w, "version %s\n", st.Version)
	}
	if st.ContainmentWarning != "" {
		fmt.Fprintf(w, "WARNING: workloads are not fully contained (%s): %s\n", st.Containment, st.ContainmentWarning)
	}
	if st.IsolationWarning != "" {
		fmt.Fprintf(w, "WARNING: workloads are not isolated (%s): %s\n", st.Isolation, st.IsolationWarning)
	}
	if st.Draining {
		fmt.Fprintln(w, "draining: this node claims and takes over nothing (workloads drain --undo ends it)")
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tSTATE\tEPOCH\tROLE\tRUNNING\tHOLDER\tSTANDBYS")
	for _, x := range st.Workloads {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%v\t%s\t%s\n", x.ID, x.State, x.Epoch, dash(x.Role), x.Running, shortKey(x.Primary), standbysColumn(x))
	}
	tw.Flush()
	printWorkloadNotes(w, st.Workloads)
	if len(st.Relays) > 0 {
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RELAY\tCONNECTED\tEOSE\tRECONNECTS\tSILENCE COUNTS\tLAST ERROR")
		for _, r := range st.Relays {
			fmt.Fprintf(tw, "%s\t%v\t%v\t%d\t%s\t%s\n", r.URL, r.Connected, r.EOSE, r.Reconnects, silenceColumn(r), dash(r.LastError))
		}
		tw.Flush()
		for _, r := range st.Relays {
			if lr := r.LastRejection; lr != nil {
				fmt.Fprintf(w, "%s last refused our event %s at %s (kind %d, %s): %s\n",
					r.URL, shortKey(lr.EventID), lr.At.UTC().Format(time.RFC3339), lr.Kind, lr.Outcome, oneLine(lr.Reason, 300))
			}
		}
	}
}

// silenceColumn shows the stretch over which a relay's live stream counts
// as evidence of a holder's silence (takeover, retake): from when it was
// watched to what its own heartbeats came back to show; "no (not watched)"
// from a new connection's start until its catch-up ends.
func silenceColumn(r agent.RelayStatus) string {
	switch {
	case r.WatchedSince.IsZero():
		return "no (not watched)"
	case r.SilenceShownUntil.IsZero() || r.SilenceShownUntil.Before(r.WatchedSince):
		return "watched since " + r.WatchedSince.UTC().Format(time.TimeOnly) + ", nothing shown yet"
	}
	return r.WatchedSince.UTC().Format(time.TimeOnly) + " to " + r.SilenceShownUntil.UTC().Format(time.TimeOnly)
}

// standbysColumn shows the standbys of a workload's holder: their short
// keys, marked when none of them is alive, "-" when the lease names none.
func standbysColumn(x agent.WorkloadStatus) string {
	if len(x.Standbys) == 0 {
		return "-"
	}
	if x.NoStandby {
		return shortKeys(x.Standbys) + " (none alive)"
	}
	return shortKeys(x.Standbys)
}

// shortKeys joins the short forms of keys with commas.
func shortKeys(keys []string) string {
	short := make([]string, len(keys))
	for i, k := range keys {
		short[i] = shortKey(k)
	}
	return strings.Join(short, ",")
}

// printWorkloadNotes prints, under the table, one line per workload that
// needs attention: why a failed or respawning workload's process ended, and
// a workload held here whose standbys are none of them alive.
func printWorkloadNotes(w io.Writer, ws []agent.WorkloadStatus) {
	for _, x := range ws {
		if x.Reason != "" {
			fmt.Fprintf(w, "%s: %s: %s\n", x.ID, x.State, x.Reason)
		}
		if x.Restore == string(lease.RestoreRunning) || x.Restore == string(lease.RestoreWaiting) || x.Restore == string(lease.RestoreFresh) {
			fmt.Fprintf(w, "%s: restore %s: %s\n", x.ID, x.Restore, oneLine(x.RestoreWhy, 300))
		}
		if x.NoStandby {
			fmt.Fprintf(w, "%s: no standby alive: if %s fails, nobody takes over until one of %s runs again (a former primary rejoins as a standby once it does)\n",
				x.ID, shortKey(x.Primary), shortKeys(x.Standbys))
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func shortKey(k string) string {
	if len(k) > 16 {
		return k[:16] + "…"
	}
	return k
}
