package uploader

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"provideragent/internal/promreg"
)

// Metrics are the uploader's Prometheus counters. One Metrics is shared by
// the Blossom uploader and the retry decorator.
type Metrics struct {
	// Uploads counts UploadPending calls of the inner uploader by outcome
	// (success, partial, failure, error).
	Uploads *prometheus.CounterVec
	// TileRejections counts per-tile rejections.
	TileRejections prometheus.Counter
	// Giveups counts tiles moved to upload_giveup.
	Giveups prometheus.Counter
	// Retries counts in-call retries made by the decorator.
	Retries prometheus.Counter
	// BytesUploaded counts bytes of accepted PUTs, summed over servers.
	BytesUploaded prometheus.Counter
}

// NewMetrics creates the counters and registers them with reg (nil: not
// registered). Registering twice on the same registry returns an error.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	f, registered := promreg.Factory(reg)
	m := &Metrics{
		Uploads: f.NewCounterVec(prometheus.CounterOpts{
			Name: "uploader_uploads_total",
			Help: "UploadPending calls of the Blossom uploader by outcome (success, partial, failure, error).",
		}, []string{"outcome"}),
		TileRejections: f.NewCounter(prometheus.CounterOpts{
			Name: "uploader_tile_rejections_total",
			Help: "Tiles rejected by the Blossom servers (per tile per attempt).",
		}),
		Giveups: f.NewCounter(prometheus.CounterOpts{
			Name: "uploader_giveups_total",
			Help: "Tiles moved to upload_giveup after using up their attempt budget.",
		}),
		Retries: f.NewCounter(prometheus.CounterOpts{
			Name: "uploader_retries_total",
			Help: "In-call retries of partial uploads made by the retry decorator.",
		}),
		BytesUploaded: f.NewCounter(prometheus.CounterOpts{
			Name: "uploader_bytes_uploaded_total",
			Help: "Bytes of tiles accepted by Blossom servers, summed over servers.",
		}),
	}
	for _, o := range []string{string(OutcomeSuccess), string(OutcomePartial), string(OutcomeFailure), "error"} {
		m.Uploads.WithLabelValues(o) // export every outcome from the start, at 0
	}
	if err := registered(); err != nil {
		return nil, fmt.Errorf("register uploader metrics: %w", err)
	}
	return m, nil
}

func (m *Metrics) orNop() *Metrics {
	if m != nil {
		return m
	}
	nm, _ := NewMetrics(nil)
	return nm
}
