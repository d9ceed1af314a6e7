package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/agent/relay"
	"provideragent/internal/relaytest"
)

func TestTmpPublishThroughput(t *testing.T) {
	var urls []string
	for range 3 {
		urls = append(urls, relaytest.StartKind(t, relaytest.StrfryEmulated, relaytest.KindOptions{}).URL())
	}
	h := newPool(t, fastConfig(urls...), relay.Options{})
	eventually(t, "connected", func() bool { return len(h.pool.Status()) == 3 && h.pool.Status()[2].Connected && h.pool.Status()[0].Connected && h.pool.Status()[1].Connected })
	evs := make([]nostr.Event, 3000)
	for i := range evs {
		ev := nostr.Event{Kind: 38386, Content: `{"x":1}`, CreatedAt: nostr.Now(), Tags: nostr.Tags{{"d", fmt.Sprintf("provider-agent:claim:v1:scale-%034d", i)}}}
		ev.Sign(authorKey)
		evs[i] = ev
	}
	start := time.Now()
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i := range evs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			h.pool.Publish(context.Background(), evs[i])
		}()
	}
	wg.Wait()
	t.Logf("3000 publishes to 3 strfry relays: %v", time.Since(start))
}
