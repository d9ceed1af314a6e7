package agent

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"provideragent/checkpoint"
	"provideragent/heartbeat"
	"provideragent/internal/promreg"
	"provideragent/lease"
	"provideragent/relay"
)

// metrics are the agent's Prometheus collectors, all prefixed agent_. Relay
// connections, reconnects, frames received and publish outcomes are
// relay's relay_* metrics on the same registry.
type metrics struct {
	workloads      *prometheus.GaugeVec   // by state
	transitions    *prometheus.CounterVec // from, to
	quorum         *prometheus.GaugeVec   // provider: 1 when it has relay quorum now
	ownQuorum      prometheus.Gauge       // quorum's value for this agent's own key
	noStandby      prometheus.Gauge       // held workloads with no standby alive (WorkloadStatus.NoStandby)
	eventsAccepted *prometheus.CounterVec // kind
	eventsRejected *prometheus.CounterVec // reason
	revocations    *prometheus.CounterVec // direction: sent, received
	promotions     *prometheus.CounterVec // outcome
	claimsWaiting  prometheus.Gauge       // claims awaiting their publish's answer (lease.claim_window bounds it)
	respawns       prometheus.Counter
	effects        *prometheus.CounterVec // type
	stepErrors     prometheus.Counter
	stepSeconds    prometheus.Histogram
	clockOffset    prometheus.Gauge // relays' clock minus ours, seconds (median)
	clockSuspect   prometheus.Gauge // 1 while the clock is outside the bound
	savedRows      prometheus.Counter
	beatBytes      prometheus.Gauge // largest event of the last beat
	beatEvents     prometheus.Gauge // events of the last beat
	beatSeconds    prometheus.Histogram
	beatSuperseded *prometheus.CounterVec // by relay
	backlog        prometheus.Gauge       // workloads waiting for their commit
	restores       *prometheus.CounterVec // result
	ckptRefused    *prometheus.CounterVec // reason
	badCopies      *prometheus.CounterVec // server, reason
	blobDeletes    *prometheus.CounterVec // outcome
	ckptPublished  *prometheus.CounterVec // outcome
	moves          *prometheus.CounterVec // outcome
	claimAnswers   *prometheus.CounterVec // outcome, reason: each relay's answer to a promotion claim
	ckptAge        prometheus.Gauge       // oldest last published checkpoint of a watched durable workload
}

// The bounded label values of the agent_* metrics (exported at 0 from the
// start; the metric table in docs/operations.md lists them).
var (
	// EventKinds are agent_events_accepted_total's kind values.
	EventKinds = []string{"heartbeat", "revocation", "promotion", "lease_grant"}
	// RevocationDirections are agent_revocations_total's direction values:
	// queued in our outbox, sent (reached quorum), received from a holder.
	RevocationDirections = []string{"queued", "sent", "received"}
	// PromotionOutcomes are agent_promotions_total's outcome values.
	PromotionOutcomes = []string{"claimed", "expired", "withdrawn", "announced"}
	// EffectTypes are agent_effects_total's type values (effectType).
	EffectTypes = []string{"entered_state", "start", "stop", "publish_revocation", "publish_claim",
		"withdraw_claim", "read_claims", "announce_promotion", "attempt_respawn", "failed", "quorum_report",
		"restore_checkpoint", "restore_report"}
	// RestoreResults are agent_checkpoint_restores_total's result values:
	// a checkpoint placed; the workload starts from nothing (none was
	// published, or a best-effort attempt failed); or a required attempt
	// failed (the lease retries, then gives up).
	RestoreResults = []string{"restored", "fresh", "failed"}
	// PublishOutcomes are agent_checkpoints_published_total's outcome values.
	PublishOutcomes = []string{"published", "abandoned", "failed"}
	// BadCopyReasons are agent_checkpoint_blobs_refused_total's reason
	// values; its server values are the Blossom servers this agent uses
	// (uploader.servers and its leases' own), each exported at 0 with
	// every reason once known.
	BadCopyReasons = []string{checkpoint.RefuseHashMismatch, checkpoint.RefuseTruncatedTile, checkpoint.RefuseBadManifest}
	// DeleteOutcomes are agent_checkpoint_blob_deletes_total's outcome
	// values.
	DeleteOutcomes = []string{"deleted", "failed"}
	// MoveOutcomes are agent_moves_total's outcome values.
	MoveOutcomes = []string{"moved", "aborted"}
	// RefusalReasons are agent_checkpoint_records_refused_total's reason
	// values: the lease's rules, what fetching found, then the ingest's.
	RefusalReasons = refusalReasons()
)

func refusalReasons() []string {
	out := []string{lease.RefuseOtherWorkload, lease.RefuseOtherGrant, lease.RefuseLaterEpoch, lease.RefuseUnknownHolder,
		lease.RefuseWrongSigner, lease.RefuseAfterSuccessorStart, lease.RefuseBehindUnknownEpoch, lease.RefuseBehindEvidence, checkpoint.RefuseHashMismatch, checkpoint.RefuseTruncatedTile,
		checkpoint.RefuseBadManifest, checkpoint.RefuseTooLarge, checkpoint.RefuseBadHint, checkpoint.RefuseUndecryptable}
	for _, r := range heartbeat.AllReasons {
		if !slices.Contains(out, string(r)) {
			out = append(out, string(r))
		}
	}
	return out
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	f, registered := promreg.Factory(reg)
	m := &metrics{
		workloads: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agent_workloads", Help: "Workloads tracked by this agent, by lease state.",
		}, []string{"state"}),
		transitions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_transitions_total", Help: "Workload state transitions, by from and to state.",
		}, []string{"from", "to"}),
		quorum: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "agent_provider_quorum", Help: "1 when the provider (this agent or a holder it watches) has relay quorum now, else 0.",
		}, []string{"provider"}),
		ownQuorum: f.NewGauge(prometheus.GaugeOpts{
			Name: "agent_own_quorum", Help: "1 while this agent's own heartbeats are on at least M relays (its relay quorum), else 0.",
		}),
		noStandby: f.NewGauge(prometheus.GaugeOpts{
			Name: "agent_workloads_without_standby", Help: "Workloads this agent holds that have standbys, none of which it sees alive (no heartbeat within stale): nobody takes over if this node fails.",
		}),
		eventsAccepted: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_events_accepted_total", Help: "Events that passed every check and were fed to the lease machine, by kind.",
		}, []string{"kind"}),
		eventsRejected: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_events_rejected_total", Help: "Events rejected by ingest, by reason.",
		}, []string{"reason"}),
		revocations: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_revocations_total", Help: "Lease revocations, by direction (queued in our outbox, sent to quorum, received).",
		}, []string{"direction"}),
		promotions: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_promotions_total", Help: "Promotion claims, by outcome (claimed, expired before it could be published, withdrawn, announced).",
		}, []string{"outcome"}),
		claimsWaiting: f.NewGauge(prometheus.GaugeOpts{
			Name: "agent_claims_awaiting_answer", Help: "Promotion claims waiting for their publish's answer; at lease.claim_window further claim steps (takeovers, retakes, retries) wait for a slot.",
		}),
		respawns: f.NewCounter(prometheus.CounterOpts{
			Name: "agent_respawns_total", Help: "Workload process respawn attempts.",
		}),
		effects: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_effects_total", Help: "Lease machine effects performed, by type.",
		}, []string{"type"}),
		stepErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "agent_step_errors_total", Help: "Machine steps whose persistence or effects failed.",
		}),
		stepSeconds: f.NewHistogram(prometheus.HistogramOpts{
			Name: "agent_step_seconds", Help: "Time to persist one machine step and run its effects.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		clockOffset: f.NewGauge(prometheus.GaugeOpts{
			Name: "agent_clock_offset_seconds", Help: "The relays' clock minus this node's (median over the relays that answered the last clock check); positive: this clock is slow.",
		}),
		clockSuspect: f.NewGauge(prometheus.GaugeOpts{
			Name: "agent_clock_suspect", Help: "1 while this node's clock is outside the bound (max_skew/2) of the relays': no takeover, held workloads with a standby fenced.",
		}),
		savedRows: f.NewCounter(prometheus.CounterOpts{
			Name: "agent_saved_rows_total", Help: "Workload rows the periodic save wrote (changed by inputs without an effect; rows of steps are written with their step).",
		}),
		beatBytes: f.NewGauge(prometheus.GaugeOpts{
			Name: "agent_heartbeat_event_bytes", Help: "Largest event of the last heartbeat beat (NIP-01 JSON bytes, at most a few over).",
		}),
		beatEvents: f.NewGauge(prometheus.GaugeOpts{
			Name: "agent_heartbeat_events", Help: "Events of the last heartbeat beat: its shards and the ephemeral copy.",
		}),
		beatSeconds: f.NewHistogram(prometheus.HistogramOpts{
			Name: "agent_heartbeat_publish_seconds", Help: "Time to publish one heartbeat beat to one relay: from sending its first event there until the relay answered every event of it (at most publish_timeout).",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10},
		}),
		beatSuperseded: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_heartbeats_superseded_total", Help: "Heartbeat beats never sent to a relay because it was still answering the beat before and a newer one was built (each relay takes one beat at a time).",
		}, []string{"relay"}),
		backlog: f.NewGauge(prometheus.GaugeOpts{
			Name: "agent_backlog_workloads", Help: "Workloads of big machine steps waiting for their batch to be committed.",
		}),
		restores: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_checkpoint_restores_total", Help: "Checkpoint restore attempts before a new epoch's start, by result: restored, fresh (the workload starts from nothing: none was published, or a best-effort attempt failed), failed (a required attempt failed: it is retried).",
		}, []string{"result"}),
		ckptRefused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_checkpoint_records_refused_total", Help: "Checkpoint records (or state URIs) a restore refused, by reason (wrong_signer, later_epoch, after_successor_start, other_grant, hash_mismatch, truncated_tile, ...).",
		}, []string{"reason"}),
		badCopies: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_checkpoint_blobs_refused_total", Help: "Copies of checkpoint blobs (a tile or a manifest) a Blossom server served with wrong bytes, by server and reason (hash_mismatch, truncated_tile, bad_manifest), also when another server then served the blob intact.",
		}, []string{"server", "reason"}),
		blobDeletes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_checkpoint_blob_deletes_total", Help: "Copies of superseded checkpoint blobs this agent asked Blossom servers to delete (BUD-12), by outcome: deleted (or already gone), failed (retried at the next publish unless refused).",
		}, []string{"outcome"}),
		ckptPublished: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_checkpoints_published_total", Help: "New checkpoints of durable workloads, by outcome: published (on K servers and M relays), abandoned (no longer held at its epoch), failed.",
		}, []string{"outcome"}),
		ckptAge: f.NewGauge(prometheus.GaugeOpts{
			Name: "agent_checkpoint_age_seconds", Help: "Age of the oldest last published checkpoint among the durable workloads running here (since their start when none was published): the state a failover now would lose.",
		}),
		moves: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_moves_total", Help: "Planned moves (workloads move) of durable workloads, by outcome: moved (handed over naming the final checkpoint) or aborted.",
		}, []string{"outcome"}),
		claimAnswers: f.NewCounterVec(prometheus.CounterOpts{
			Name: "agent_claim_answers_total", Help: "Each relay's answer to a promotion claim this agent published, by outcome and reason (relay_publish_total's labels): a claim storm that relays refuse shows here.",
		}, []string{"outcome", "reason"}),
	}
	if err := registered(); err != nil {
		return nil, err
	}
	m.exportBoundedLabels()
	return m, nil
}

// exportBoundedLabels creates every bounded label value's series at 0: a
// counter never incremented is then a 0 series from the first scrape (rate()
// and alerts work) instead of no series at all.
func (m *metrics) exportBoundedLabels() {
	for _, st := range lease.States {
		m.workloads.WithLabelValues(string(st))
	}
	for _, k := range EventKinds {
		m.eventsAccepted.WithLabelValues(k)
	}
	for _, r := range heartbeat.AllReasons {
		m.eventsRejected.WithLabelValues(string(r))
	}
	for _, d := range RevocationDirections {
		m.revocations.WithLabelValues(d)
	}
	for _, o := range PromotionOutcomes {
		m.promotions.WithLabelValues(o)
	}
	for _, e := range EffectTypes {
		m.effects.WithLabelValues(e)
	}
	for _, r := range RestoreResults {
		m.restores.WithLabelValues(r)
	}
	for _, o := range PublishOutcomes {
		m.ckptPublished.WithLabelValues(o)
	}
	for _, o := range MoveOutcomes {
		m.moves.WithLabelValues(o)
	}
	for _, o := range DeleteOutcomes {
		m.blobDeletes.WithLabelValues(o)
	}
	for _, r := range RefusalReasons {
		m.ckptRefused.WithLabelValues(r)
	}
	for _, o := range relay.PublishOutcomes {
		for _, r := range relay.ReasonLabels {
			m.claimAnswers.WithLabelValues(string(o), r)
		}
	}
}
