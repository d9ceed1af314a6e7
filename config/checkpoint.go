package config

import (
	"time"

	"provideragent/agent"
)

// CheckpointDeps maps the [checkpoint] and [uploader] sections onto what
// the agent's durable workloads need; the caller adds the tile store and
// the uploader's metrics. Call it on a validated Config.
func (c Config) CheckpointDeps() agent.CheckpointDeps {
	u := c.UploaderConfig()
	k := c.Checkpoint
	return agent.CheckpointDeps{
		Servers: u.Servers, Uploader: u, PollInterval: k.PollInterval, MaxBytes: k.MaxMiB << 20,
		PublishTimeout: k.PublishTimeout, MoveTimeout: k.MoveTimeout,
	}
}

// Bounds of the [checkpoint] section.
const (
	minPollInterval      = 10 * time.Millisecond
	maxPollInterval      = time.Minute
	maxCheckpointMiB     = 64 << 10
	minCheckpointTimeout = time.Second
	maxCheckpointTimeout = time.Hour
)

// checkCheckpoint validates the [checkpoint] section.
func (c *Config) checkCheckpoint() error {
	k := c.Checkpoint
	if k.PollInterval < minPollInterval || k.PollInterval > maxPollInterval {
		return invalid("checkpoint.poll_interval", k.PollInterval, "must be 10ms to 1m")
	}
	if k.MaxMiB < 1 || k.MaxMiB > maxCheckpointMiB {
		return invalid("checkpoint.max_mib", k.MaxMiB, "must be 1 to 65536")
	}
	for _, d := range []struct {
		path string
		v    time.Duration
	}{{"checkpoint.publish_timeout", k.PublishTimeout}, {"checkpoint.move_timeout", k.MoveTimeout}} {
		if d.v < minCheckpointTimeout || d.v > maxCheckpointTimeout {
			return invalid(d.path, d.v, "must be 1s to 1h")
		}
	}
	return nil
}
