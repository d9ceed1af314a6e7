package main

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"provideragent/internal/cutproxy"
	"provideragent/internal/relaytest"
)

// proxyTo is a cut proxy in front of r, closed when the test ends.
func proxyTo(t *testing.T, r *relaytest.Relay) *cutproxy.Proxy {
	t.Helper()
	p, err := cutproxy.New(r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// dialVia is a [lease.dial_addrs] table, to append to a config, that
// reaches relay urls[i] through ps[i].
func dialVia(urls []string, ps map[int]*cutproxy.Proxy) string {
	s := "\n[lease.dial_addrs]\n"
	for _, i := range slices.Sorted(maps.Keys(ps)) {
		s += fmt.Sprintf("%q = %q\n", urls[i], ps[i].URL())
	}
	return s
}
