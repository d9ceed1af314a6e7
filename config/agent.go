package config

import (
	"provideragent/agent"
	"provideragent/courier"
)

// AgentConfig maps the validated file config onto the agent's, starting
// from agent.DefaultConfig for what the file does not set; secret is the
// identity's secret key. (config imports agent, never the reverse.)
func (c Config) AgentConfig(secret string) agent.Config {
	ac := agent.DefaultConfig()
	ac.Lease = c.LeaseConfig()
	ac.SecretKey = secret
	ac.TrustedIssuers = c.Agent.TrustedIssuers
	ac.Listen = c.Agent.Listen
	ac.TickInterval = c.Agent.TickInterval
	ac.PublishTimeout = c.Agent.PublishTimeout
	ac.MaxStepAge = c.Agent.MaxStepAge
	ac.HeartbeatTTL = c.Heartbeat.TTL
	ac.DialAddrs = c.Lease.DialAddrs
	ac.RestartMaxAttempts = c.Lease.RestartMaxAttempts
	ac.Courier = c.CourierConfig()
	return ac
}

// CourierConfig is the outbox's config: the agent's (agent.DefaultConfig)
// with the [courier] section applied. The courier subcommands open the
// outbox with it too, so a flush from the command line retries and
// dead-letters as the running agent does.
func (c Config) CourierConfig() courier.Config {
	cc := agent.DefaultConfig().Courier
	cc.MaxAttempts = c.Courier.MaxAttempts
	cc.InitialBackoff = c.Courier.BackoffInitial
	cc.MaxBackoff = c.Courier.BackoffCap
	cc.FlushInterval = c.Courier.FlushInterval
	cc.Retention = c.Courier.Retention
	return cc
}
