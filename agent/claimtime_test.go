package agent

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"provideragent/courier"
	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/lease"
	"provideragent/relay"
)

// recPool is a RelayPool that records what the agent publishes; every
// relay accepts nothing (so a claim is withdrawn at once).
type recPool struct {
	upPool
	mu  sync.Mutex
	evs []*nostr.Event
}

func (p *recPool) Publish(_ context.Context, ev *nostr.Event) relay.PublishResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.evs = append(p.evs, ev)
	return relay.PublishResult{}
}

func (p *recPool) PublishQuorum(ctx context.Context, ev *nostr.Event, _ int) relay.PublishResult {
	return p.Publish(ctx, ev)
}

func (p *recPool) published(kind int) []*nostr.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*nostr.Event
	for _, ev := range p.evs {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// TestClaimCreatedAtIncreases: a claim and its withdrawn marker made in the
// same second get strictly increasing created_at (relays keep the newest per
// d tag; on a tie the lower id wins, NIP-01), and the order holds across a
// restart on the same database.
func TestClaimCreatedAtIncreases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := nostr.GeneratePrivateKey()
	dbPath := filepath.Join(t.TempDir(), "agent.db")
	pool := &recPool{}
	a, t0 := inClaimStep(t, key, dbPath, pool)
	if n := publishQueuedClaims(ctx, a); n != 1 {
		t.Fatalf("claims queued for the publishers = %d, want 1", n)
	}
	// No relay accepted it: the machine withdraws, in the same second.
	effs := feedCommit(t, a, t0.Add(200*time.Millisecond), input{claimAck: &lease.ClaimAck{Workload: "w1", Epoch: 2}})
	if !hasEffect[lease.WithdrawClaim](effs) {
		t.Fatalf("feed(claim ack 0) = %v, want WithdrawClaim", effs)
	}
	// The claim is published directly (a feedback effect); the withdrawn
	// marker is queued in the durable outbox (lease.DurabilityOf).
	evs := pool.published(heartbeat.KindPromotion)
	if len(evs) != 1 {
		t.Fatalf("published promotions = %d, want 1 (the claim)", len(evs))
	}
	claim := evs[0]
	withdraw := outboxEvent(t, a, heartbeat.KindPromotion)
	if p, err := heartbeat.DecodePromotion(withdraw); err != nil || p.Status != heartbeat.ClaimWithdrawn {
		t.Fatalf("DecodePromotion(outbox row) = %+v, %v, want a withdrawn marker", p, err)
	}
	if claim.Tags.GetD() != withdraw.Tags.GetD() {
		t.Fatalf("d tags = %q, %q, want equal", claim.Tags.GetD(), withdraw.Tags.GetD())
	}
	if claim.CreatedAt != nostr.Timestamp(t0.Unix()) || withdraw.CreatedAt <= claim.CreatedAt {
		t.Fatalf("created_at(claim, withdrawn) = %d, %d, want %d then larger", claim.CreatedAt, withdraw.CreatedAt, t0.Unix())
	}

	// A restarted agent (same database) reads the last one back, so the
	// driver continues above it (driver's TestClaimTimesIncrease).
	b := newStepAgent(t, stepOpts{key: key, dbPath: dbPath, pool: pool})
	if got, err := b.data.rows.LastClaimTime(ctx, "w1", time.Second); err != nil || got != int64(withdraw.CreatedAt) {
		t.Fatalf("LastClaimTime(w1) after a restart = %d, %v, want %d", got, err, withdraw.CreatedAt)
	}
	if got, err := b.data.rows.LastClaimTime(ctx, "w2", time.Second); err != nil || got != 0 {
		t.Fatalf("LastClaimTime(w2) = %d, %v, want 0", got, err)
	}
}

// inClaimStep is a step agent with key on dbPath that a revocation naming
// it has put in the claim step for w1 at epoch 2 at t0 (its claim queued
// for the publishers, not yet sent).
func inClaimStep(t *testing.T, key, dbPath string, pool *recPool) (*Agent, time.Time) {
	t.Helper()
	ctx := context.Background()
	primary, second := newTestKeys(t), newTestKeys(t)
	self, _ := identity.NewKeys(key)
	a := newStepAgent(t, stepOpts{key: key, dbPath: dbPath, pool: pool})
	t0 := time.Now().Truncate(time.Second).Add(100 * time.Millisecond)
	spec := stepSpec(primary.PublicKey(), self.PublicKey(), second.PublicKey())
	if err := commitInputs(ctx, a, t0, input{grant: &spec}); err != nil {
		t.Fatalf("commit(grant) = %v", err)
	}
	rev, err := heartbeat.BuildRevocation(primary, heartbeat.RevocationParams{WorkloadID: "w1",
		Standbys: []string{self.PublicKey(), second.PublicKey()}, Reason: "fenced", At: t0, Successor: self.PublicKey(), Epoch: 1, QuorumAt: t0})
	if err != nil {
		t.Fatal(err)
	}
	effs := feedCommit(t, a, t0, decodeInput(t, a, t0, rev))
	if !hasEffect[lease.PublishClaim](effs) {
		t.Fatalf("feed(revocation naming us) = %v, want PublishClaim", effs)
	}
	return a, t0
}

// TestNoWithdrawnMarkerForAClaimNeverSent: a claim step that ends while its
// claim still waits for a publisher queues no withdrawn marker (no relay
// has the claim to mark inactive), and the claim is then never sent.
func TestNoWithdrawnMarkerForAClaimNeverSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := &recPool{}
	a, t0 := inClaimStep(t, nostr.GeneratePrivateKey(), filepath.Join(t.TempDir(), "agent.db"), pool)
	effs := feedCommit(t, a, t0.Add(200*time.Millisecond), input{claimAck: &lease.ClaimAck{Workload: "w1", Epoch: 2}})
	if !hasEffect[lease.WithdrawClaim](effs) {
		t.Fatalf("feed(claim ack 0) = %v, want WithdrawClaim", effs)
	}
	if n := publishQueuedClaims(ctx, a); n != 0 {
		t.Fatalf("claims published after the withdrawal = %d, want 0", n)
	}
	rs, err := a.out.courier.List(ctx, courier.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 0 || len(pool.published(heartbeat.KindPromotion)) != 0 {
		t.Fatalf("outbox rows %d, promotions published %d; want none of either", len(rs), len(pool.published(heartbeat.KindPromotion)))
	}
}

// outboxEvent returns the one event of kind queued in a's outbox.
func outboxEvent(t *testing.T, a *Agent, kind int) *nostr.Event {
	t.Helper()
	rs, err := a.out.courier.List(context.Background(), courier.ListOptions{})
	if err != nil {
		t.Fatalf("outbox List = %v", err)
	}
	var found *nostr.Event
	for _, r := range rs {
		full, err := a.out.courier.Get(context.Background(), r.ID)
		if err != nil {
			t.Fatalf("outbox Get(%v) = %v", r.ID, err)
		}
		var ev nostr.Event
		if err := json.Unmarshal(full.Bundle, &ev); err != nil {
			t.Fatalf("outbox row %v is not an event: %v", r.ID, err)
		}
		if ev.Kind == kind {
			if found != nil {
				t.Fatalf("outbox holds two kind %d events, want one", kind)
			}
			found = &ev
		}
	}
	if found == nil {
		t.Fatalf("outbox holds no kind %d event (%d rows)", kind, len(rs))
	}
	return found
}

// agent_claims_awaiting_answer shows a claim from its step until its
// publish's answer.
func TestClaimsAwaitingAnswerGauge(t *testing.T) {
	t.Parallel()
	a, t0 := inClaimStep(t, nostr.GeneratePrivateKey(), filepath.Join(t.TempDir(), "agent.db"), &recPool{})
	a.refreshStatus(t0)
	if got := testutil.ToFloat64(a.obs.met.claimsWaiting); got != 1 {
		t.Fatalf("agent_claims_awaiting_answer in the claim step = %v, want 1", got)
	}
	feedCommit(t, a, t0.Add(200*time.Millisecond), input{claimAck: &lease.ClaimAck{Workload: "w1", Epoch: 2, Accepted: 3}})
	a.refreshStatus(t0.Add(200 * time.Millisecond))
	if got := testutil.ToFloat64(a.obs.met.claimsWaiting); got != 0 {
		t.Fatalf("agent_claims_awaiting_answer once answered = %v, want 0", got)
	}
}
