package config

import "provideragent/agent"

// AgentConfig maps the validated file config onto the agent's, starting
// from agent.DefaultConfig for what the file does not set; secret is the
// identity's secret key. (agent/config imports agent, never the reverse.)
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
	ac.Courier.MaxAttempts = c.Courier.MaxAttempts
	ac.Courier.InitialBackoff = c.Courier.BackoffInitial
	ac.Courier.MaxBackoff = c.Courier.BackoffCap
	ac.Courier.FlushInterval = c.Courier.FlushInterval
	ac.Courier.Retention = c.Courier.Retention
	return ac
}
