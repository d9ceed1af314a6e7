// Package backendtest provides Fake, an in-memory backend.Backend for tests of
// the daemon that are not about processes: starts are recorded, exits are
// injected with Crash, and Stop reports a Stopped exit at once.
package backendtest
