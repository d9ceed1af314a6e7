// Package config holds every setting of the provider agent, loads it from one
// TOML file, environment variables (PROVIDER_AGENT_<SECTION>_<KEY>) and the
// common command-line flags, in that order of precedence, and validates it.
//
// Start from Default or Load, let Flags.Resolve apply the overrides and call
// Validate: an invalid setting yields one error naming its TOML path, the value
// and the reason. The file keyfile.go creates and loads the agent's identity
// key file, refusing files readable by anyone but the owner.
package config
