//go:build !race

// khatru races on its own listener slice, so the examples that run
// in-process relays are built without -race only (as the in-process relay's
// own tests).

package relay_test

import (
	"context"
	"fmt"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/localrelay"
	"provideragent/relay"
)

// A Pool keeps one supervised connection per relay: Publish reports each
// relay's answer, PublishQuorum returns once enough relays accepted, and
// Query reads what each relay stores up to its EOSE. Here three in-process
// relays on 127.0.0.1 stand for a lease's relay set.
func ExamplePool() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var urls []string
	for range 3 {
		r := localrelay.New(localrelay.Options{})
		if err := r.Start(ctx, "127.0.0.1:0"); err != nil {
			fmt.Println(err)
			return
		}
		defer r.Shutdown(context.Background())
		urls = append(urls, r.URL())
	}

	cfg := relay.DefaultConfig()
	cfg.URLs = urls
	pool, err := relay.New(cfg, relay.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	ev := nostr.Event{Kind: 1, Content: "hello, relays", CreatedAt: nostr.Now()}
	if err := ev.Sign("0000000000000000000000000000000000000000000000000000000000000001"); err != nil {
		fmt.Println(err)
		return
	}
	res := pool.PublishQuorum(ctx, ev, 2)
	fmt.Println("accepted by at least 2:", res.AcceptedCount() >= 2)
	res = pool.Publish(ctx, ev) // every relay's answer; a duplicate is accepted
	fmt.Println("accepted by:", res.AcceptedCount())

	for i, q := range pool.Query(ctx, nostr.Filter{IDs: []string{ev.ID}}) {
		fmt.Printf("relay %d: %d event(s), complete %v\n", i, len(q.Events), q.Complete())
	}
	// Output:
	// accepted by at least 2: true
	// accepted by: 3
	// relay 0: 1 event(s), complete true
	// relay 1: 1 event(s), complete true
	// relay 2: 1 event(s), complete true
}
