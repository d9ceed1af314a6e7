package main

import (
	"context"
	"database/sql"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"provideragent/agent"
	"provideragent/config"
	"provideragent/courier"
	"provideragent/internal/sqlitedb"
	"provideragent/uploader"
	"provideragent/uploader/uploadertest"
)

// clearAgentEnv unsets every PROVIDER_AGENT_* variable for the test.
func clearAgentEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, config.EnvPrefix) {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
}

// agentDB opens the SQLite file exactly as 'provider-agent run' does for
// data dir dir: config.DBPath, sqlitedb.Open, the agent's migrations.
func agentDB(t *testing.T, dir string) *sql.DB {
	t.Helper()
	cfg := config.Default()
	cfg.Agent.DataDir = dir
	if _, err := os.Stat(cfg.DBPath()); err != nil {
		t.Fatalf("stat %s = %v, want the agent's database there", cfg.DBPath(), err)
	}
	db, err := sqlitedb.Open(context.Background(), cfg.DBPath(), sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := agent.Migrate(context.Background(), db); err != nil {
		t.Fatalf("agent.Migrate(%s) = %v, want nil", cfg.DBPath(), err)
	}
	return db
}

// TestDBPathResolution: --db, then --config/--data-dir on the command line,
// then $PROVIDER_AGENT_DB, then the config (file, environment, defaults);
// a subcommand's flags win over its parent's.
func TestDBPathResolution(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "agent.toml")
	if err := os.WriteFile(cfgFile, []byte("[agent]\ndata_dir = \""+filepath.Join(dir, "from-file")+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		env          map[string]string
		parent, args []string
		want         string
	}{
		{"defaults", nil, nil, nil, filepath.Join(config.Default().Agent.DataDir, config.DBFileName)},
		{"data-dir", nil, nil, []string{"--data-dir", "/d"}, "/d/provider-agent.db"},
		{"config flag", nil, nil, []string{"--config", cfgFile}, filepath.Join(dir, "from-file", config.DBFileName)},
		{"config env", map[string]string{"PROVIDER_AGENT_CONFIG": cfgFile}, nil, nil, filepath.Join(dir, "from-file", config.DBFileName)},
		{"data dir env", map[string]string{"PROVIDER_AGENT_AGENT_DATA_DIR": "/e"}, nil, nil, "/e/provider-agent.db"},
		{"db env", map[string]string{"PROVIDER_AGENT_DB": "/x.db", "PROVIDER_AGENT_AGENT_DATA_DIR": "/e"}, nil, nil, "/x.db"},
		{"data-dir beats db env", map[string]string{"PROVIDER_AGENT_DB": "/x.db"}, nil, []string{"--data-dir", "/d"}, "/d/provider-agent.db"},
		{"db flag beats all", map[string]string{"PROVIDER_AGENT_DB": "/x.db"}, nil, []string{"--data-dir", "/d", "--db", "/y.db"}, "/y.db"},
		{"parent data-dir", nil, []string{"--data-dir", "/p"}, nil, "/p/provider-agent.db"},
		{"child beats parent", nil, []string{"--data-dir", "/p"}, []string{"--data-dir", "/c"}, "/c/provider-agent.db"},
		{"parent db", nil, []string{"--db", "/p.db"}, []string{"--data-dir", "/c"}, "/p.db"},
		{"parent config, child data-dir", nil, []string{"--config", cfgFile}, []string{"--data-dir", "/c"}, "/c/provider-agent.db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearAgentEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			pfs := flag.NewFlagSet("parent", flag.ContinueOnError)
			pfs.SetOutput(io.Discard)
			parent := bindAgentFiles(pfs, nil)
			if err := pfs.Parse(tt.parent); err != nil {
				t.Fatal(err)
			}
			cfs := flag.NewFlagSet("child", flag.ContinueOnError)
			cfs.SetOutput(io.Discard)
			child := bindAgentFiles(cfs, parent)
			if err := cfs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			got, err := child.dbPath()
			if err != nil || got != tt.want {
				t.Fatalf("dbPath(parent %v, child %v) = %q, %v, want %q", tt.parent, tt.args, got, err, tt.want)
			}
		})
	}
}

// TestTilesAddUsesAgentDB: 'tiles add --data-dir D' without --db stores the
// tiles in D/provider-agent.db, the file 'run' opens, and 'tiles upload'
// then signs with the agent's key file.
func TestTilesAddUsesAgentDB(t *testing.T) {
	clearAgentEnv(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data") // does not exist yet
	file := filepath.Join(dir, "ckpt.bin")
	if err := os.WriteFile(file, []byte(strings.Repeat("x", 300)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errb := tilesRun(t, "tiles", "add", file, "--workload", "w", "--tile-size", "100", "--data-dir", dataDir)
	if code != 0 {
		t.Fatalf("tiles add --data-dir = %d, %q, %q, want 0", code, out, errb)
	}
	db := agentDB(t, dataDir)
	store, err := uploader.NewStore(context.Background(), db, nil)
	if err != nil {
		t.Fatal(err)
	}
	tiles, err := store.List(context.Background(), uploader.Filter{Workload: "w"})
	if err != nil || len(tiles) != 1 { // three identical 100-byte tiles, stored once
		t.Fatalf("tiles in the agent's database = %d (%v), want 1", len(tiles), err)
	}

	// A read-only subcommand refuses a database that does not exist.
	if code, _, errb := tilesRun(t, "tiles", "list", "--data-dir", filepath.Join(dir, "none")); code != 1 || !strings.Contains(errb, "no such file") {
		t.Errorf("tiles list on a missing data dir = %d, %q, want 1 and no such file", code, errb)
	}

	// upload without --key signs with <data_dir>/identity.key.
	pub, err := config.GenerateKeyFile(filepath.Join(dataDir, "identity.key"))
	if err != nil {
		t.Fatal(err)
	}
	srv := uploadertest.NewServer(t)
	code, out, errb = tilesRun(t, "tiles", "upload", "--data-dir", dataDir, "--server", srv.URL)
	if code != 0 || srv.Uploads(pub) != 1 {
		t.Fatalf("tiles upload --data-dir = %d, %q, %q; uploads by the agent's key = %d, want 0 and 1", code, out, errb, srv.Uploads(pub))
	}
	if strings.Contains(errb, "ephemeral") {
		t.Errorf("tiles upload with an agent key file used an ephemeral key: %q", errb)
	}
}

// TestCourierSendUsesAgentDB: 'courier send' with --data-dir (before or
// after the subcommand) and no --db stores the bundle in the agent's file.
func TestCourierSendUsesAgentDB(t *testing.T) {
	clearAgentEnv(t)
	tests := []struct {
		name string
		args func(dataDir, bundle string) []string
	}{
		{"after send", func(d, b string) []string {
			return []string{"courier", "send", b, "--sender", "s", "--destination", "http", "--data-dir", d}
		}},
		{"before send", func(d, b string) []string {
			return []string{"courier", "--data-dir", d, "send", b, "--sender", "s", "--destination", "http"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			dataDir := filepath.Join(dir, "data")
			bundle := writeBundle(t, dir, "b", "payload")
			code, out, errb := courierCLI(t, tt.args(dataDir, bundle)...)
			if code != 0 {
				t.Fatalf("%v = %d, %q, %q, want 0", tt.args(dataDir, bundle), code, out, errb)
			}
			db := agentDB(t, dataDir)
			c, err := courier.Open(context.Background(), db, courier.DefaultConfig(), courier.Deps{})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			rs, err := c.List(context.Background(), courier.ListOptions{})
			if err != nil || len(rs) != 1 || rs[0].Sender != "s" {
				t.Fatalf("receipts in the agent's database = %+v (%v), want one from s", rs, err)
			}
			if code, out, _ := courierCLI(t, "courier", "list", "--data-dir", dataDir); code != 0 || !strings.Contains(out, rs[0].ID.String()) {
				t.Errorf("courier list --data-dir = %d, %q, want the receipt", code, out)
			}
		})
	}
}
