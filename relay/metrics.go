package relay

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"provideragent/internal/promreg"
)

type metrics struct {
	connected *prometheus.GaugeVec
	reconnect *prometheus.CounterVec
	received  *prometheus.CounterVec
	publish   *prometheus.CounterVec
	closed    *prometheus.CounterVec
	dropped   *prometheus.CounterVec
	pages     *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	f, registered := promreg.Factory(reg)
	m := &metrics{
		connected: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_connected",
			Help: "1 while the websocket to the relay is open, else 0.",
		}, []string{"relay"}),
		reconnect: f.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_reconnects_total",
			Help: "Connection attempts to the relay after the first one.",
		}, []string{"relay"}),
		received: f.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_messages_received_total",
			Help: "Frames received from the relay.",
		}, []string{"relay"}),
		publish: f.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_publish_total",
			Help: "Publish outcomes per relay (accepted, rejected, rate_limited, muted, timed_out, failed), by reason: the relay's prefix class (blocked, rate-limited, invalid, ...; also after strfry's \"ERROR: \"), none, other, or the local cause (not_connected, connection_lost, no_ok, too_large).",
		}, []string{"relay", "outcome", "reason"}),
		closed: f.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_subscription_closed_total",
			Help: "CLOSED frames for the agent's subscriptions, by whether the reason is permanent.",
		}, []string{"relay", "permanent"}),
		dropped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_frames_dropped_total",
			Help: "Frames ignored: unparsable, or for a subscription that is no longer current.",
		}, []string{"relay", "reason"}),
		pages: f.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_catchup_pages_total",
			Help: "Pages read because a filter returned the relay's limit of stored events (subscription catch-up and queries).",
		}, []string{"relay"}),
	}
	if err := registered(); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return nil, fmt.Errorf("register relay metrics (one pool per registerer): %w", err)
		}
		return nil, fmt.Errorf("register relay metrics: %w", err)
	}
	return m, nil
}

// PublishOutcomes are relay_publish_total's outcome values (OutcomeNotAwaited
// is not counted).
var PublishOutcomes = []Outcome{OutcomeAccepted, OutcomeRejected, OutcomeMuted, OutcomeTimedOut, OutcomeRateLimited, OutcomeFailed}

// DroppedReasons are relay_frames_dropped_total's reason values.
var DroppedReasons = []string{"unparsable", "unexpected_ok", "no_subscription", "stale_subscription"}

// exportRelay creates relay u's series of every counter at 0, each bounded
// label at every value: a counter is then a 0 series from the first scrape,
// and increase() and the alerts see its first event (a series born at 1
// reads as no increase).
func (m *metrics) exportRelay(u string) {
	m.connected.WithLabelValues(u).Set(0)
	m.reconnect.WithLabelValues(u)
	m.received.WithLabelValues(u)
	m.pages.WithLabelValues(u)
	for _, p := range []string{"true", "false"} {
		m.closed.WithLabelValues(u, p)
	}
	for _, r := range DroppedReasons {
		m.dropped.WithLabelValues(u, r)
	}
	for _, o := range PublishOutcomes {
		for _, r := range ReasonLabels {
			m.publish.WithLabelValues(u, string(o), r)
		}
	}
}
