package relay_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/internal/logcapture"
	"provideragent/internal/relaytest"
	"provideragent/relay"
)

// The real @nostr-relay/core answers an event over its content limit with
// a NOTICE and no OK: the publish times out with the NOTICE attached as its
// reason, and the relay stays up for the next event (TestPublishNoticeWithoutOK
// is the scripted twin).
func TestPublishNoticeFromNostrRelay(t *testing.T) {
	r := relaytest.StartKind(t, relaytest.NostrRelay, relaytest.KindOptions{})
	h := newPool(t, fastConfig(r.URL()), relay.Options{})
	eventually(t, "connected", func() bool { return h.status(r.URL()).Connected })
	big := signed(t, 1, strings.Repeat("x", 102401), time.Now())
	res := publishWithin(t, h, 2*time.Second, big)
	if len(res.TimedOut) != 1 {
		t.Fatalf("Publish(102,401-char content) = %+v, want it timed out", res)
	}
	o := res.TimedOut[0]
	if !strings.Contains(o.Notice, "102400") || o.Prefix != relay.PrefixInvalid {
		t.Fatalf("timed-out outcome = %+v, want the relay's NOTICE about 102400 chars, prefix invalid", o)
	}
	if lr := h.status(r.URL()).LastRejection; lr.EventID != big.ID || !strings.Contains(lr.Reason, "102400") {
		t.Fatalf("Status.LastRejection = %+v, want event %s with the NOTICE", lr, big.ID)
	}
	if res := publishWithin(t, h, 5*time.Second, signed(t, 1, "small", time.Now())); res.AcceptedCount() != 1 {
		t.Fatalf("Publish(small) after the refusal = %+v, want accepted (the relay must survive a refusal)", res)
	}
}

// Every refusal of our events is a WARN naming the relay, the kind, the
// event and the relay's words, at most one per relay and class per
// interval (the next says how many were held back); here strfry's
// "event too large", twice.
func TestRejectionsLoggedOncePerClass(t *testing.T) {
	r := relaytest.StartKind(t, relaytest.StrfryEmulated, relaytest.KindOptions{})
	logs := logcapture.New(slog.LevelDebug)
	h := newPool(t, fastConfig(r.URL()), relay.Options{Logger: slog.New(logs)})
	eventually(t, "connected", func() bool { return h.status(r.URL()).Connected })
	var ids []string
	for i := range 2 {
		ev := signed(t, 1, strings.Repeat("y", 70000+i), time.Now())
		ids = append(ids, ev.ID)
		if res := publishWithin(t, h, 5*time.Second, ev); len(res.Rejected) != 1 {
			t.Fatalf("Publish(70 KB event) = %+v, want rejected", res)
		}
	}
	warns := logs.Find("relay rejected our event")
	if len(warns) != 1 {
		t.Fatalf("WARN lines = %d, want 1 (one per relay and class per interval)", len(warns))
	}
	w := warns[0]
	kind, _ := w.Int("kind")
	if w.Level != slog.LevelWarn || w.String("relay") != r.URL() || kind != 1 || w.String("event") != ids[0] ||
		!strings.Contains(w.String("reason"), "event too large") || w.String("class") != relay.PrefixInvalid {
		t.Fatalf("WARN = %+v, want relay, kind 1, event %s and strfry's words, class invalid", w, ids[0])
	}
}

// A permanent CLOSED of several REQs on one relay is one WARN per class,
// not one per REQ.
func TestPermanentClosedWarnsOnce(t *testing.T) {
	r := relaytest.Start(t, "--send-closed", "blocked: no reads for you")
	logs := logcapture.New(slog.LevelDebug)
	h := newPool(t, fastConfig(r.URL()), relay.Options{Logger: slog.New(logs), Interests: []relay.Interest{
		{Name: "one", Alternatives: [][]nostr.Filter{{{Kinds: []int{1}}}}},
		{Name: "two", Alternatives: [][]nostr.Filter{{{Kinds: []int{2}}}}},
	}})
	eventually(t, "closed permanently", func() bool { return h.status(r.URL()).ClosedPermanently })
	eventually(t, "both REQs closed", func() bool {
		return testutil.ToFloat64(mustGauge(t, h.reg, "relay_subscription_closed_total", r.URL())) >= 2
	})
	warns := logs.Find("relay closed the subscription permanently: no events from it until it is reconnected")
	if len(warns) != 1 || warns[0].String("class") != relay.PrefixBlocked || warns[0].String("relay") != r.URL() {
		t.Fatalf("WARN lines = %+v, want one, class blocked, naming the relay", warns)
	}
}
