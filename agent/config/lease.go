package config

import (
	"errors"
	"strings"

	"provideragent/lease"
)

// LeaseConfig maps the [lease] and [heartbeat] sections onto the lease
// machine's configuration (N is the number of relays). Call it on a
// validated Config so the relay URLs are normalised.
func (c Config) LeaseConfig() lease.Config {
	l := c.Lease
	return lease.Config{
		M:                   l.Quorum,
		N:                   len(l.Relays),
		Relays:              append([]string(nil), l.Relays...),
		T1:                  l.T1,
		T2:                  l.T2,
		Stale:               l.Stale,
		MaxSkew:             l.MaxSkew,
		ProvisionTimeout:    l.ProvisionTimeout,
		TakeoverAfter:       l.TakeoverAfter,
		RelayDelay:          l.RelayDelay,
		HeartbeatInterval:   c.Heartbeat.Interval,
		RestartInitial:      l.RestartBackoffInitial,
		RestartMax:          l.RestartBackoffMax,
		RestartResetAfter:   l.RestartBackoffResetAfter,
		EvictWithoutStandby: l.EvictWithoutStandby,
		ClaimRetryBase:      l.ClaimRetryBase,
		ClaimRetryMax:       l.ClaimRetryMax,
		ClaimTimeout:        l.ClaimTimeout,
	}
}

// checkLease runs the lease machine's own validation as a backstop behind the
// field checks of check, so a rule added to lease.Config.Validate also stops
// startup.
func (c *Config) checkLease() error {
	if err := c.LeaseConfig().Validate(); err != nil {
		msg := err.Error()
		if errors.Is(err, lease.ErrInvalidConfig) {
			msg = strings.TrimPrefix(msg, lease.ErrInvalidConfig.Error()+": ")
		}
		return &FieldError{Path: "lease", Value: "{...}" /* the whole section */, Reason: msg}
	}
	return nil
}
