package agent

import "provideragent/relay"

// noteClaimAnswers counts every relay's answer to one promotion claim
// (agent_claim_answers_total): the relays' refusals of a claim storm, by
// reason (rate-limited, invalid, a timeout, ...), apart from the
// heartbeats' and the outbox's publishes, which relay_publish_total mixes.
func (a *Agent) noteClaimAnswers(res relay.PublishResult) {
	for _, o := range res.All {
		if o.Outcome == relay.OutcomeNotAwaited {
			continue
		}
		a.obs.met.claimAnswers.WithLabelValues(string(o.Outcome), o.ReasonLabel()).Inc()
	}
}
