// Package devblossomtest starts dev-blossom servers for tests: a real
// Blossom server on 127.0.0.1, shut down when the test ends.
//
//	s := devblossomtest.Start(t, devblossom.Options{Dir: t.TempDir()})
//	// upload to and fetch from s.URL()
package devblossomtest

import (
	"context"
	"testing"

	"provideragent/internal/devblossom"
)

// Start starts a dev-blossom server with opts on a free port of
// 127.0.0.1; it is shut down when t ends (a test may shut it down
// sooner).
func Start(t testing.TB, opts devblossom.Options) *devblossom.Server {
	t.Helper()
	s, err := devblossom.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background(), "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}
