package agent

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/relay"
)

// TestNoteClaimAnswers: each relay's answer to a claim is counted by
// outcome and reason; relays not awaited are not.
func TestNoteClaimAnswers(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{obs: observable{met: m}}
	a.noteClaimAnswers(relay.PublishResult{All: []relay.RelayOutcome{
		{Relay: "ws://a", Outcome: relay.OutcomeAccepted},
		{Relay: "ws://b", Outcome: relay.OutcomeRejected, Reason: "rate-limited: slow down, please", Prefix: relay.PrefixRateLimited},
		{Relay: "ws://c", Outcome: relay.OutcomeNotAwaited},
	}})
	for _, tt := range []struct {
		outcome, reason string
		want            float64
	}{
		{"accepted", "none", 1},
		{"rejected", relay.PrefixRateLimited, 1},
		{"not_awaited", "none", 0},
	} {
		if got := testutil.ToFloat64(m.claimAnswers.WithLabelValues(tt.outcome, tt.reason)); got != tt.want {
			t.Errorf("agent_claim_answers_total{%s,%s} = %v, want %v", tt.outcome, tt.reason, got, tt.want)
		}
	}
}
