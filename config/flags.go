package config

import (
	"flag"
	"strings"
)

// Flags are the common command-line overrides. Create them with BindFlags
// before fs.Parse and call Resolve (or Apply) after.
type Flags struct {
	fs *flag.FlagSet

	// ConfigPath is --config; when empty, PROVIDER_AGENT_CONFIG is used.
	ConfigPath string
	DataDir    string
	Listen     string
	KeyFile    string
	Relays     []string
	Quorum     int
}

type relayList struct{ dst *[]string }

func (r relayList) String() string {
	if r.dst == nil {
		return ""
	}
	return strings.Join(*r.dst, ",")
}

func (r relayList) Set(s string) error {
	*r.dst = append(*r.dst, splitList(s)...)
	return nil
}

// BindFlags registers --config, --data-dir, --relay (repeatable or comma
// separated), --quorum, --listen and --key-file on fs.
func BindFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs}
	fs.StringVar(&f.ConfigPath, "config", "", "TOML config `file` (default $"+EnvConfigPath+"; none = built-in defaults)")
	fs.StringVar(&f.DataDir, "data-dir", "", "data `directory` holding "+DBFileName+" (overrides agent.data_dir)")
	fs.Var(relayList{&f.Relays}, "relay", "relay `URL` (ws:// or wss://); repeat for each relay (overrides lease.relays)")
	fs.IntVar(&f.Quorum, "quorum", 0, "relays `M` that must carry a fresh heartbeat (overrides lease.quorum)")
	fs.StringVar(&f.Listen, "listen", "", "metrics/status `host:port` (overrides agent.listen)")
	fs.StringVar(&f.KeyFile, "key-file", "", "identity key `file`, mode 0600 (overrides agent.key_file)")
	return f
}

// Apply copies the flags that were set on the command line into c.
func (f *Flags) Apply(c *Config) {
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["data-dir"] {
		c.Agent.DataDir = f.DataDir
	}
	if set["relay"] {
		c.Lease.Relays = append([]string(nil), f.Relays...)
	}
	if set["quorum"] {
		c.Lease.Quorum = f.Quorum
	}
	if set["listen"] {
		c.Agent.Listen = f.Listen
	}
	if set["key-file"] {
		c.Agent.KeyFile = f.KeyFile
	}
}

// Path returns the config file to read: --config, else PROVIDER_AGENT_CONFIG
// from environ, else "" (defaults only).
func (f *Flags) Path(environ []string) string {
	if f.ConfigPath != "" {
		return f.ConfigPath
	}
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, EnvConfigPath+"="); ok {
			return v
		}
	}
	return ""
}

// Resolve builds the effective config after fs.Parse: defaults, then the
// config file, then environ (PROVIDER_AGENT_*), then the flags, and
// validates the result.
func (f *Flags) Resolve(environ []string) (Config, error) {
	c, err := Load(f.Path(environ))
	if err != nil {
		return Config{}, err
	}
	if err := c.ApplyEnv(environ); err != nil {
		return Config{}, err
	}
	f.Apply(&c)
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
