//go:build tools

// Package depspin pins the module's third-party dependencies while the
// packages that use them are being written, so that concurrent work does not
// race on go.mod. It is never built.
package depspin

import (
	_ "github.com/BurntSushi/toml"
	_ "github.com/fiatjaf/eventstore/slicestore"
	_ "github.com/fiatjaf/khatru"
	_ "github.com/fiatjaf/khatru/blossom"
	_ "github.com/mattn/go-sqlite3"
	_ "github.com/nbd-wtf/go-nostr"
	_ "github.com/nbd-wtf/go-nostr/nip19"
	_ "github.com/nbd-wtf/go-nostr/nip11"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/zeebo/blake3"
	_ "pgregory.net/rapid"
)
