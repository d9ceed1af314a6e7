package config

import "provideragent/lease"

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
		ClaimWindow:         l.ClaimWindow,
	}
}
