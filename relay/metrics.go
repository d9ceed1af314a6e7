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
