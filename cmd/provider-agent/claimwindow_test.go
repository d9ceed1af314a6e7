package main

import (
	"fmt"
	"testing"
	"time"

	"provideragent/agent"
)

// TestClaimWindowRealBinary: the real binary takes lease.claim_window from
// its config file. A standby with a window of 2 takes over the eight
// workloads of a primary killed with kill -9: at no moment does it show
// more than two claims awaiting their publish's answer
// (agent_claims_awaiting_answer, read every 100 ms), each workload is
// claimed once, none withdrawn, and all eight go Live on it at epoch 2.
// Without the window the eight claims of the takeover's tick wait at once.
func TestClaimWindowRealBinary(t *testing.T) {
	t.Parallel()
	p := newPair(t)
	const window, n = 2, 8
	replaceIn(t, p.cfgB, `claim_timeout = "5s"`, fmt.Sprintf("claim_timeout = \"5s\"\nclaim_window = %d", window))
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("win-%d", i)
		must(t, nil, "workloads", "grant", "--config", p.cfgA, "--id", ids[i], "--command", "sleep 7415",
			"--standby", npubOf(t, p.pubB), "--publish")
	}
	a := startRun(t, "--config", p.cfgA)
	b := startRun(t, "--config", p.cfgB)
	for _, id := range ids {
		waitPrimaryAndStandby(t, a, b, id, 60*time.Second)
	}
	a.kill(t)
	killed := time.Now()
	awaiting := func() float64 { return metricValue(t, b.metricsURL(), "agent_claims_awaiting_answer") }
	most := 0.0
	b.waitStatus(t, fmt.Sprintf("all %d Live at epoch 2 on the standby", n), 2*time.Minute, func(st agent.Status) bool {
		most = max(most, awaiting())
		for _, id := range ids {
			if w, ok := workloadIn(st, id); !ok || w.State != "live" || w.Epoch != 2 || !w.Running {
				return false
			}
		}
		return true
	})
	claims := func(outcome string) float64 {
		return metricValue(t, b.metricsURL(), `agent_promotions_total{outcome="`+outcome+`"}`)
	}
	claimed, withdrawn := claims("claimed"), claims("withdrawn")
	t.Logf("all %d Live on the standby %v after the kill; claims awaiting an answer at most %v (window %d); claimed %v, withdrawn %v",
		n, time.Since(killed).Round(time.Second), most, window, claimed, withdrawn)
	if most > window {
		t.Fatalf("claims awaiting their publish's answer reached %v, want at most the window %d", most, window)
	}
	if most < 1 {
		t.Fatalf("agent_claims_awaiting_answer never above 0: the gauge did not show the takeover's claims")
	}
	if claimed != n || withdrawn != 0 {
		t.Fatalf("claims published %v, withdrawn %v; want %d and 0", claimed, withdrawn, n)
	}
}
