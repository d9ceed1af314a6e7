package config

// Example returns a commented example config file. Every setting appears
// with its default value; the comment on lease.relays says to replace the
// default public relays. It trusts no lease issuer (an empty trusted_issuers, with
// a comment on how to add one): an example copied as is must not let a key
// held by someone else run commands on the node. Tests check that it parses,
// validates and trusts no one.
func Example() string { return exampleTOML }

const exampleTOML = `# provider-agent configuration (TOML). Every key is optional: a key left
# out keeps the default shown here. Do change lease.relays (the default is
# three public relays). Durations are strings: "500ms", "30s", "5m", "1h".
# Any key can be overridden by the environment as PROVIDER_AGENT_<SECTION>_<KEY>
# (for example PROVIDER_AGENT_LEASE_QUORUM=2; lists are comma separated), and
# the common ones by flags (--data-dir, --relay, --quorum, --listen, --key-file).

[agent]
# Identity secret key (hex or nsec), mode 0600; create it with
# 'provider-agent keygen --out FILE'. "" means <data_dir>/identity.key.
key_file = ""
# Holds provider-agent.db (all state) and logs/ (workload output).
data_dir = "provider-agent-data"
# /metrics, /healthz and /status, without authentication: loopback by
# default; another address is allowed, with a WARN (firewall it). "" disables.
listen = "127.0.0.1:9464"
# Public keys (hex or npub) whose lease grants (kind 38388) are accepted.
# Whoever holds the secret of a listed key can make this node run any
# command, so the example trusts no one. Add only keys whose secret you (or
# an issuer you trust) hold, for example the npub that
# 'provider-agent keygen --out issuer.key' prints:
# trusted_issuers = ["npub1..."]
# Local operator grants ('provider-agent workloads grant') need no issuer.
trusted_issuers = []
# How often the lease machine ticks; at most lease.stale.
tick_interval = "250ms"
# How long one publish waits for the relays' OK answers.
publish_timeout = "5s"
# /healthz answers 503 when the machine loop made no step for this long.
max_step_age = "30s"
# The Go runtime's soft memory limit in MiB (what GOMEMLIMIT sets): 0 leaves
# none. Set it below the node's memory for the agent, above its steady RSS
# (docs/operations.md, "Memory": 900 at 100,000 workloads).
memory_limit_mib = 0

[lease]
# The N relays all providers of a workload judge quorum over (at most 32).
# The default is these three public relays: set the relays you and the
# other providers of your workloads use (a published grant lists them).
relays = ["wss://relay.damus.io", "wss://nos.lol", "wss://relay.nostr.band"]
# M: a provider has quorum while at least M relays carry its fresh heartbeat.
quorum = 2
# Debounce from the moment quorum was lost until the workload is Suspect.
t1 = "120s"
# Time spent Suspect before the workload is evicted (fenced).
t2 = "300s"
# A heartbeat counts for this long after it was received (local clock);
# at least twice heartbeat.interval.
stale = "180s"
# Heartbeats dated further in the future than this never count.
max_skew = "30s"
# A workload that does not reach quorum within this fails; at most t1 + t2.
provision_timeout = "300s"
# A standby claims a workload after seeing no Live claim for this long.
# Must exceed t1 + t2 + stale + max_skew + relay_delay.
takeover_after = "720s"
# Bound on delivery through a relay that is up.
relay_delay = "10s"
# Dial a relay at another address (a proxy or tunnel) while events stay
# labelled with the relay's canonical URL, for example
# dial_addrs = {"wss://relay.damus.io" = "ws://127.0.0.1:7000"}
dial_addrs = {}
# Respawn of an exited workload: the delay doubles from initial to max and
# the attempt count resets after reset_after of healthy running (how many
# attempts is the lease's restart_policy).
restart_backoff_initial = "5s"
restart_backoff_max = "5m"
restart_backoff_reset_after = "10m"
# Respawns allowed for grants whose restart policy gives no count (0 = never).
restart_max_attempts = 5
# Also stop workloads without a standby when quorum is lost.
evict_without_standby = false
# Claim step retries: base doubling up to max; each standby rank claims
# claim_retry_base + 2 x relay_delay (35s) after the rank before it;
# a claim without relay feedback within claim_timeout is withdrawn.
claim_retry_base = "15s"
claim_retry_max = "5m"
claim_timeout = "30s"
# At most this many claims wait for their publish's answer at once; more
# claim steps start as answers come (0 = no bound).
claim_window = 256

[heartbeat]
# Interval between our heartbeats; at most half of lease.stale.
interval = "60s"
# NIP-40 expiration of our heartbeats after their created_at: at least 300s
# (Paygress's live window) and at least lease.stale + lease.max_skew. Raise
# it to keep heartbeat history on relays that delete expired events.
ttl = "300s"

[backend]
# "process": the lease's command runs under a supervisor of the agent's.
# "podman": the lease's OCI image runs with podman (root and podman needed),
# inside the PID namespace of such a supervisor, so that it dies with the
# agent.
kind = "process"
# SIGTERM, then SIGKILL after this long.
stop_grace = "10s"
# One log file per workload (<id>.log, stdout and stderr); "" means
# <data_dir>/logs.
log_dir = ""
# How each workload's processes are held together so that none outlives
# its supervisor, also one that clears its environment and calls setsid:
# "auto" (a PID namespace whose init is the supervisor, and a cgroup killed
# whole, where the host allows: root, or user namespaces, and a cgroup the
# agent may write; a WARN at start and on /status for what is missing),
# "pidns" or "cgroup" (run refuses to start without it), "none" (a WARN).
containment = "auto"
# "user": each workload runs as an unprivileged user that is not the
# agent's (a uid of its own from workload_uids, or workload_user), with a
# clean environment and a private home and checkpoint directory, so that it
# cannot read the key file or the database or reach other workloads. Needs
# root: where the agent cannot isolate, it says so and starts no workload.
# "none": workloads run as the agent's user with its environment; unsafe for
# workloads of third parties.
isolation = "user"
# One user (name or uid) for every workload; "" gives each workload a uid of
# its own from workload_uids (better: workloads cannot reach each other).
workload_user = ""
# Where per-workload uids come from (FIRST-LAST); ids no other user has.
workload_uids = "1900000000-1900065535"
# The workloads' directories; "" means /var/lib/provider-agent/workloads
# (isolation "user": it must be reachable by the workload users, and the
# data dir is private), or <data_dir>/workloads (isolation "none").
workload_dir = ""
# kind = "podman": the podman command, and options added to every podman run
# (e.g. ["--runtime", "runc"]).
podman = "podman"
podman_run_args = []
# Disk limits per workload (docs/operations.md, "Disk limits"). Its log
# (stdout and stderr) is rotated at log_max_mib, log_keep rotated parts kept
# (<id>.log.1 the newest): at most log_max_mib x (log_keep + 1) per
# workload; 0 turns the cap off. Its home and checkpoint directories are
# measured every disk_check_interval: a workload over workload_dir_max_mib
# or workload_dir_max_files is killed (the restart policy applies), and no
# file of it grows past workload_dir_max_mib; 0 turns a bound off.
log_max_mib = 16
log_keep = 2
workload_dir_max_mib = 1024
workload_dir_max_files = 100000
disk_check_interval = "1s"

[courier]
# Durable outbox for revocations (promotion claims are published by the
# claim step itself and re-issued from the persisted machine after a crash).
max_attempts = 10
backoff_initial = "1s"
backoff_cap = "5m"
# How often due receipts are delivered when nothing wakes the outbox sooner
# (a new revocation wakes it at once).
flush_interval = "1s"
# Acknowledged receipts are pruned after this long.
retention = "168h"

[uploader]
# Blossom servers for checkpoint tiles; empty = checkpoint uploads off.
# The running agent uploads pending tiles every 10 s (sooner when a retry
# is due). 'provider-agent dev-blossom' is a local one to try it with.
servers = []
tile_size = 1048576
# true bypasses the retry decorator.
disable_retry = false
max_in_call_retries = 3
max_per_tile_attempts = 5
# Retry delay min(backoff_base^retry, backoff_cap), the base in seconds
# (at least "1s").
backoff_base = "2s"
backoff_cap = "60s"
# Tiles uploaded at once (1 to 256).
concurrency = 4
# Servers that must store a tile before it counts as uploaded
# (at most the number of servers).
min_replicas = 1
# Bound on one HTTP request to a server.
request_timeout = "60s"
# How long a signed upload authorisation (kind 24242) stays valid.
auth_ttl = "5m"

[checkpoint]
# Durable workloads (a grant with a checkpoint policy; docs/durable.md).
# How often each one's checkpoint file is looked at (one stat): up to this
# much recovery point. 10ms to 1m.
poll_interval = "250ms"
# Largest checkpoint published or restored, in MiB (1 to 65536): the same
# on every member, or a restore refuses what another published.
max_mib = 256
# Bound on one checkpoint's publish: its upload to K servers and its record
# on M relays (1s to 1h).
publish_timeout = "30s"
# Bound on a planned move's final publish; past it the workload is
# restarted here (1s to 1h).
move_timeout = "60s"

[log]
# debug, info, warn or error.
level = "info"
# text or json.
format = "text"
`
