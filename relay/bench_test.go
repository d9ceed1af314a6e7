package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/relaytest"
	"provideragent/relay"
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

// BenchmarkQuery: a Query of 500 stored events from one child relay through
// the pool. Baseline: the same REQ read over a bare websocket, run back to
// back with it in every op; "x_raw" is the pool's time over the baseline's.
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
	p, err := relay.New(fastConfig(r.URL()), relay.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	if res := p.Query(context.Background(), f); len(res[0].Events) != n {
		b.Fatalf("warm-up query got %d events", len(res[0].Events))
	}
	// Each op runs the baseline and the pool back to back, so both see the
	// same machine load; the metrics separate them.
	var raw, pool time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if got := rawQuery(b, c, fmt.Sprintf("raw%d", i), f); got != n {
			b.Fatalf("raw query got %d events, want %d", got, n)
		}
		mid := time.Now()
		res := p.Query(context.Background(), f)
		pool += time.Since(mid)
		raw += mid.Sub(start)
		if !res[0].Complete() || len(res[0].Events) != n {
			b.Fatalf("Query() = %d events, err %v", len(res[0].Events), res[0].Err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(n)*float64(b.N)/pool.Seconds(), "events/s")
	b.ReportMetric(float64(n)*float64(b.N)/raw.Seconds(), "raw_events/s")
	b.ReportMetric(float64(pool)/float64(raw), "x_raw")
}

// BenchmarkPublish: one op publishes one event to 3 child relays through the
// pool and waits for every OK. Baseline, run back to back in every op:
// publish-and-OK over bare websockets, three relays in sequence (what a
// naive client does). "x_raw" is the pool's time over the baseline's.
func BenchmarkPublish(b *testing.B) {
	rs := []*relaytest.Relay{relaytest.Start(b), relaytest.Start(b), relaytest.Start(b)}
	urls := []string{rs[0].URL(), rs[1].URL(), rs[2].URL()}
	conns := []*relaytest.Conn{relaytest.Dial(b, urls[0]), relaytest.Dial(b, urls[1]), relaytest.Dial(b, urls[2])}
	now := time.Now()
	rawEvs := make([]nostr.Event, b.N)
	poolEvs := make([]nostr.Event, b.N)
	for i := range rawEvs {
		rawEvs[i] = benchEvent(b, 2*i, now)
		poolEvs[i] = benchEvent(b, 2*i+1, now)
	}
	p, err := relay.New(fastConfig(urls...), relay.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	if res := p.Publish(context.Background(), benchEvent(b, -1, now)); res.AcceptedCount() != 3 {
		b.Fatalf("warm-up Publish() = %+v", res)
	}
	var raw, pool time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		for _, c := range conns {
			c.Send(nostr.EventEnvelope{Event: rawEvs[i]})
			if _, err := c.Read(wait); err != nil {
				b.Fatal(err)
			}
		}
		mid := time.Now()
		res := p.Publish(context.Background(), poolEvs[i])
		pool += time.Since(mid)
		raw += mid.Sub(start)
		if res.AcceptedCount() != 3 {
			b.Fatalf("Publish() = %+v, want 3 accepted", res)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(pool.Microseconds())/float64(b.N), "us/publish3")
	b.ReportMetric(float64(raw.Microseconds())/float64(b.N), "raw_us/publish3")
	b.ReportMetric(float64(pool)/float64(raw), "x_raw")
}
