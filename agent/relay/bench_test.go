package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/agent/relay"
	"provideragent/internal/relaytest"
)

func benchEvent(b *testing.B, i int, at time.Time) nostr.Event {
	ev := nostr.Event{Kind: 1, Content: fmt.Sprintf("bench %d", i), CreatedAt: nostr.Timestamp(at.Unix()), Tags: nostr.Tags{{"t", "bench"}}}
	if err := ev.Sign(authorKey); err != nil {
		b.Fatal(err)
	}
	return ev
}

// rawQuery reads one REQ to EOSE over a bare websocket: the baseline.
func rawQuery(b *testing.B, c *relaytest.Conn, id string, f nostr.Filter) int {
	c.Send(nostr.ReqEnvelope{SubscriptionID: id, Filters: nostr.Filters{f}})
	n := 0
	for {
		env, err := c.Read(wait)
		if err != nil {
			b.Fatal(err)
		}
		switch env.(type) {
		case *nostr.EventEnvelope:
			n++
		case *nostr.EOSEEnvelope:
			c.Send(nostr.CloseEnvelope(id))
			return n
		}
	}
}

// BenchmarkQuery: one op is a Query of 500 stored events from one child
// relay through the pool. Baseline: the same REQ read over a bare websocket
// in the same run; "x_raw" is the pool's time per query over the baseline's.
func BenchmarkQuery(b *testing.B) {
	const n = 500
	r := relaytest.Start(b)
	c := relaytest.Dial(b, r.URL())
	at := time.Now().Add(-time.Hour)
	for i := 0; i < n; i++ {
		ev := benchEvent(b, i, at.Add(time.Duration(i)*time.Second))
		c.Send(nostr.EventEnvelope{Event: ev})
		if _, err := c.Read(wait); err != nil {
			b.Fatal(err)
		}
	}
	f := nostr.Filter{Kinds: []int{1}, Limit: n}
	raw := time.Duration(1<<63 - 1)
	for i := 0; i < 5; i++ {
		start := time.Now()
		if got := rawQuery(b, c, fmt.Sprintf("raw%d", i), f); got != n {
			b.Fatalf("raw query got %d events, want %d", got, n)
		}
		raw = min(raw, time.Since(start))
	}
	p, err := relay.New(fastConfig(r.URL()), relay.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	if res := p.Query(context.Background(), f); len(res[0].Events) != n {
		b.Fatalf("warm-up query got %d events", len(res[0].Events))
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		res := p.Query(context.Background(), f)
		if !res[0].Complete() || len(res[0].Events) != n {
			b.Fatalf("Query() = %d events, err %v", len(res[0].Events), res[0].Err)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	perOp := el / time.Duration(b.N)
	b.ReportMetric(float64(n)*float64(b.N)/el.Seconds(), "events/s")
	b.ReportMetric(float64(n)/raw.Seconds(), "raw_events/s")
	b.ReportMetric(float64(perOp)/float64(raw), "x_raw")
}

// BenchmarkPublish: one op publishes one event to 3 child relays and waits
// for every OK. Baseline: publish-and-OK on one relay over a bare websocket,
// three relays in sequence (what a naive client does), in the same run.
func BenchmarkPublish(b *testing.B) {
	rs := []*relaytest.Relay{relaytest.Start(b), relaytest.Start(b), relaytest.Start(b)}
	urls := []string{rs[0].URL(), rs[1].URL(), rs[2].URL()}
	conns := []*relaytest.Conn{relaytest.Dial(b, urls[0]), relaytest.Dial(b, urls[1]), relaytest.Dial(b, urls[2])}
	const rawRounds = 50
	evs := make([]nostr.Event, rawRounds+b.N)
	now := time.Now()
	for i := range evs {
		evs[i] = benchEvent(b, i, now)
	}
	start := time.Now()
	for i := 0; i < rawRounds; i++ {
		for _, c := range conns {
			c.Send(nostr.EventEnvelope{Event: evs[i]})
			if _, err := c.Read(wait); err != nil {
				b.Fatal(err)
			}
		}
	}
	raw := time.Since(start) / rawRounds
	p, err := relay.New(fastConfig(urls...), relay.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	evs = evs[rawRounds:]
	if res := p.Publish(context.Background(), benchEvent(b, -1, now)); res.AcceptedCount() != 3 {
		b.Fatalf("warm-up Publish() = %+v", res)
	}
	b.ResetTimer()
	start = time.Now()
	for i := 0; i < b.N; i++ {
		if res := p.Publish(context.Background(), evs[i]); res.AcceptedCount() != 3 {
			b.Fatalf("Publish() = %+v, want 3 accepted", res)
		}
	}
	el := time.Since(start)
	b.StopTimer()
	perOp := el / time.Duration(b.N)
	b.ReportMetric(float64(perOp.Microseconds()), "us/publish3")
	b.ReportMetric(float64(raw.Microseconds()), "raw_us/publish3")
	b.ReportMetric(float64(perOp)/float64(raw), "x_raw")
}
