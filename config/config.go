package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"provideragent/agent"
	"provideragent/backend"
	"provideragent/checkpoint"
	"provideragent/heartbeat"
	"provideragent/lease"
	"provideragent/uploader"
)

// ErrInvalid is wrapped by every error of Parse, Load, ApplyEnv and Validate
// that is caused by a bad setting (as opposed to, say, an unreadable file).
var ErrInvalid = errors.New("invalid config")

// DBFileName is the name of the agent's single SQLite file inside the data
// directory.
const DBFileName = "provider-agent.db"

// Config is every knob of the agent. The TOML file uses the section and key
// names given in the toml tags; durations are strings such as "90s" or "5m".
type Config struct {
	Agent      AgentSection      `toml:"agent"`
	Lease      LeaseSection      `toml:"lease"`
	Heartbeat  HeartbeatSection  `toml:"heartbeat"`
	Backend    BackendSection    `toml:"backend"`
	Courier    CourierSection    `toml:"courier"`
	Uploader   UploaderSection   `toml:"uploader"`
	Checkpoint CheckpointSection `toml:"checkpoint"`
	Log        LogSection        `toml:"log"`
}

// AgentSection is the [agent] section: identity, storage, HTTP endpoint and
// who may grant leases.
type AgentSection struct {
	// KeyFile is the identity secret key file (hex or nsec, mode 0600).
	// Default "" means <data_dir>/identity.key; see Config.KeyFilePath.
	KeyFile string `toml:"key_file"`
	// DataDir holds the SQLite file provider-agent.db and workload logs.
	// Default "provider-agent-data" (relative to the working directory).
	DataDir string `toml:"data_dir"`
	// Listen is the host:port of the /metrics, /healthz and /status server.
	// Default "127.0.0.1:9464" (loopback only); "" disables the server.
	Listen string `toml:"listen"`
	// TrustedIssuers are the public keys (hex or npub) whose lease grants
	// (kind 38388) the agent accepts from relays. Default none: only grants
	// made with the local CLI. Validate rewrites them to lowercase hex.
	TrustedIssuers []string `toml:"trusted_issuers"`
	// TickInterval is how often the lease machine's clock ticks (quorum
	// deadlines, timeouts); at most lease.stale. Default 250ms.
	TickInterval time.Duration `toml:"tick_interval"`
	// PublishTimeout bounds one publish to the relays (heartbeats, claims,
	// outbox sends wait for OK answers this long). Default 5s.
	PublishTimeout time.Duration `toml:"publish_timeout"`
	// MaxStepAge is how long the machine loop may go without a step before
	// /healthz reports it stuck (503); more than tick_interval. Default 30s.
	MaxStepAge time.Duration `toml:"max_step_age"`
	// MemoryLimitMiB is the Go runtime's soft memory limit
	// (runtime/debug.SetMemoryLimit, what GOMEMLIMIT sets): near it the
	// garbage collector runs more often instead of letting the heap double
	// over what is live. 0 (the default) leaves the runtime's own (no
	// limit, or GOMEMLIMIT's). docs/operations.md, "Memory".
	MemoryLimitMiB int64 `toml:"memory_limit_mib"`
}

// MaxMemoryLimitMiB bounds agent.memory_limit_mib (1 TiB).
const MaxMemoryLimitMiB = 1 << 20

// LeaseSection is the [lease] section: the relay set, quorum and the timings
// of the lease state machine (docs/reliability.md "Rules" and lease/doc.go).
// The defaults are lease.DefaultConfig's; LeaseConfig maps the section onto
// lease.Config.
type LeaseSection struct {
	// Relays are the N relay URLs (ws:// or wss://), normalised by
	// Validate. Default: three public relays (set your own in production).
	Relays []string `toml:"relays"`
	// Quorum is M, the number of relays that must carry a provider's fresh
	// heartbeat for it to have quorum. 1 <= M <= N. Default 2.
	Quorum int `toml:"quorum"`
	// T1 is the debounce from the moment quorum was lost to Suspect.
	// Default 120s.
	T1 time.Duration `toml:"t1"`
	// T2 is how long a workload stays Suspect before it is evicted.
	// Default 300s.
	T2 time.Duration `toml:"t2"`
	// Stale is how long (local receive time) a heartbeat keeps counting
	// toward quorum; at least twice heartbeat.interval. Default 180s.
	Stale time.Duration `toml:"stale"`
	// MaxSkew is how far in the future a heartbeat's created_at may lie.
	// Default 30s.
	MaxSkew time.Duration `toml:"max_skew"`
	// ProvisionTimeout fails a workload that does not reach quorum in time
	// (and bounds relay sync after a restart); at most t1+t2. Default 300s.
	ProvisionTimeout time.Duration `toml:"provision_timeout"`
	// TakeoverAfter is how long a standby must see no Live claim of the
	// holder before it claims the workload. Must exceed
	// t1 + t2 + stale + max_skew + relay_delay. Default 720s.
	TakeoverAfter time.Duration `toml:"takeover_after"`
	// RelayDelay bounds delivery through a relay that is up. Default 10s.
	RelayDelay time.Duration `toml:"relay_delay"`
	// DialAddrs maps a relay of lease.relays to the websocket URL actually
	// dialled, for a node behind a proxy or tunnel, e.g.
	// {"wss://relay.example" = "ws://127.0.0.1:7000"}. Events stay labelled
	// with the canonical URL, which quorum is judged over. Validate
	// normalises the keys. Default none.
	DialAddrs map[string]string `toml:"dial_addrs"`
	// RestartBackoffInitial is the first respawn delay; it doubles per
	// attempt up to RestartBackoffMax. Defaults 5s and 5m. (The number of
	// attempts is per workload, in the lease's restart_policy.)
	RestartBackoffInitial time.Duration `toml:"restart_backoff_initial"`
	RestartBackoffMax     time.Duration `toml:"restart_backoff_max"`
	// RestartBackoffResetAfter is the healthy run time after which the
	// attempt count starts again from zero. Default 10m.
	RestartBackoffResetAfter time.Duration `toml:"restart_backoff_reset_after"`
	// RestartMaxAttempts is the respawn budget for lease grants whose
	// restart policy carries no count (the wire format has none): after it
	// the workload is Failed. 0 means never respawn. Default 5.
	RestartMaxAttempts int `toml:"restart_max_attempts"`
	// EvictWithoutStandby lets loss of quorum stop workloads that have no
	// standby (off by default: they are only reported).
	EvictWithoutStandby bool `toml:"evict_without_standby"`
	// ClaimRetryBase is the claim step's retry backoff base; it doubles up
	// to ClaimRetryMax. Each standby rank waits claim_retry_base +
	// 2*relay_delay longer than the rank before it (lease.Config.RankStagger).
	// Defaults 15s and 5m.
	ClaimRetryBase time.Duration `toml:"claim_retry_base"`
	ClaimRetryMax  time.Duration `toml:"claim_retry_max"`
	// ClaimTimeout is how long a claim waits for relay feedback before it
	// is withdrawn and retried. Default 30s.
	ClaimTimeout time.Duration `toml:"claim_timeout"`
	// ClaimWindow bounds the claims waiting for their publish's answer at
	// once; further claim steps start as answers come (a mass takeover or
	// retake flows at the relays' pace). 0: no bound. Default 256.
	ClaimWindow int `toml:"claim_window"`
}

// HeartbeatSection is the [heartbeat] section.
type HeartbeatSection struct {
	// Interval between our heartbeats; lease.stale must be at least twice
	// this. Default 60s.
	Interval time.Duration `toml:"interval"`
	// TTL is the NIP-40 expiration of our heartbeats after their created_at:
	// at least Paygress's live window (300s) and at least lease.stale +
	// lease.max_skew, so no relay deletes a heartbeat while a peer may still
	// count it. Default 300s (heartbeat.DefaultHeartbeatTTL). Raise it to keep
	// heartbeat history on relays that delete expired events (Paygress's
	// uptime figure counts stored heartbeats over days).
	TTL time.Duration `toml:"ttl"`
}

// BackendSection is the [backend] section: how workloads run.
type BackendSection struct {
	// Kind of backend: "process" (the grant's command, under a supervisor)
	// or "podman" (the grant's OCI image, with podman, in its supervisor's
	// PID namespace; needs root and podman). Default "process".
	Kind string `toml:"kind"`
	// StopGrace is the time between SIGTERM and SIGKILL. Default 10s.
	StopGrace time.Duration `toml:"stop_grace"`
	// LogDir receives one stdout+stderr log file per workload. Default ""
	// means <data_dir>/logs; see Config.BackendLogDir.
	LogDir string `toml:"log_dir"`
	// Containment says how each workload's processes are held together so
	// that none outlives its supervisor (backend.ContainMode): "auto"
	// (a PID namespace and a cgroup where the host allows, a WARN for what
	// is missing), "pidns", "cgroup" (either required: run refuses to start
	// without it) or "none" (a WARN). Default "auto".
	Containment string `toml:"containment"`
	// Isolation says whether each workload runs as a user of its own
	// (backend.IsolationMode): "user" (a uid of its own, or workload_user;
	// a clean environment; a private directory; needs root: elsewhere no
	// workload starts) or "none" (the agent's user and environment: unsafe
	// for third-party workloads). Default "user".
	Isolation string `toml:"isolation"`
	// WorkloadUser, when set (a user name or uid), is the one user every
	// isolated workload runs as; "" gives each workload a uid of its own
	// from WorkloadUIDs. Default "".
	WorkloadUser string `toml:"workload_user"`
	// WorkloadUIDs is the range ("FIRST-LAST") workloads' uids come from.
	// Default "1900000000-1900065535".
	WorkloadUIDs string `toml:"workload_uids"`
	// WorkloadDir holds the workloads' directories (home and checkpoint
	// directory). Default "" means /var/lib/provider-agent/workloads with
	// isolation "user" (workload users must reach it, and the data dir is
	// private), <data_dir>/workloads with "none"; see
	// Config.BackendWorkloadDir.
	WorkloadDir string `toml:"workload_dir"`
	// Podman is the podman command of kind "podman". Default "podman".
	Podman string `toml:"podman"`
	// PodmanRunArgs are added to every podman run (for example
	// ["--runtime", "runc"]). Default none.
	PodmanRunArgs []string `toml:"podman_run_args"`
	// LogMaxMiB is the size at which a workload's log is rotated; 0 turns
	// the cap off. Default 16.
	LogMaxMiB int64 `toml:"log_max_mib"`
	// LogKeep is how many rotated parts of a workload's log are kept
	// besides the current one (<id>.log.1 ... .<keep>). Default 2.
	LogKeep int `toml:"log_keep"`
	// WorkloadDirMaxMiB bounds a workload's home and checkpoint
	// directories together; a workload over it is killed (and no file of
	// it outgrows it: RLIMIT_FSIZE). 0: no bound. Default 1024.
	WorkloadDirMaxMiB int64 `toml:"workload_dir_max_mib"`
	// WorkloadDirMaxFiles bounds the entries there; 0: no bound. Default
	// 100000.
	WorkloadDirMaxFiles int64 `toml:"workload_dir_max_files"`
	// DiskCheckInterval is how often the directories of running
	// workloads are measured. Default 1s.
	DiskCheckInterval time.Duration `toml:"disk_check_interval"`
}

// CourierSection is the [courier] section: the durable outbox.
type CourierSection struct {
	// MaxAttempts before a receipt is dead-lettered. Default 10.
	MaxAttempts int `toml:"max_attempts"`
	// BackoffInitial and BackoffCap bound the jittered retry delay.
	// Defaults 1s and 5m.
	BackoffInitial time.Duration `toml:"backoff_initial"`
	BackoffCap     time.Duration `toml:"backoff_cap"`
	// FlushInterval is how often due receipts are sent. Default 1s.
	FlushInterval time.Duration `toml:"flush_interval"`
	// Retention is how long acknowledged receipts are kept. Default 168h.
	Retention time.Duration `toml:"retention"`
}

// UploaderSection is the [uploader] section: checkpoint tiles to Blossom.
// The defaults are uploader.DefaultConfig's; UploaderConfig maps the section
// onto uploader.Config and Validate checks it with uploader.Config.Validate.
type UploaderSection struct {
	// Servers are Blossom base URLs (http:// or https://). Default none:
	// checkpoint uploads are off.
	Servers []string `toml:"servers"`
	// TileSize is the checkpoint tile size in bytes. Default 1048576.
	TileSize int `toml:"tile_size"`
	// DisableRetry bypasses the retry decorator. Default false.
	DisableRetry bool `toml:"disable_retry"`
	// MaxInCallRetries bounds retries inside one upload call (0..100).
	// Default 3.
	MaxInCallRetries int `toml:"max_in_call_retries"`
	// MaxPerTileAttempts is the per-tile budget before upload_giveup.
	// Default 5.
	MaxPerTileAttempts int `toml:"max_per_tile_attempts"`
	// BackoffBase and BackoffCap give the delay min(base^retry, cap), the
	// base taken in seconds (so at least 1s). Defaults 2s and 60s.
	BackoffBase time.Duration `toml:"backoff_base"`
	BackoffCap  time.Duration `toml:"backoff_cap"`
	// Concurrency bounds the tiles uploaded at once (1..256). Default 4.
	Concurrency int `toml:"concurrency"`
	// MinReplicas is how many servers must store a tile for it to count as
	// uploaded; at most the number of servers. Default 1.
	MinReplicas int `toml:"min_replicas"`
	// RequestTimeout bounds one HTTP request to a server. Default 60s.
	RequestTimeout time.Duration `toml:"request_timeout"`
	// AuthTTL is how long a signed upload authorisation (kind 24242) stays
	// valid; at least 1s. Default 5m.
	AuthTTL time.Duration `toml:"auth_ttl"`
}

// CheckpointSection is the [checkpoint] section: how durable workloads'
// checkpoints are noticed, bounded and published (docs/durable.md). The
// defaults are checkpoint's and agent's; CheckpointDeps maps it onto
// agent.CheckpointDeps.
type CheckpointSection struct {
	// PollInterval is how often each durable workload's checkpoint file is
	// looked at (one stat): up to this much recovery point. 10ms to 1m.
	// Default 250ms.
	PollInterval time.Duration `toml:"poll_interval"`
	// MaxMiB bounds a checkpoint this agent publishes or restores (larger
	// ones are refused); the same on every member. 1 to 65536. Default
	// 256.
	MaxMiB int64 `toml:"max_mib"`
	// PublishTimeout bounds one checkpoint's publish: its upload to K
	// servers and its record on M relays. 1s to 1h. Default 30s.
	PublishTimeout time.Duration `toml:"publish_timeout"`
	// MoveTimeout bounds a planned move's final publish; past it the move
	// is aborted and the workload restarted here. 1s to 1h. Default 60s.
	MoveTimeout time.Duration `toml:"move_timeout"`
}

// LogSection is the [log] section.
type LogSection struct {
	// Level is debug, info, warn or error. Default "info".
	Level string `toml:"level"`
	// Format is text or json. Default "text".
	Format string `toml:"format"`
}

// Default returns the documented defaults; the [lease] and [heartbeat]
// values come from lease.DefaultConfig, the [uploader] ones from
// uploader.DefaultConfig. The default relays are three public
// relays: set your own in production.
func Default() Config {
	ad := agent.DefaultConfig()
	lc := lease.DefaultConfig()
	ud := uploader.DefaultConfig()
	return Config{
		Agent: AgentSection{
			DataDir:        "provider-agent-data",
			Listen:         ad.Listen,
			TickInterval:   ad.TickInterval,
			PublishTimeout: ad.PublishTimeout,
			MaxStepAge:     ad.MaxStepAge,
		},
		Lease: LeaseSection{
			Relays:                   append([]string(nil), lc.Relays...),
			Quorum:                   lc.M,
			T1:                       lc.T1,
			T2:                       lc.T2,
			Stale:                    lc.Stale,
			MaxSkew:                  lc.MaxSkew,
			ProvisionTimeout:         lc.ProvisionTimeout,
			TakeoverAfter:            lc.TakeoverAfter,
			RelayDelay:               lc.RelayDelay,
			DialAddrs:                map[string]string{},
			RestartBackoffInitial:    lc.RestartInitial,
			RestartBackoffMax:        lc.RestartMax,
			RestartBackoffResetAfter: lc.RestartResetAfter,
			RestartMaxAttempts:       ad.RestartMaxAttempts,
			EvictWithoutStandby:      lc.EvictWithoutStandby,
			ClaimRetryBase:           lc.ClaimRetryBase,
			ClaimRetryMax:            lc.ClaimRetryMax,
			ClaimTimeout:             lc.ClaimTimeout,
			ClaimWindow:              lc.ClaimWindow,
		},
		Heartbeat: HeartbeatSection{Interval: lc.HeartbeatInterval, TTL: heartbeat.DefaultHeartbeatTTL},
		Backend: BackendSection{Kind: "process", StopGrace: backend.DefaultProcessConfig().StopGrace,
			Containment: string(backend.DefaultProcessConfig().Containment),
			Isolation:   string(backend.DefaultProcessConfig().Isolation), WorkloadUIDs: backend.DefaultWorkloadUIDs.String(),
			Podman: "podman", PodmanRunArgs: []string{},
			LogMaxMiB: backend.DefaultLogLimit.MaxBytes >> 20, LogKeep: backend.DefaultLogLimit.Keep,
			WorkloadDirMaxMiB: backend.DefaultDirLimit.MaxBytes >> 20, WorkloadDirMaxFiles: backend.DefaultDirLimit.MaxFiles,
			DiskCheckInterval: backend.DefaultDirLimit.Interval},
		Courier: CourierSection{
			MaxAttempts:    ad.Courier.MaxAttempts,
			BackoffInitial: ad.Courier.InitialBackoff,
			BackoffCap:     ad.Courier.MaxBackoff,
			FlushInterval:  ad.Courier.FlushInterval,
			Retention:      ad.Courier.Retention,
		},
		Uploader: UploaderSection{
			Servers:            ud.Servers,
			TileSize:           ud.TileSize,
			DisableRetry:       ud.DisableRetry,
			MaxInCallRetries:   ud.MaxInCallRetries,
			MaxPerTileAttempts: ud.MaxPerTileAttempts,
			BackoffBase:        time.Duration(ud.BackoffBase * float64(time.Second)),
			BackoffCap:         ud.BackoffCap,
			Concurrency:        ud.Concurrency,
			MinReplicas:        ud.MinReplicas,
			RequestTimeout:     ud.RequestTimeout,
			AuthTTL:            ud.AuthTTL,
		},
		Checkpoint: CheckpointSection{
			PollInterval:   checkpoint.DefaultPollInterval,
			MaxMiB:         checkpoint.DefaultMaxBytes >> 20,
			PublishTimeout: agent.DefaultCheckpointPublishTimeout,
			MoveTimeout:    agent.DefaultMoveTimeout,
		},
		Log: LogSection{Level: "info", Format: "text"},
	}
}

// DBPath is the SQLite file: <data_dir>/provider-agent.db.
func (c Config) DBPath() string { return filepath.Join(c.Agent.DataDir, DBFileName) }

// KeyFilePath is agent.key_file, or <data_dir>/identity.key when unset.
func (c Config) KeyFilePath() string {
	if c.Agent.KeyFile != "" {
		return c.Agent.KeyFile
	}
	return filepath.Join(c.Agent.DataDir, "identity.key")
}

// BackendLogDir is backend.log_dir, or <data_dir>/logs when unset.
func (c Config) BackendLogDir() string {
	if c.Backend.LogDir != "" {
		return c.Backend.LogDir
	}
	return filepath.Join(c.Agent.DataDir, "logs")
}

// DefaultIsolatedWorkloadDir is backend.workload_dir's default when
// workloads are isolated.
const DefaultIsolatedWorkloadDir = "/var/lib/provider-agent/workloads"

// BackendWorkloadDir is backend.workload_dir, or its default: with
// isolation "none" <data_dir>/workloads, else
// DefaultIsolatedWorkloadDir (a workload user must be able to reach its
// directory, and the data dir is private).
func (c Config) BackendWorkloadDir() string {
	switch {
	case c.Backend.WorkloadDir != "":
		return c.Backend.WorkloadDir
	case c.Backend.Isolation == string(backend.IsolateNone):
		return filepath.Join(c.Agent.DataDir, "workloads")
	}
	return DefaultIsolatedWorkloadDir
}

// ProcessConfig maps the [backend] section onto backend.ProcessConfig
// (a validated config's).
func (c Config) ProcessConfig() backend.ProcessConfig {
	pc := backend.DefaultProcessConfig()
	pc.StopGrace = c.Backend.StopGrace
	pc.LogDir = c.BackendLogDir()
	pc.Containment = backend.ContainMode(c.Backend.Containment)
	pc.Isolation = backend.IsolationMode(c.Backend.Isolation)
	pc.WorkloadUser = c.Backend.WorkloadUser
	if r, err := backend.ParseUIDRange(c.Backend.WorkloadUIDs); err == nil {
		pc.WorkloadUIDs = r
	}
	pc.WorkloadDir = c.BackendWorkloadDir()
	pc.Log = backend.LogLimit{MaxBytes: c.Backend.LogMaxMiB << 20, Keep: c.Backend.LogKeep}
	pc.Dirs = backend.DirLimit{MaxBytes: c.Backend.WorkloadDirMaxMiB << 20, MaxFiles: c.Backend.WorkloadDirMaxFiles,
		Interval: c.Backend.DiskCheckInterval}
	return pc
}

// PodmanConfig maps the [backend] section onto backend.PodmanConfig.
func (c Config) PodmanConfig() backend.PodmanConfig {
	return backend.PodmanConfig{ProcessConfig: c.ProcessConfig(), Podman: c.Backend.Podman,
		RunArgs: append([]string(nil), c.Backend.PodmanRunArgs...)}
}

// Parse decodes TOML data over the defaults. Unknown keys, durations given as
// numbers and values of the wrong type are rejected with an error naming the
// key. Parse does not validate; call Validate.
func Parse(data []byte) (Config, error) {
	c := Default()
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&c)
	if err != nil {
		return Config{}, &parseError{msg: "config: " + err.Error(), err: err}
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return Config{}, &parseError{msg: "config: unknown key " + strings.Join(keys, ", ")}
	}
	// A bare integer would silently become nanoseconds: demand a string.
	var bad error
	walkFields(&c, func(section, key string, v reflect.Value) {
		if bad == nil && v.Type() == durationType && md.IsDefined(section, key) && md.Type(section, key) != "String" {
			bad = &parseError{msg: fmt.Sprintf("config: %s.%s: want a duration string such as \"30s\", got %s",
				section, key, strings.ToLower(md.Type(section, key)))}
		}
	})
	if bad != nil {
		return Config{}, bad
	}
	return c, nil
}

// Load reads the TOML file at path over the defaults; path "" returns the
// defaults. It does not apply environment overrides or validate.
func Load(path string) (Config, error) {
	if path == "" {
		return Default(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, &parseError{msg: fmt.Sprintf("config: read %s: %v", path, err), err: err}
	}
	c, err := Parse(data)
	if err != nil {
		var pe *parseError
		if errors.As(err, &pe) {
			return Config{}, &parseError{msg: "config " + path + ": " + strings.TrimPrefix(pe.msg, "config: "), err: pe.err}
		}
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// parseError is a bad config file or environment variable; it matches
// ErrInvalid with errors.Is and unwraps to the decoder's error, if any.
type parseError struct {
	msg string
	err error
}

func (e *parseError) Error() string        { return e.msg }
func (e *parseError) Unwrap() error        { return e.err }
func (e *parseError) Is(target error) bool { return target == ErrInvalid }

var durationType = reflect.TypeOf(time.Duration(0))

// walkFields calls fn for every leaf setting of c with its TOML section and
// key.
func walkFields(c *Config, fn func(section, key string, v reflect.Value)) {
	root := reflect.ValueOf(c).Elem()
	for i := 0; i < root.NumField(); i++ {
		section := root.Type().Field(i).Tag.Get("toml")
		sv := root.Field(i)
		for j := 0; j < sv.NumField(); j++ {
			fn(section, sv.Type().Field(j).Tag.Get("toml"), sv.Field(j))
		}
	}
}
