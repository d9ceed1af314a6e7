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
	"text/tabwriter"
	"time"

	"provideragent/agent"
	"provideragent/agent/config"
	"provideragent/internal/sqlitedb"
)

func init() {
	register(command{
		name:    "status",
		summary: "show the agent's workloads, states, epochs and relays (live, or from the database when it is down)",
		run:     runStatus,
	})
}

const statusUsage = `provider-agent status asks the running agent for its /status document
(workloads, states, epochs, relays). When the agent does not answer, it reads
the workloads from the agent's SQLite file instead and says so.

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

// openExistingDB opens the agent's database, refusing to create one.
func openExistingDB(ctx context.Context, cfg config.Config) (*sql.DB, error) {
	path := cfg.DBPath()
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no agent database at %s (set --data-dir or --config): %w", path, err)
	}
	return openMigrated(ctx, path)
}

// openMigrated opens the SQLite file at path and applies the agent's
// migrations.
func openMigrated(ctx context.Context, path string) (*sql.DB, error) {
	db, err := sqlitedb.Open(ctx, path, sqlitedb.Options{})
	if err != nil {
		return nil, err
	}
	if err := agent.Migrate(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", statusUsage, stdout)
	flags := config.BindFlags(fs)
	asJSON := fs.Bool("json", false, "print the status document as JSON")
	url := fs.String("url", "", "status endpoint (default http://<agent.listen>/status)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfigLoose(flags)
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
		db, err := openExistingDB(ctx, cfg)
		if err != nil {
			return fmt.Errorf("status: agent not reachable (%v) and %w", liveErr, err)
		}
		defer db.Close()
		st, err = statusFromDB(ctx, db)
		if err != nil {
			return fmt.Errorf("status: %w", err)
		}
		fmt.Fprintf(stderr, "provider-agent: agent not reachable (%v); showing the database %s\n", liveErr, cfg.DBPath())
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

func statusFromDB(ctx context.Context, db *sql.DB) (agent.Status, error) {
	ws, err := agent.LoadWorkloads(ctx, db)
	if err != nil {
		return agent.Status{}, err
	}
	st := agent.Status{Source: "database", Now: time.Now().UTC()}
	for _, w := range ws {
		st.Workloads = append(st.Workloads, agent.WorkloadStatus{
			ID: w.Spec.ID, State: string(w.State), Epoch: w.Epoch, Primary: w.Holder, Standbys: w.Spec.Standbys,
		})
	}
	return st, nil
}

func printStatus(w io.Writer, st agent.Status) {
	who := st.Provider
	if who == "" {
		who = "(unknown: agent down)"
	}
	fmt.Fprintf(w, "provider %s (source: %s, synced: %v)\n", who, st.Source, st.Synced)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKLOAD\tSTATE\tEPOCH\tROLE\tRUNNING\tHOLDER")
	for _, x := range st.Workloads {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%v\t%s\n", x.ID, x.State, x.Epoch, dash(x.Role), x.Running, shortKey(x.Primary))
	}
	tw.Flush()
	if len(st.Relays) > 0 {
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RELAY\tCONNECTED\tEOSE\tRECONNECTS\tLAST ERROR")
		for _, r := range st.Relays {
			fmt.Fprintf(tw, "%s\t%v\t%v\t%d\t%s\n", r.URL, r.Connected, r.EOSE, r.Reconnects, dash(r.LastError))
		}
		tw.Flush()
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

// openOrCreateDB opens (creating if needed) the agent's database.
func openOrCreateDB(ctx context.Context, cfg config.Config) (*sql.DB, error) {
	if err := os.MkdirAll(cfg.Agent.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	return openMigrated(ctx, cfg.DBPath())
}
