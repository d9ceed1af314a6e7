package lease

import "time"

// DemoConfig returns short timings that pass Validate, for the demo, local
// trials and tests, never production: heartbeat 1 s, stale 3 s, t1 2 s,
// t2 3 s, max_skew 1 s, relay_delay 1 s, takeover_after 12 s (a failover
// in about 10 s), over relays with quorum M = 2 (1 for a single relay).
func DemoConfig(relays []string) Config {
	c := DefaultConfig()
	c.M, c.N, c.Relays = min(2, len(relays)), len(relays), relays
	c.HeartbeatInterval = time.Second
	c.Stale = 3 * time.Second
	c.T1 = 2 * time.Second
	c.T2 = 3 * time.Second
	c.MaxSkew = time.Second
	c.RelayDelay = time.Second
	c.TakeoverAfter = 12 * time.Second
	c.ProvisionTimeout = 5 * time.Second
	c.RestartInitial = 500 * time.Millisecond
	c.RestartMax = 2 * time.Second
	c.RestartResetAfter = 10 * time.Second
	c.ClaimRetryBase = time.Second
	c.ClaimRetryMax = 4 * time.Second
	c.ClaimTimeout = 5 * time.Second
	return c
}
