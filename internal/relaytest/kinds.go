package relaytest

import (
	"bytes"
	"cmp"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"provideragent/internal/localrelay"
)

// Kind is a relay implementation the tests run as a child process.
type Kind string

const (
	// Khatru is internal/localrelay as it is: khatru v0.19.1 with an
	// in-memory store.
	Khatru Kind = "khatru"
	// NostrRelay is @nostr-relay/core 0.0.40 with its validator and SQLite
	// event repository (in memory), run by Node from nostr-relay/server.js
	// with the versions pinned by nostr-relay/package-lock.json.
	NostrRelay Kind = "nostr-relay"
	// StrfryEmulated is internal/localrelay with --strfry: strfry's default
	// limits and message forms in front of the khatru store.
	StrfryEmulated Kind = "strfry-emulated"
)

// Kinds lists every relay implementation, for tests that run over each.
var Kinds = []Kind{Khatru, NostrRelay, StrfryEmulated}

// KindOptions configure StartKind the same way for every kind.
type KindOptions struct {
	// RequireAuth refuses REQ and EVENT until the client authenticated
	// (NIP-42), in each implementation's own words.
	RequireAuth bool
	// ServiceURL is the relay's public URL, which AUTH's relay tag must
	// name: khatru's ServiceURL, strfry's relay.auth.serviceUrl,
	// @nostr-relay/core's hostname (only the hostname is compared). Empty:
	// the relay's own address (khatru: the Host header).
	ServiceURL string
	// SendBuffer, when positive, fixes the relay's kernel send buffer for
	// each client connection (localrelayd --send-buffer): a peer that
	// stops reading then fills it after tens of kilobytes, as a vanished
	// peer does over a network, where loopback would absorb hundreds.
	// Khatru and StrfryEmulated only.
	SendBuffer int
	// Listen is the relay's host:port; empty: a free 127.0.0.1 port.
	Listen string
	// Wrap prefixes the relay's command, for example a netlab node's
	// `ip netns exec NS`: the relay then runs in that network namespace.
	Wrap []string
	// RateLimit bounds the events the relay takes per key and per
	// connection (localrelay.RateLimit). Khatru and StrfryEmulated only.
	RateLimit localrelay.RateLimit
}

// placement is where a relay's process runs and listens.
func (o KindOptions) placement() placement {
	return placement{listen: cmp.Or(o.Listen, "127.0.0.1:0"), wrap: o.Wrap}
}

// StartKind starts a relay of kind k (on a free 127.0.0.1 port unless
// o.Listen says otherwise); it is stopped when the test ends. NostrRelay needs node on PATH: without it the
// test fails (it is not skipped).
func StartKind(tb testing.TB, k Kind, o KindOptions) *Relay {
	tb.Helper()
	var args []string
	switch k {
	case Khatru, StrfryEmulated:
		if k == StrfryEmulated {
			args = append(args, "--strfry")
		}
		if o.RequireAuth {
			args = append(args, "--require-auth")
		}
		if o.ServiceURL != "" {
			args = append(args, "--service-url", o.ServiceURL)
		}
		if o.SendBuffer > 0 {
			args = append(args, "--send-buffer", strconv.Itoa(o.SendBuffer))
		}
		if l := o.RateLimit; l != (localrelay.RateLimit{}) {
			args = append(args, "--rate-key-per-sec", strconv.FormatFloat(l.KeyPerSecond, 'g', -1, 64),
				"--rate-key-burst", strconv.Itoa(l.KeyBurst),
				"--rate-conn-per-sec", strconv.FormatFloat(l.ConnPerSecond, 'g', -1, 64),
				"--rate-conn-burst", strconv.Itoa(l.ConnBurst))
		}
		return start(tb, k, localrelayd, args, o.placement())
	case NostrRelay:
		if o.SendBuffer > 0 || o.RateLimit != (localrelay.RateLimit{}) {
			tb.Fatalf("relaytest: SendBuffer and RateLimit are not supported by %s", k)
		}
		if o.RequireAuth {
			args = append(args, "--require-auth")
		}
		if o.ServiceURL != "" {
			u, err := url.Parse(o.ServiceURL)
			if err != nil || u.Hostname() == "" {
				tb.Fatalf("relaytest: ServiceURL %q has no hostname", o.ServiceURL)
			}
			args = append(args, "--hostname", u.Hostname())
		}
		return startNostrRelay(tb, o.placement(), args)
	}
	tb.Fatalf("relaytest: unknown relay kind %q", k)
	return nil
}

// StartNostrRelay starts @nostr-relay/core (nostr-relay/server.js under
// node) with the given server.js flags (--hostname H, --require-auth).
func StartNostrRelay(tb testing.TB, args ...string) *Relay {
	tb.Helper()
	return startNostrRelay(tb, placement{listen: "127.0.0.1:0"}, args)
}

func startNostrRelay(tb testing.TB, at placement, args []string) *Relay {
	tb.Helper()
	return start(tb, NostrRelay, func(tb testing.TB) []string {
		return []string{NodeBinary(tb), filepath.Join(NostrRelayDir(tb), "server.js")}
	}, args, at)
}

// NostrRelayDir is the directory of server.js and its package-lock.json.
// Its node_modules are installed with `npm ci` (CI does it first; a test
// does it itself, once, when they are missing or older than the lock file).
func NostrRelayDir(tb testing.TB) string {
	tb.Helper()
	nodeOnce.Do(func() { nodeDir, nodeErr = prepareNostrRelay() })
	if nodeErr != nil {
		tb.Fatalf("relaytest: @nostr-relay/core is not runnable: %v", nodeErr)
	}
	return nodeDir
}

// NodeBinary is node's path; a machine without node fails the test.
func NodeBinary(tb testing.TB) string {
	tb.Helper()
	p, err := exec.LookPath("node")
	if err != nil {
		tb.Fatalf("relaytest: node not found on PATH (the nostr-relay tests need Node.js 20 and npm; they are not skipped): %v", err)
	}
	return p
}

var (
	nodeOnce sync.Once
	nodeDir  string
	nodeErr  error
)

func prepareNostrRelay() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the relaytest package")
	}
	dir := filepath.Join(filepath.Dir(file), "nostr-relay")
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("node not found on PATH (needs Node.js 20 and npm): %w", err)
	}
	// Several test binaries may get here at once, and .ci/run may be running
	// npm ci under the same lock: wait for it, then install only if needed.
	lock, err := os.OpenFile(filepath.Join(dir, ".npm-ci.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("lock %s: %w", dir, err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", dir, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck
	if installed(dir) {
		return dir, nil
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("npm ci in %s (%v): %w\n%s", dir, time.Since(start).Round(time.Second), err, out.String())
	}
	return dir, nil
}

// installed reports whether npm ci ran since the lock file last changed.
func installed(dir string) bool {
	lockInfo, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return false
	}
	hidden, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if err != nil {
		return false
	}
	return !hidden.ModTime().Before(lockInfo.ModTime())
}
