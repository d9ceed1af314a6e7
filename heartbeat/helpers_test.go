package heartbeat

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
	"provideragent/lease"
)

// testKeys returns deterministic keys named by a string.
func testKeys(t testing.TB, name string) *identity.Keys {
	t.Helper()
	h := sha256.Sum256([]byte("provider-agent test key " + name))
	k, err := identity.NewKeys(hex.EncodeToString(h[:]))
	if err != nil {
		t.Fatalf("identity.NewKeys(%s) = %v", name, err)
	}
	return k
}

// t0 is a fixed "now" for tests.
var t0 = time.Unix(1_763_800_000, 0).UTC()

// fakePolicy is a SignerPolicy over maps.
type fakePolicy struct {
	mu      sync.Mutex
	primary map[string]string          // workload -> hex
	members map[string]map[string]bool // workload -> hex -> member
	issuers map[string]bool
	done    map[string]bool // finished workloads (Tracker)
	self    string          // "": every grant names this provider (Addressee)
}

// Named implements Addressee.
func (p *fakePolicy) Named(spec lease.Spec) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.self == "" || spec.Names(p.self)
}

// Tracks implements Tracker.
func (p *fakePolicy) Tracks(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.done[id]
}

func newFakePolicy() *fakePolicy {
	return &fakePolicy{primary: map[string]string{}, members: map[string]map[string]bool{}, issuers: map[string]bool{}, done: map[string]bool{}}
}

func (p *fakePolicy) setWorkload(id, primary string, standbys ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.primary[id] = primary
	p.members[id] = map[string]bool{primary: true}
	for _, s := range standbys {
		p.members[id][s] = true
	}
}

func (p *fakePolicy) CurrentPrimary(id string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.primary[id]
	return v, ok
}

func (p *fakePolicy) IsMember(id, pk string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.members[id][pk]
}

func (p *fakePolicy) AllowedIssuer(pk string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.issuers[pk]
}

// copyEvent is a deep copy of ev: what a second relay's delivery of the
// same event looks like.
func copyEvent(ev *nostr.Event) nostr.Event {
	c := *ev
	c.Tags = make(nostr.Tags, len(ev.Tags))
	for i, t := range ev.Tags {
		c.Tags[i] = append(nostr.Tag(nil), t...)
	}
	return c
}
