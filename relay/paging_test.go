package relay_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/relay"
)

// pagingRelay answers a main REQ with as many stored events as its first
// filter's limit (so the pool must page) and leaves catch-up pages to
// onPage; kinds tells the interests apart.
func pagingRelay(t *testing.T, onMain func(kind, n int, req nostr.ReqEnvelope, send func(string)) bool,
	onPage func(req nostr.ReqEnvelope, send func(string))) *scripted {
	t.Helper()
	s := newScripted(t, `{}`)
	var mu sync.Mutex
	mains := map[int]int{} // REQs seen per kind
	base := time.Now().Add(-time.Hour)
	s.answer = func(req nostr.ReqEnvelope, send func(string)) {
		if strings.HasPrefix(req.SubscriptionID, "pa-page-") {
			onPage(req, send)
			return
		}
		f := req.Filters[0]
		kind := f.Kinds[0]
		mu.Lock()
		mains[kind]++
		n := mains[kind]
		mu.Unlock()
		if onMain != nil && onMain(kind, n, req, send) {
			return
		}
		for i := range f.Limit {
			ev := signed(t, kind, "stored", base.Add(time.Duration(i)*time.Second))
			send(`["EVENT","` + req.SubscriptionID + `",` + ev.String() + `]`)
		}
		send(`["EOSE","` + req.SubscriptionID + `"]`)
	}
	return s
}

func pagingConfig(url string) relay.Config {
	cfg := fastConfig(url)
	cfg.PageLimit = 3
	return cfg
}

// A relay that closes a catch-up page: the pool warns and goes on, so the
// relay still reports EOSE (the events older than the page may be
// missing). It used to drop the page before ending it, and the sub never
// caught up.
func TestPoolClosedPageStillEndsCatchUp(t *testing.T) {
	r := pagingRelay(t, nil, func(req nostr.ReqEnvelope, send func(string)) {
		send(`["CLOSED","` + req.SubscriptionID + `","error: no paging here"]`)
	})
	h := newPool(t, pagingConfig(r.url()), relay.Options{Filters: []nostr.Filter{{Kinds: []int{1}}}})
	h.waitEOSE(r.url())
}

// A sub sent again (a transient CLOSED) while its page is in flight drops
// that page; when its new REQ needs no page, the next queued sub's page
// must still start. It used to wait forever, and the relay never reported
// EOSE.
func TestPoolResentSubLetsTheQueuedPageGo(t *testing.T) {
	var mu sync.Mutex
	closedOnce := false
	r := pagingRelay(t, func(kind, n int, req nostr.ReqEnvelope, send func(string)) bool {
		if kind == 1 && n > 1 {
			send(`["EOSE","` + req.SubscriptionID + `"]`) // sent again: nothing new
			return true
		}
		return false
	}, func(req nostr.ReqEnvelope, send func(string)) {
		mu.Lock()
		first := !closedOnce
		closedOnce = true
		mu.Unlock()
		if first {
			// The first page (kind 1's): close kind 1's main REQ instead of
			// answering, so the pool sends it again and drops this page.
			send(`["CLOSED","pa-sub-1","error: try again"]`)
			return
		}
		send(`["EOSE","` + req.SubscriptionID + `"]`)
	})
	h := newPool(t, pagingConfig(r.url()), relay.Options{Interests: []relay.Interest{
		{Name: "one", Alternatives: [][]nostr.Filter{{{Kinds: []int{1}}}}},
		{Name: "two", Alternatives: [][]nostr.Filter{{{Kinds: []int{2}}}}},
	}})
	h.waitEOSE(r.url())
}
