package config

import (
	"errors"
	"fmt"
	"time"

	"provideragent/uploader"
)

// UploaderConfig maps the [uploader] section onto the uploader's
// configuration: backoff_base, a duration in the file, becomes float seconds.
// Call it on a validated Config.
func (c Config) UploaderConfig() uploader.Config {
	u := c.Uploader
	uc := uploader.DefaultConfig()
	uc.Servers = append([]string(nil), u.Servers...)
	uc.DisableRetry = u.DisableRetry
	uc.MaxInCallRetries = u.MaxInCallRetries
	uc.MaxPerTileAttempts = u.MaxPerTileAttempts
	uc.BackoffBase = u.BackoffBase.Seconds()
	uc.BackoffCap = u.BackoffCap
	uc.Concurrency = u.Concurrency
	uc.MinReplicas = u.MinReplicas
	uc.TileSize = u.TileSize
	uc.RequestTimeout = u.RequestTimeout
	uc.AuthTTL = u.AuthTTL
	return uc
}

// checkUploader validates the [uploader] section with the uploader's own
// Validate, so its rules live in one place, and reports the first problem
// under its TOML path. The two rules about durations that only make sense in
// the file's form are checked here first.
func (c *Config) checkUploader() error {
	u := c.Uploader
	if u.BackoffBase < time.Second {
		return invalid("uploader.backoff_base", u.BackoffBase, "must be >= 1s (the base of base^retry, in seconds)")
	}
	if u.BackoffCap < u.BackoffBase {
		return invalid("uploader.backoff_cap", u.BackoffCap, fmt.Sprintf("must be >= uploader.backoff_base (%s)", u.BackoffBase))
	}
	err := c.UploaderConfig().Validate()
	if err == nil {
		return nil
	}
	var fe *uploader.FieldError
	if errors.As(err, &fe) {
		return invalid("uploader."+fe.Field, fe.Value, fe.Reason)
	}
	return &FieldError{Path: "uploader", Value: "{...}" /* the whole section */, Reason: err.Error()}
}
