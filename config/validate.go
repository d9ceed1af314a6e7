package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"provideragent/backend"
	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/lease"
)

// Validate checks every setting and returns the first problem as one error
// of the form `config: lease.quorum = 4: must be <= number of relays (3)`,
// wrapping ErrInvalid. On success it also rewrites relay URLs into the form
// the lease machine uses (lease.NormalizeRelayURL) and trusted issuers into
// lowercase hex, so the rest of the agent can compare them as strings.
func (c *Config) Validate() error {
	relays := make([]string, 0, len(c.Lease.Relays))
	seen := map[string]bool{}
	for i, r := range c.Lease.Relays {
		n, err := NormalizeRelayURL(r)
		if err != nil {
			return invalid(fmt.Sprintf("lease.relays[%d]", i), r, err.Error())
		}
		seen[n] = true
		relays = append(relays, n)
	}
	issuers := make([]string, 0, len(c.Agent.TrustedIssuers))
	for i, k := range c.Agent.TrustedIssuers {
		h, err := identity.ParsePublicKey(k)
		if err != nil {
			return invalid(fmt.Sprintf("agent.trusted_issuers[%d]", i), k, "want a public key as 64 hex characters or npub")
		}
		issuers = append(issuers, h)
	}
	dial, err := checkDialAddrs(c.Lease.DialAddrs, seen)
	if err != nil {
		return err
	}
	if err := c.check(relays); err != nil {
		return err
	}
	c.Lease.Relays = relays
	c.Lease.DialAddrs = dial
	c.Agent.TrustedIssuers = issuers
	return nil
}

func (c *Config) check(relays []string) error {
	a, l := c.Agent, c.Lease
	if a.DataDir == "" {
		return invalid("agent.data_dir", a.DataDir, "must not be empty")
	}
	if a.Listen != "" {
		if err := checkHostPort(a.Listen); err != nil {
			return invalid("agent.listen", a.Listen, err.Error())
		}
	}
	// The lease rules (relays, quorum, timings and how they relate) are
	// lease.Config.Validate's, which names the keys of this file.
	lc := c.LeaseConfig()
	lc.Relays = relays
	if err := lc.Validate(); err != nil {
		var ce *lease.ConfigError
		if errors.As(err, &ce) {
			return &FieldError{Path: ce.Key, Value: ce.Value, Reason: ce.Reason}
		}
		return err
	}
	for _, d := range []struct {
		path string
		v    time.Duration
		zero bool // zero allowed
	}{
		{"agent.tick_interval", a.TickInterval, false},
		{"agent.publish_timeout", a.PublishTimeout, false},
		{"agent.max_step_age", a.MaxStepAge, false},
		{"heartbeat.ttl", c.Heartbeat.TTL, false},
		{"backend.stop_grace", c.Backend.StopGrace, false},
		{"courier.backoff_initial", c.Courier.BackoffInitial, false},
		{"courier.backoff_cap", c.Courier.BackoffCap, false},
		{"courier.flush_interval", c.Courier.FlushInterval, false},
		{"courier.retention", c.Courier.Retention, false},
		{"uploader.backoff_base", c.Uploader.BackoffBase, false},
		{"uploader.backoff_cap", c.Uploader.BackoffCap, false},
	} {
		if d.v < 0 || (d.v == 0 && !d.zero) {
			want := "must be > 0"
			if d.zero {
				want = "must be >= 0"
			}
			return invalid(d.path, d.v, want)
		}
	}
	if a.TickInterval > l.Stale {
		return invalid("agent.tick_interval", a.TickInterval, fmt.Sprintf("must be at most lease.stale (%s)", l.Stale))
	}
	if a.MemoryLimitMiB < 0 || a.MemoryLimitMiB > MaxMemoryLimitMiB {
		return invalid("agent.memory_limit_mib", a.MemoryLimitMiB, fmt.Sprintf("must be 0 (no limit) to %d", MaxMemoryLimitMiB))
	}
	if a.MaxStepAge <= a.TickInterval {
		return invalid("agent.max_step_age", a.MaxStepAge, fmt.Sprintf("must exceed agent.tick_interval (%s)", a.TickInterval))
	}
	if l.RestartMaxAttempts < 0 || l.RestartMaxAttempts > lease.MaxRestartAttempts {
		return invalid("lease.restart_max_attempts", l.RestartMaxAttempts, fmt.Sprintf("must be 0 to %d", lease.MaxRestartAttempts))
	}
	if minTTL := heartbeat.MinHeartbeatTTL(l.Stale, l.MaxSkew); c.Heartbeat.TTL < minTTL {
		return invalid("heartbeat.ttl", c.Heartbeat.TTL, fmt.Sprintf(
			"must be at least %s: Paygress's live window (%s) and lease.stale + lease.max_skew (%s), so a heartbeat does not expire while it can count",
			minTTL, heartbeat.PaygressLiveWindow, l.Stale+l.MaxSkew))
	}
	if err := c.checkBackend(); err != nil {
		return err
	}
	cr := c.Courier
	if cr.MaxAttempts < 1 {
		return invalid("courier.max_attempts", cr.MaxAttempts, "must be >= 1")
	}
	if cr.BackoffCap < cr.BackoffInitial {
		return invalid("courier.backoff_cap", cr.BackoffCap, fmt.Sprintf("must be >= courier.backoff_initial (%s)", cr.BackoffInitial))
	}
	if err := c.checkUploader(); err != nil {
		return err
	}
	if err := c.checkCheckpoint(); err != nil {
		return err
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return invalid("log.level", c.Log.Level, "want debug, info, warn or error")
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		return invalid("log.format", c.Log.Format, "want text or json")
	}
	return nil
}

func (c *Config) checkBackend() error {
	b := c.Backend
	if b.Kind != "process" && b.Kind != "podman" {
		return invalid("backend.kind", b.Kind, `want "process" or "podman"`)
	}
	if b.Containment == "" || backend.ContainMode(b.Containment).Validate() != nil {
		return invalid("backend.containment", b.Containment, "want auto, pidns, cgroup or none")
	}
	if b.Kind == "podman" && (b.Containment == string(backend.ContainCgroup) || b.Containment == string(backend.ContainNone)) {
		return invalid("backend.containment", b.Containment,
			"want auto or pidns with backend.kind = podman: a container lives in its supervisor's PID namespace, which is what kills it with the agent")
	}
	switch {
	case b.LogMaxMiB < 0 || b.LogMaxMiB > 1<<20:
		return invalid("backend.log_max_mib", b.LogMaxMiB, "want 0 (no cap) to 1048576")
	case b.LogKeep < 0 || b.LogKeep > 100:
		return invalid("backend.log_keep", b.LogKeep, "want 0 to 100")
	case b.WorkloadDirMaxMiB < 0 || b.WorkloadDirMaxMiB > 1<<30:
		return invalid("backend.workload_dir_max_mib", b.WorkloadDirMaxMiB, "want 0 (no bound) to 1073741824")
	case b.WorkloadDirMaxFiles < 0:
		return invalid("backend.workload_dir_max_files", b.WorkloadDirMaxFiles, "want 0 (no bound) or more")
	case b.DiskCheckInterval <= 0 && (b.WorkloadDirMaxMiB > 0 || b.WorkloadDirMaxFiles > 0):
		return invalid("backend.disk_check_interval", b.DiskCheckInterval, "want a positive duration")
	}
	if b.Isolation == "" || backend.IsolationMode(b.Isolation).Validate() != nil {
		return invalid("backend.isolation", b.Isolation, "want user or none")
	}
	if _, err := backend.ParseUIDRange(b.WorkloadUIDs); err != nil {
		return invalid("backend.workload_uids", b.WorkloadUIDs, err.Error())
	}
	if strings.ContainsAny(b.WorkloadUser, " \t\n:") {
		return invalid("backend.workload_user", b.WorkloadUser, "want a user name or uid")
	}
	if b.Kind == "podman" && b.Podman == "" {
		return invalid("backend.podman", b.Podman, "must not be empty with backend.kind = podman")
	}
	return nil
}

// checkDialAddrs validates lease.dial_addrs against the normalised relay set
// and returns it with normalised keys (the values are dialled as written).
func checkDialAddrs(m map[string]string, relays map[string]bool) (map[string]string, error) {
	out := make(map[string]string, len(m))
	for canon, dial := range m {
		path := fmt.Sprintf("lease.dial_addrs[%q]", canon)
		n, err := NormalizeRelayURL(canon)
		if err != nil {
			return nil, invalid(path, dial, "key: "+err.Error())
		}
		if !relays[n] {
			return nil, invalid(path, dial, "key is not one of lease.relays (after normalisation: "+n+")")
		}
		if _, dup := out[n]; dup {
			return nil, invalid(path, dial, "relay mapped twice (after normalisation: "+n+")")
		}
		if _, err := NormalizeRelayURL(dial); err != nil {
			return nil, invalid(path, dial, err.Error())
		}
		out[n] = dial
	}
	return out, nil
}

// rawValue is a value printed as is (not quoted) in a FieldError.
type rawValue string

// invalid formats one validation error: `config: PATH = VALUE: WHY`.
func invalid(path string, value any, why string) error {
	var v string
	switch x := value.(type) {
	case string:
		v = strconv.Quote(x)
	case rawValue:
		v = string(x)
	default:
		v = fmt.Sprint(x)
	}
	return &FieldError{Path: path, Value: v, Reason: why}
}

// FieldError is a setting that failed validation. Its message is one line,
// `config: PATH = VALUE: REASON`; errors.Is(err, ErrInvalid) holds.
type FieldError struct {
	Path   string // TOML path, e.g. "lease.quorum" or "lease.relays[1]"
	Value  string // the offending value as written in messages (strings quoted)
	Reason string // why it is wrong
}

func (e *FieldError) Error() string {
	return "config: " + e.Path + " = " + e.Value + ": " + e.Reason
}

// Is reports whether target is ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// checkHostPort accepts host:port with a numeric port in 0..65535.
func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("want host:port such as 127.0.0.1:9464")
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("bad host %q", host)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port must be a number 0-65535")
	}
	return nil
}

// NormalizeRelayURL checks that s is a ws:// or wss:// URL with a host, a
// valid port and no credentials, fragment or white space (a config is held
// to more than a grant from the wire), and returns it in
// lease.NormalizeRelayURL's canonical form, the one form the whole agent
// compares relays in (lower-case scheme and host, no default port, no
// trailing slash).
func NormalizeRelayURL(s string) (string, error) {
	s = strings.TrimSpace(s)
	p, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("not a URL")
	}
	scheme := strings.ToLower(p.Scheme)
	if scheme != "ws" && scheme != "wss" {
		return "", fmt.Errorf("want a ws:// or wss:// URL")
	}
	if p.Hostname() == "" {
		return "", fmt.Errorf("URL has no host")
	}
	if p.User != nil {
		return "", fmt.Errorf("URL must not carry credentials")
	}
	if p.Fragment != "" || strings.Contains(s, "#") {
		return "", fmt.Errorf("URL must not have a fragment")
	}
	if port := p.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("bad port %q", port)
		}
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return "", fmt.Errorf("URL contains white space")
	}
	n, err := lease.NormalizeRelayURL(s)
	if err != nil {
		return "", fmt.Errorf("not a relay URL")
	}
	return n, nil
}
