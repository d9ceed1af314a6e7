package relay_test

import (
	"time"

	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/relay"
)

// TestCountersExportedAtZero: before any connection, every counter has a
// series per relay and per bounded label value, at 0, so that increase()
// and the alerts see the first event (relay_publish_total's rejected and
// rate_limited above all).
func TestCountersExportedAtZero(t *testing.T) {
	urls := []string{"ws://127.0.0.1:1", "ws://127.0.0.1:2"}
	cfg := fastConfig(urls...)
	cfg.BackoffInitial = 500 * time.Second
	cfg.BackoffMax = 500 * time.Second
	h := newPool(t, cfg, relay.Options{})
	perRelay := 1 + 1 + 1 + 1 + 2 + len(relay.DroppedReasons) + len(relay.PublishOutcomes)*len(relay.ReasonLabels)
	for name, want := range map[string]int{
		"relay_connected": 1, "relay_reconnects_total": 1, "relay_messages_received_total": 1, "relay_catchup_pages_total": 1,
		"relay_subscription_closed_total": 2, "relay_frames_dropped_total": len(relay.DroppedReasons),
		"relay_publish_total": len(relay.PublishOutcomes) * len(relay.ReasonLabels),
	} {
		if got := testutil.CollectAndCount(h.reg, name); got != want*len(urls) {
			t.Errorf("%s has %d series before any event, want %d (%d per relay)", name, got, want*len(urls), want)
		}
		perRelay -= want
	}
	if perRelay != 0 {
		t.Errorf("the table above misses %d series per relay", perRelay)
	}
	for _, o := range []relay.Outcome{relay.OutcomeRejected, relay.OutcomeRateLimited} {
		for _, r := range []string{relay.PrefixBlocked, relay.PrefixRateLimited, "none"} {
			mf, err := h.reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, f := range mf {
				if f.GetName() != "relay_publish_total" {
					continue
				}
				for _, m := range f.GetMetric() {
					l := map[string]string{}
					for _, p := range m.GetLabel() {
						l[p.GetName()] = p.GetValue()
					}
					if l["relay"] == urls[0] && l["outcome"] == string(o) && l["reason"] == r {
						found = m.GetCounter().GetValue() == 0
					}
				}
			}
			if !found {
				t.Errorf("relay_publish_total{relay=%q,outcome=%q,reason=%q} is not exported at 0", urls[0], o, r)
			}
		}
	}
}
