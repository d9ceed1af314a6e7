package agent

import (
	"sync"

	"provideragent/heartbeat"
	"provideragent/lease"
)

// signerPolicy answers heartbeat's signer rules from a copy of the lease
// table that the machine goroutine keeps current; ingest goroutines read it.
type signerPolicy struct {
	issuers map[string]bool
	self    string // this provider (hex): the grants it takes name it

	mu        sync.RWMutex
	workloads map[string]policyEntry
}

type policyEntry struct {
	holder  string
	members []string
	done    bool // the workload is in a terminal state
}

var (
	_ heartbeat.SignerPolicy = (*signerPolicy)(nil)
	_ heartbeat.Tracker      = (*signerPolicy)(nil)
	_ heartbeat.Addressee    = (*signerPolicy)(nil)
)

// Named reports whether a lease grant's spec names this provider: the
// ingest refuses the others before their signature check (the machine
// would refuse them anyway: lease.ErrNotNamed).
func (p *signerPolicy) Named(spec lease.Spec) bool { return spec.Names(p.self) }

// Tracks reports whether revocations and claims for the workload can still
// matter: it is tracked and not in a terminal state (the machine ignores
// them then), so the ingest refuses them before any signature check.
func (p *signerPolicy) Tracks(id string) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	e, ok := p.workloads[id]
	return ok && !e.done
}

func newSignerPolicy(self string, issuers []string) *signerPolicy {
	p := &signerPolicy{issuers: map[string]bool{}, self: self, workloads: map[string]policyEntry{}}
	for _, k := range issuers {
		p.issuers[k] = true
	}
	return p
}

func (p *signerPolicy) CurrentPrimary(id string) (string, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	e, ok := p.workloads[id]
	return e.holder, ok
}

func (p *signerPolicy) IsMember(id, pubkey string) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	e, ok := p.workloads[id]
	if !ok {
		return false
	}
	for _, m := range e.members {
		if m == pubkey {
			return true
		}
	}
	return false
}

func (p *signerPolicy) AllowedIssuer(pubkey string) bool { return p.issuers[pubkey] }

// refreshPolicy copies the holder and members of the given workloads from
// the machine (machine goroutine only).
func (a *Agent) refreshPolicy(ids []string) {
	a.inbound.policy.mu.Lock()
	defer a.inbound.policy.mu.Unlock()
	for _, id := range ids {
		w, ok := a.machine().Workload(id)
		if !ok {
			delete(a.inbound.policy.workloads, id)
			continue
		}
		members := append([]string{w.Spec.Primary}, w.Spec.Standbys...)
		a.inbound.policy.workloads[id] = policyEntry{holder: w.Holder, members: members, done: w.State.Terminal()}
	}
}

// tracked returns the workloads that are not in a terminal state and the
// providers their leases name (the subscription's sets).
func (p *signerPolicy) tracked() (workloads, providers map[string]bool) {
	workloads, providers = map[string]bool{}, map[string]bool{}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for id, e := range p.workloads {
		if e.done {
			continue
		}
		workloads[id] = true
		for _, m := range e.members {
			providers[m] = true
		}
	}
	return workloads, providers
}
