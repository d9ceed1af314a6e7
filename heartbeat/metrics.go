package heartbeat

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"provideragent/internal/promreg"
)

// kinds in metric label order.
var metricKinds = []int{KindHeartbeat, KindHeartbeatEphemeral, KindHeartbeatShard, KindRevocation, KindPromotion, KindLeaseGrant, KindCheckpoint}

func kindIndex(kind int) int {
	for i, k := range metricKinds {
		if k == kind {
			return i
		}
	}
	return 0
}

type metrics struct {
	accepted  []prometheus.Counter
	duplicate []prometheus.Counter
	rejected  map[RejectReason]prometheus.Counter
	sigChecks prometheus.Counter
}

// newMetrics creates the counters, resolved per label up front so the hot
// path does no label lookup, and registers them when reg is not nil.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	f, registered := promreg.Factory(reg)
	accepted := f.NewCounterVec(prometheus.CounterOpts{
		Name: "heartbeat_events_accepted_total",
		Help: "Distinct events accepted (signature checked, decoded, signer rule passed), by kind.",
	}, []string{"kind"})
	duplicate := f.NewCounterVec(prometheus.CounterOpts{
		Name: "heartbeat_events_duplicate_total",
		Help: "Repeated deliveries of an already accepted event (no signature check), by kind.",
	}, []string{"kind"})
	rejected := f.NewCounterVec(prometheus.CounterOpts{
		Name: "heartbeat_events_rejected_total",
		Help: "Deliveries rejected, by reason.",
	}, []string{"reason"})
	sigChecks := f.NewCounter(prometheus.CounterOpts{
		Name: "heartbeat_signature_checks_total",
		Help: "Schnorr signature verifications performed.",
	})
	m := &metrics{rejected: make(map[RejectReason]prometheus.Counter, len(AllReasons)), sigChecks: sigChecks}
	for _, k := range metricKinds {
		m.accepted = append(m.accepted, accepted.WithLabelValues(kindName(k)))
		m.duplicate = append(m.duplicate, duplicate.WithLabelValues(kindName(k)))
	}
	for _, r := range AllReasons {
		m.rejected[r] = rejected.WithLabelValues(string(r))
	}
	if err := registered(); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	return m, nil
}
