package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"provideragent/config"
	"provideragent/internal/atomicfile"
)

// leaseSettingsFile, in the data dir, holds the relays and quorum of the
// last run on it: the lease settings every local grant must name (the
// lease machine refuses a grant whose relay set or quorum differ from its
// own). run writes it at start; workloads grant reads it.
const leaseSettingsFile = "lease-settings.json"

// leaseSettings is leaseSettingsFile's content.
type leaseSettings struct {
	Relays []string `json:"relays"`
	Quorum int      `json:"quorum"`
	// Config is the config file run was started with ("" for none).
	Config string `json:"config,omitempty"`
}

// writeLeaseSettings records cfg's lease settings in its data dir (mode
// 0600, replaced whole).
func writeLeaseSettings(cfg config.Config, configFile string) error {
	path := filepath.Join(cfg.Agent.DataDir, leaseSettingsFile)
	s := leaseSettings{Relays: cfg.Lease.Relays, Quorum: cfg.Lease.Quorum, Config: configFile}
	if err := atomicfile.Write(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}); err != nil {
		return fmt.Errorf("record the lease settings in %s: %w", path, err)
	}
	return nil
}

// readLeaseSettings reads dir's leaseSettingsFile (os.ErrNotExist when no
// run recorded one).
func readLeaseSettings(dir string) (leaseSettings, string, error) {
	path := filepath.Join(dir, leaseSettingsFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return leaseSettings{}, path, err
	}
	var s leaseSettings
	if err := json.Unmarshal(raw, &s); err != nil {
		return leaseSettings{}, path, fmt.Errorf("%s: %w", path, err)
	}
	return s, path, nil
}

// sameLease reports whether relays and quorum are the lease settings of s
// (relays compared as a set, normalised as the lease machine does).
func (s leaseSettings) sameLease(relays []string, quorum int) bool {
	norm := func(in []string) []string {
		out := make([]string, 0, len(in))
		for _, r := range in {
			if n, err := config.NormalizeRelayURL(r); err == nil {
				r = n
			}
			out = append(out, r)
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return quorum == s.Quorum && slices.Equal(norm(relays), norm(s.Relays))
}

// errNoLeaseSettings: a local grant without a config, on a data dir no
// agent ran on yet.
var errNoLeaseSettings = errors.New("no lease settings")

// grantLease resolves the relays and quorum a local grant names, checked
// against the config the agent runs with. given says whether the command
// line or environment chose them (--config or $PROVIDER_AGENT_CONFIG,
// --relay, --quorum or $PROVIDER_AGENT_LEASE_*). Not given: the settings
// the last run on the data dir recorded, or an error (the built-in relays
// would be refused by an agent run with others). Given, while an agent
// runs on the data dir with other settings: an error (it would refuse the
// grant); while none runs: a warning on stderr.
func grantLease(cfg *config.Config, given bool, stderr io.Writer) error {
	dir := cfg.Agent.DataDir
	rec, path, err := readLeaseSettings(dir)
	switch {
	case errors.Is(err, os.ErrNotExist) && !given:
		return fmt.Errorf("workloads grant: no --config, and no agent has run on %s yet (no %s): the grant must name the relays and quorum "+
			"the agent runs with, and the built-in ones would be refused by an agent run with others; pass --config FILE (the agent's), "+
			"or --relay URL (repeat) and --quorum M as given to run: %w", dir, leaseSettingsFile, errNoLeaseSettings)
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("workloads grant: %w", err)
	case !given:
		cfg.Lease.Relays, cfg.Lease.Quorum = rec.Relays, rec.Quorum
		fmt.Fprintf(stderr, "provider-agent: the grant names the relays and quorum of the agent that last ran on %s (%s): %d relays, quorum %d\n",
			dir, path, len(rec.Relays), rec.Quorum)
		return nil
	case rec.sameLease(cfg.Lease.Relays, cfg.Lease.Quorum):
		return nil
	}
	mismatch := fmt.Sprintf("the grant's relays %v and quorum %d differ from those of the agent on %s (%v, quorum %d, from %s)",
		cfg.Lease.Relays, cfg.Lease.Quorum, dir, rec.Relays, rec.Quorum, path)
	if dataDirHeld(dir) != nil {
		return fmt.Errorf("workloads grant: %s, which runs now and would refuse it (lease: relay set mismatch); pass the agent's --config", mismatch)
	}
	fmt.Fprintf(stderr, "provider-agent: warning: %s; an agent started with those would refuse it\n", mismatch)
	return nil
}
