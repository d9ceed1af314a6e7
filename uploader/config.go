package uploader

import (
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"provideragent/internal/backoff"
)

// Config configures the uploader; the agent reads it from its TOML file
// under [uploader]. Zero values are not defaults: start from DefaultConfig.
type Config struct {
	// Servers are the Blossom server base URLs (http or https). Empty means
	// the uploader is not used; BuildUploader then refuses to build one.
	Servers []string `toml:"servers"`
	// DisableRetry bypasses the retry decorator (debugging): BuildUploader
	// returns the bare Blossom uploader. Default false.
	DisableRetry bool `toml:"disable_retry"`
	// MaxInCallRetries bounds the retries inside one UploadPending call.
	// Default 3.
	MaxInCallRetries int `toml:"max_in_call_retries"`
	// MaxPerTileAttempts is the per-tile budget of rejected attempts across
	// calls; a tile reaching it moves to upload_giveup. Default 5.
	MaxPerTileAttempts int `toml:"max_per_tile_attempts"`
	// BackoffBase is the base, in seconds, of the sleep before retry n:
	// min(BackoffBase^n seconds, BackoffCap). Default 2.
	BackoffBase float64 `toml:"backoff_base"`
	// BackoffCap caps the sleep between retries and is added to now for the
	// next_retry_at hint. Default 60s.
	BackoffCap time.Duration `toml:"backoff_cap"`
	// Concurrency bounds the tiles uploaded at once. Default 4.
	Concurrency int `toml:"concurrency"`
	// MinReplicas is how many servers must store a tile for it to count as
	// uploaded. Default 1.
	MinReplicas int `toml:"min_replicas"`
	// TileSize is the size in bytes of the tiles a checkpoint is cut into.
	// Default 1 MiB.
	TileSize int `toml:"tile_size"`
	// RequestTimeout bounds one HTTP request. Default 60s.
	RequestTimeout time.Duration `toml:"request_timeout"`
	// AuthTTL is how long a kind 24242 authorisation stays valid (its
	// expiration tag). Default 5m.
	AuthTTL time.Duration `toml:"auth_ttl"`
}

// DefaultConfig returns the documented defaults (no servers).
func DefaultConfig() Config {
	return Config{
		MaxInCallRetries:   3,
		MaxPerTileAttempts: 5,
		BackoffBase:        2,
		BackoffCap:         60 * time.Second,
		Concurrency:        4,
		MinReplicas:        1,
		TileSize:           DefaultTileSize,
		RequestTimeout:     60 * time.Second,
		AuthTTL:            5 * time.Minute,
	}
}

// Validate checks every field and names the first bad one with its value,
// as a *FieldError.
func (c Config) Validate() error {
	bad := func(field string, v any, want string) error {
		return &FieldError{Field: field, Value: v, Reason: want}
	}
	for i, s := range c.Servers {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return bad(fmt.Sprintf("servers[%d]", i), s, "want an http(s) base URL")
		}
	}
	switch {
	case c.MaxInCallRetries < 0 || c.MaxInCallRetries > 100:
		return bad("max_in_call_retries", c.MaxInCallRetries, "want 0..100")
	case c.MaxPerTileAttempts < 1:
		return bad("max_per_tile_attempts", c.MaxPerTileAttempts, "want >= 1")
	case !(c.BackoffBase >= 1) || math.IsInf(c.BackoffBase, 0):
		return bad("backoff_base", c.BackoffBase, "want a finite number >= 1")
	case c.BackoffCap <= 0:
		return bad("backoff_cap", c.BackoffCap, "want > 0")
	case c.Concurrency < 1 || c.Concurrency > 256:
		return bad("concurrency", c.Concurrency, "want 1..256")
	case c.MinReplicas < 1:
		return bad("min_replicas", c.MinReplicas, "want >= 1")
	case len(c.Servers) > 0 && c.MinReplicas > len(c.Servers):
		return bad("min_replicas", c.MinReplicas, fmt.Sprintf("want <= the %d configured servers", len(c.Servers)))
	case c.TileSize < 1 || c.TileSize > MaxTileSize:
		return bad("tile_size", c.TileSize, fmt.Sprintf("want 1..%d", MaxTileSize))
	case c.RequestTimeout <= 0:
		return bad("request_timeout", c.RequestTimeout, "want > 0")
	case c.AuthTTL < time.Second:
		return bad("auth_ttl", c.AuthTTL, "want >= 1s")
	}
	return nil
}

// FieldError is a Config field that failed Validate. Its message is
// `uploader.FIELD = VALUE: REASON: bad uploader config` (string values
// quoted); errors.Is(err, ErrBadConfig) holds. Field is the TOML key, e.g.
// "concurrency" or "servers[1]", so a caller reading the config from its own
// file can name the setting.
type FieldError struct {
	Field  string // TOML key, e.g. "min_replicas" or "servers[0]"
	Value  any    // the offending value
	Reason string // what is wanted instead
}

func (e *FieldError) Error() string {
	v := fmt.Sprint(e.Value)
	if s, ok := e.Value.(string); ok {
		v = strconv.Quote(s)
	}
	return "uploader." + e.Field + " = " + v + ": " + e.Reason + ": " + ErrBadConfig.Error()
}

// Unwrap returns ErrBadConfig.
func (e *FieldError) Unwrap() error { return ErrBadConfig }

// Backoff is the in-call retry policy: backoff.Policy from BackoffBase
// seconds growing by BackoffBase up to BackoffCap, no jitter (one upload
// call's retries; uploads are not synchronised across agents). Retry n
// (1-based) sleeps Delay(n-1, 0) = min(BackoffBase^n seconds, BackoffCap):
// with the defaults 2s, 4s, 8s.
func (c Config) Backoff() backoff.Policy {
	return backoff.Policy{Initial: time.Duration(c.BackoffBase * float64(time.Second)), Factor: c.BackoffBase, Max: c.BackoffCap}
}

// NextRetryAt is the operator hint returned when the in-call budget runs out:
// now + BackoffCap.
func (c Config) NextRetryAt(now time.Time) time.Time { return now.Add(c.BackoffCap) }

// Deps are the injected dependencies of the uploaders.
type Deps struct {
	// Store holds the tiles (required).
	Store *Store
	// SecretKey is the secret key (64 hex characters or nsec) that signs the kind
	// 24242 authorisations (required by the Blossom uploader).
	SecretKey string
	// Logger receives INFO/WARN/ERROR lines; nil discards them.
	Logger *slog.Logger
	// Metrics are shared by both layers; nil means unregistered counters.
	Metrics *Metrics
	// Clock drives the decorator's sleeps and timestamps; nil = SystemClock.
	Clock Clock
	// HTTPClient is used for all requests; nil = a client with
	// Config.RequestTimeout.
	HTTPClient *http.Client
}

// BuildUploader is the composition root: the Blossom uploader wrapped in the
// RetryUploader, or, when cfg.DisableRetry is set, the bare Blossom uploader
// (logged at INFO).
func BuildUploader(cfg Config, deps Deps) (Uploader, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("build uploader: %w", err)
	}
	if len(cfg.Servers) == 0 {
		return nil, fmt.Errorf("build uploader: uploader.servers is empty: %w", ErrBadConfig)
	}
	deps.Metrics = deps.Metrics.orNop() // one set for both layers when none is given
	inner, err := NewBlossomUploader(cfg, deps)
	if err != nil {
		return nil, fmt.Errorf("build uploader: %w", err)
	}
	log := loggerOrDiscard(deps.Logger)
	if cfg.DisableRetry {
		log.Info("uploader retry decorator disabled by config; using the bare blossom uploader",
			"disable_retry", true, "servers", len(cfg.Servers))
		return inner, nil
	}
	return NewRetryUploader(inner, cfg, deps)
}
