package conformance

import (
	"fmt"
	"time"

	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/lease"
)

// Context is what a receiver's verdict on an event depends on besides the
// event: its clock, the issuers it trusts, the lease state of the
// workloads it tracks and its limits. Vectors carry one each, in this JSON
// form; check-event builds one from its flags.
type Context struct {
	// Now is the receiver's clock, unix seconds.
	Now int64 `json:"now"`
	// TrustedIssuers are the public keys (hex, or npub on input) whose
	// lease grants are accepted.
	TrustedIssuers []string `json:"trusted_issuers"`
	// Self is the receiver's own public key (hex, or npub on input): a
	// lease grant that names it neither as primary nor as standby is
	// refused (not_named). Empty: grants are judged as if they named the
	// receiver.
	Self string `json:"self,omitempty"`
	// Workloads are the workloads the receiver tracks.
	Workloads []Workload `json:"workloads"`
	// Limits are the receiver's ingest limits.
	Limits Limits `json:"limits"`
}

// Workload is the lease state of one tracked workload.
type Workload struct {
	// ID is the workload id.
	ID string `json:"id"`
	// Holder is the provider holding it now (the lease's primary until a
	// failover): revocations are accepted only from it.
	Holder string `json:"holder"`
	// Members are the lease's primary and standbys: promotion claims and
	// checkpoint records are accepted only from them.
	Members []string `json:"members"`
	// Finished is true once the workload reached a terminal state:
	// revocations, claims and checkpoint records for it are refused
	// (unknown_workload).
	Finished bool `json:"finished"`
}

// Limits are a receiver's ingest limits (heartbeat.Config).
type Limits struct {
	// MaxEventBytes bounds the event's JSON.
	MaxEventBytes int `json:"max_event_bytes"`
	// MaxContentBytes bounds the content.
	MaxContentBytes int `json:"max_content_bytes"`
	// MaxTags bounds the number of tags; MaxTagBytes each tag element.
	MaxTags     int `json:"max_tags"`
	MaxTagBytes int `json:"max_tag_bytes"`
	// MaxSkewSeconds is how far created_at may lie ahead of Now.
	MaxSkewSeconds int64 `json:"max_skew_s"`
	// StaleSeconds is how old a heartbeat's created_at may be (the lease's
	// stale).
	StaleSeconds int64 `json:"stale_s"`
}

// DefaultLimits are the agent's defaults (heartbeat.DefaultConfig, the
// lease's default stale and max skew).
func DefaultLimits() Limits {
	c := heartbeat.DefaultConfig()
	return Limits{
		MaxEventBytes: c.MaxEventBytes, MaxContentBytes: c.MaxContentBytes, MaxTags: c.MaxTags, MaxTagBytes: c.MaxTagBytes,
		MaxSkewSeconds: int64(c.MaxSkew / time.Second), StaleSeconds: int64(c.HeartbeatMaxAge / time.Second),
	}
}

// config is the Ingestor configuration of the limits.
func (l Limits) config() (heartbeat.Config, error) {
	c := heartbeat.DefaultConfig()
	c.MaxEventBytes, c.MaxContentBytes, c.MaxTags, c.MaxTagBytes = l.MaxEventBytes, l.MaxContentBytes, l.MaxTags, l.MaxTagBytes
	c.MaxSkew = time.Duration(l.MaxSkewSeconds) * time.Second
	c.HeartbeatMaxAge = time.Duration(l.StaleSeconds) * time.Second
	if err := c.Validate(); err != nil {
		return heartbeat.Config{}, fmt.Errorf("limits: %w", err)
	}
	return c, nil
}

// policy answers heartbeat's signer rules from a Context, as the agent's
// own policy answers them from its lease table: the holder for
// revocations, the members for claims and checkpoint records, the trusted
// issuers for grants, and finished workloads not tracked.
type policy struct {
	issuers   map[string]bool
	self      string // "": every grant names the receiver
	workloads map[string]policyWorkload
}

type policyWorkload struct {
	holder   string
	members  map[string]bool
	finished bool
}

var (
	_ heartbeat.SignerPolicy = (*policy)(nil)
	_ heartbeat.Tracker      = (*policy)(nil)
	_ heartbeat.Addressee    = (*policy)(nil)
)

// newPolicy checks c's keys and workloads and returns its policy.
func newPolicy(c Context) (*policy, error) {
	p := &policy{issuers: map[string]bool{}, workloads: map[string]policyWorkload{}}
	for i, k := range c.TrustedIssuers {
		h, err := identity.ParsePublicKey(k)
		if err != nil {
			return nil, fmt.Errorf("trusted_issuers[%d]: %w", i, err)
		}
		p.issuers[h] = true
	}
	if c.Self != "" {
		h, err := identity.ParsePublicKey(c.Self)
		if err != nil {
			return nil, fmt.Errorf("self: %w", err)
		}
		p.self = h
	}
	for i, w := range c.Workloads {
		if err := heartbeat.ValidateWorkloadID(w.ID); err != nil {
			return nil, fmt.Errorf("workloads[%d]: %w", i, err)
		}
		if _, dup := p.workloads[w.ID]; dup {
			return nil, fmt.Errorf("workloads[%d]: %s given twice", i, w.ID)
		}
		holder, err := identity.ParsePublicKey(w.Holder)
		if err != nil {
			return nil, fmt.Errorf("workloads[%d] (%s) holder: %w", i, w.ID, err)
		}
		pw := policyWorkload{holder: holder, members: map[string]bool{}, finished: w.Finished}
		for j, m := range w.Members {
			h, err := identity.ParsePublicKey(m)
			if err != nil {
				return nil, fmt.Errorf("workloads[%d] (%s) members[%d]: %w", i, w.ID, j, err)
			}
			pw.members[h] = true
		}
		p.workloads[w.ID] = pw
	}
	return p, nil
}

func (p *policy) CurrentPrimary(id string) (string, bool) {
	w, ok := p.workloads[id]
	return w.holder, ok
}

func (p *policy) IsMember(id, pubkey string) bool { return p.workloads[id].members[pubkey] }

// Named implements heartbeat.Addressee: a grant names the receiver when
// the context gives no Self, or Self is its primary or a standby.
func (p *policy) Named(spec lease.Spec) bool { return p.self == "" || spec.Names(p.self) }

func (p *policy) AllowedIssuer(pubkey string) bool { return p.issuers[pubkey] }

func (p *policy) Tracks(id string) bool {
	w, ok := p.workloads[id]
	return ok && !w.finished
}
