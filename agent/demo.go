package agent

import (
	"time"

	"provideragent/lease"
)

// DemoLeaseConfig returns short lease timings that pass lease.Config.Validate
// (heartbeat 1 s, stale 3 s, t1 2 s, t2 3 s, max_skew 1 s, relay_delay 1 s,
// takeover_after 12 s: a failover in about 10 s) over relays with quorum
// M = 2 (1 for a single relay). The demo and the tests use it; production
// uses lease.DefaultConfig.
func DemoLeaseConfig(relays []string) lease.Config {
	c := lease.DefaultConfig()
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

// DemoConfig returns the agent settings the demo and the tests run with:
// DemoLeaseConfig(relays), identity secretKey, timeline name, no status
// listener, 2 s publishes, workload processes stopped when Run returns, and
// an outbox that retries within a second.
func DemoConfig(relays []string, secretKey, name string) Config {
	c := DefaultConfig()
	c.Lease = DemoLeaseConfig(relays)
	c.SecretKey = secretKey
	c.Name = name
	c.Listen = ""
	c.PublishTimeout = 2 * time.Second
	c.StopWorkloadsOnExit = true
	c.Courier.MaxAttempts = 20
	c.Courier.InitialBackoff = 200 * time.Millisecond
	c.Courier.MaxBackoff = time.Second
	c.Courier.ForwardTimeout = 5 * time.Second
	c.Courier.ClaimTimeout = 6 * time.Second
	return c
}
