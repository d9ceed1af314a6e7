package heartbeat

import (
	"context"
	"testing"
	"time"

	"provideragent/identity"
	"provideragent/lease"
)

// machinePolicy is the SignerPolicy an agent would build over its machine.
type machinePolicy struct {
	m       *lease.Machine
	issuers map[string]bool
}

func (p machinePolicy) CurrentPrimary(id string) (string, bool) {
	w, ok := p.m.Workload(id)
	return w.Holder, ok
}

func (p machinePolicy) IsMember(id, pk string) bool {
	w, ok := p.m.Workload(id)
	return ok && w.Spec.Names(pk)
}

func (p machinePolicy) AllowedIssuer(pk string) bool { return p.issuers[pk] }

// side is one provider: keys, machine and ingestor.
type side struct {
	k  *identity.Keys
	m  *lease.Machine
	in *Ingestor
}

func findEffect[T lease.Effect](effs []lease.Effect) (T, bool) {
	for _, e := range effs {
		if v, ok := e.(T); ok {
			return v, true
		}
	}
	var zero T
	return zero, false
}

// TestLeaseHandoffOverTheWire drives two real lease machines through a
// grant, heartbeats over three relays, a primary's eviction and revocation,
// and the standby's claim, with every event built, ingested and converted by
// this package.
func TestLeaseHandoffOverTheWire(t *testing.T) {
	ctx := context.Background()
	relays := []string{"ws://r1.test", "ws://r2.test", "ws://r3.test"}
	cfg := lease.DefaultConfig()
	cfg.Relays = relays
	issuer := testKeys(t, "issuer")
	mk := func(name string) *side {
		k := testKeys(t, name)
		m, err := lease.New(cfg, k.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		icfg := DefaultConfig()
		icfg.HeartbeatMaxAge = cfg.Stale
		in, err := NewIngestor(icfg, machinePolicy{m: m, issuers: map[string]bool{issuer.PublicKey(): true}}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return &side{k: k, m: m, in: in}
	}
	p, s := mk("p"), mk("s")
	now := t0

	grant, err := BuildLeaseGrant(issuer, LeaseGrantParams{
		WorkloadID: "wl-1", Primary: p.k.Npub(), Standbys: []string{s.k.Npub()}, Relays: relays, Quorum: 2,
		Replication: lease.ReplicationWarmStandby, RestartPolicy: lease.RestartPolicy{Policy: lease.RestartOnFailure, MaxAttempts: 3},
		Command: []string{"/bin/true"}, At: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, sd := range []*side{p, s} {
		res, err := sd.in.Ingest(ctx, now, grant)
		if err != nil {
			t.Fatalf("Ingest(grant) = %v", err)
		}
		effs, err := sd.m.Track(now, SpecOf(res.LeaseGrant))
		if err != nil {
			t.Fatalf("Track(SpecOf(grant)) = %v", err)
		}
		if sd == p {
			if _, ok := findEffect[lease.StartWorkload](effs); !ok {
				t.Fatalf("primary Track effects = %v, want StartWorkload", effs)
			}
		}
	}

	// deliver publishes a heartbeat of from to every relay and feeds each
	// delivery to the receivers.
	deliver := func(from *side, to ...*side) {
		ev, err := BuildHeartbeat(from.k, HeartbeatParams{At: now, Workloads: from.m.Held(nil)}, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range relays {
			for _, sd := range to {
				c := copyEvent(ev)
				res, err := sd.in.Ingest(ctx, now, &c)
				if err != nil {
					t.Fatalf("Ingest(heartbeat) = %v", err)
				}
				sd.m.ObserveHeartbeat(now, HeartbeatInput(res.Heartbeat, r, now))
			}
		}
	}
	for i := 0; i < 3; i++ {
		deliver(p, p, s)
		deliver(s, p, s)
		p.m.Tick(now)
		s.m.Tick(now)
		now = now.Add(cfg.HeartbeatInterval)
	}
	if st, _ := p.m.State("wl-1"); st != lease.StateLive {
		t.Fatalf("primary state = %v, want live", st)
	}

	// The primary is cut off from publishing; it still hears the standby.
	var revEff lease.PublishRevocation
	for found := false; !found; now = now.Add(10 * time.Second) {
		if now.Sub(t0) > time.Hour {
			t.Fatalf("primary never published a revocation")
		}
		if now.Unix()%60 == 0 {
			deliver(s, p, s)
		}
		effs := p.m.Tick(now)
		s.m.Tick(now)
		revEff, found = findEffect[lease.PublishRevocation](effs)
	}
	if revEff.Successor != s.k.PublicKey() {
		t.Fatalf("PublishRevocation successor = %q, want the standby", revEff.Successor)
	}
	rev, err := BuildRevocationFor(p.k, revEff, now, "blossom://state")
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.in.Ingest(ctx, now, rev)
	if err != nil {
		t.Fatalf("standby Ingest(revocation) = %v", err)
	}
	w, _ := s.m.Workload("wl-1")
	effs := s.m.ObserveRevocation(now, RevocationInput(res.Revocation, w))
	claimEff, ok := findEffect[lease.PublishClaim](effs)
	if !ok {
		t.Fatalf("standby ObserveRevocation effects = %v, want PublishClaim", effs)
	}
	if claimEff.Epoch != 2 {
		t.Fatalf("PublishClaim epoch = %d, want 2", claimEff.Epoch)
	}

	// The claim reaches the (evicted) primary, which fences for good.
	claim, err := BuildClaimFor(s.k, claimEff, now)
	if err != nil {
		t.Fatal(err)
	}
	res, err = p.in.Ingest(ctx, now, claim)
	if err != nil {
		t.Fatalf("primary Ingest(claim) = %v", err)
	}
	c := ClaimInput(res.Promotion, relays[0])
	if c.Epoch != 2 || !c.Active || !c.CreatedAt.Equal(res.Promotion.CreatedAt) {
		t.Fatalf("ClaimInput(claim) = %+v, want active epoch 2", c)
	}
	p.m.ObserveClaim(now, c)
	if st, _ := p.m.State("wl-1"); st != lease.StateFenced {
		t.Fatalf("primary state after the claim = %v, want fenced", st)
	}

	// Withdrawing the claim (lease.WithdrawClaim) builds a marker that
	// ingests as withdrawn.
	wd, err := BuildWithdrawFor(s.k, lease.WithdrawClaim{ID: "wl-1", Epoch: 2}, now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.in.Ingest(ctx, now.Add(time.Second), wd); err != nil || res.Promotion.Status != ClaimWithdrawn {
		t.Fatalf("Ingest(withdrawn) = %+v, %v", res, err)
	}
}

func TestPaygressDefaultsInLeaseInputs(t *testing.T) {
	p, s1 := testKeys(t, "p"), testKeys(t, "s1")
	w := lease.WorkloadSnapshot{Holder: p.PublicKey(), Epoch: 4, WatchFrom: t0}

	// Revocation without epoch: the epoch the machine knows.
	r := &Revocation{WorkloadID: "a", Signer: p.PublicKey(), Successor: s1.PublicKey(), Standbys: []string{s1.PublicKey()}}
	if got := RevocationInput(r, w); got.Epoch != 4 || got.Successor != s1.PublicKey() {
		t.Fatalf("RevocationInput(paygress) = %+v, want epoch 4", got)
	}
	r.Epoch, r.HasEpoch = 3, true
	if got := RevocationInput(r, w); got.Epoch != 3 {
		t.Fatalf("RevocationInput(epoch 3) = %+v, want epoch 3", got)
	}

	// Promotions pass through as they are on the wire: a Paygress
	// announcement keeps EpochUnknown and its created_at (lease decides).
	tests := []struct {
		name   string
		pr     Promotion
		epoch  uint64
		active bool
	}{
		{"ours", Promotion{Signer: s1.PublicKey(), Epoch: 5, HasEpoch: true, Status: ClaimActive, CreatedAt: t0.Add(-time.Hour)}, 5, true},
		{"ours withdrawn", Promotion{Signer: s1.PublicKey(), Epoch: 5, HasEpoch: true, Status: ClaimWithdrawn, CreatedAt: t0}, 5, false},
		{"paygress fresh", Promotion{Signer: s1.PublicKey(), Status: ClaimActive, CreatedAt: t0.Add(time.Second)}, lease.EpochUnknown, true},
		{"paygress old", Promotion{Signer: s1.PublicKey(), Status: ClaimActive, CreatedAt: t0.Add(-time.Hour)}, lease.EpochUnknown, true},
		{"paygress by holder", Promotion{Signer: p.PublicKey(), Status: ClaimActive, CreatedAt: t0.Add(time.Hour)}, lease.EpochUnknown, true},
	}
	for _, tt := range tests {
		tt.pr.WorkloadID = "a"
		c := ClaimInput(&tt.pr, "ws://r")
		want := lease.PromotionClaim{Workload: "a", Claimer: tt.pr.Signer, Epoch: tt.epoch, Active: tt.active, Relay: "ws://r", CreatedAt: tt.pr.CreatedAt}
		if c != want {
			t.Errorf("ClaimInput(%s) = %+v, want %+v", tt.name, c, want)
		}
	}

	// A Paygress heartbeat (no list) feeds the machine as unlisted.
	h := &Heartbeat{Provider: p.PublicKey(), EventID: "x", CreatedAt: t0}
	if got := HeartbeatInput(h, "ws://r", t0); got.Listed || got.Provider != p.PublicKey() || got.Relay != "ws://r" {
		t.Fatalf("HeartbeatInput(paygress) = %+v, want unlisted", got)
	}
}
