package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/heartbeat"
	"provideragent/identity"
	"provideragent/lease"
	"provideragent/relay"
)

// These tests drive one agent's ingest (decode) and machine step (feed)
// directly with signed events, to check the one wire-to-lease mapping
// (heartbeat's HeartbeatInput, RevocationInput and ClaimInput) end to end.

func newTestKeys(t *testing.T) *identity.Keys {
	t.Helper()
	k, err := identity.NewKeys(nostr.GeneratePrivateKey())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// stepSpec is a warm-standby lease of "w1" at epoch 1 over stepRelays.
func stepSpec(primary string, standbys ...string) lease.Spec {
	return lease.Spec{
		ID: "w1", Primary: primary, Standbys: standbys, Replication: lease.ReplicationWarmStandby, Epoch: 1,
		RestartPolicy: lease.RestartPolicy{Policy: lease.RestartNever}, Command: []string{"true"},
		Relays: stepRelays, Quorum: 2,
	}
}

// firstStandby builds a step agent that is the first standby of "w1"
// (granted at t0, held by primary, second standby second) and its keys.
func firstStandby(t *testing.T, t0 time.Time, primary, second *identity.Keys) (*Agent, *identity.Keys) {
	t.Helper()
	a := newStepAgent(t, stepOpts{})
	self := a.me.keys
	spec := stepSpec(primary.PublicKey(), self.PublicKey(), second.PublicKey())
	feedInput(a, t0, input{grant: &spec})
	return a, self
}

// step decodes ev as relay 0 delivered it at now and feeds it, returning the
// machine's effects; extra, when set, edits the input before feeding.
func step(t *testing.T, a *Agent, now time.Time, ev *nostr.Event, extra func(*input)) []lease.Effect {
	t.Helper()
	in := decodeInput(t, a, now, ev)
	if extra != nil {
		extra(&in)
	}
	return feedInput(a, now, in)
}

// decodeInput decodes ev as relay 0 delivered it at now, as ingest does.
func decodeInput(t *testing.T, a *Agent, now time.Time, ev *nostr.Event) input {
	t.Helper()
	in, ok := a.decode(context.Background(), now, relay.Received{Relay: stepRelays[0], Event: ev})
	if !ok {
		t.Fatalf("decode(kind %d) rejected the event", ev.Kind)
	}
	return in
}

// feedCommit feeds ins to one step at now, commits it and returns its
// effects; a commit error fails the test.
func feedCommit(t *testing.T, a *Agent, now time.Time, ins ...input) []lease.Effect {
	t.Helper()
	s := a.sh.Begin(now)
	for _, in := range ins {
		a.feed(s, in)
	}
	effs := s.Effects()
	if err := s.Commit(context.Background()); err != nil {
		t.Fatalf("commit(%v) = %v", effs, err)
	}
	return effs
}

// commitInputs feeds ins to one step at now and commits it, as the machine
// loop does.
func commitInputs(ctx context.Context, a *Agent, now time.Time, ins ...input) error {
	s := a.sh.Begin(now)
	for _, in := range ins {
		a.feed(s, in)
	}
	return s.Commit(ctx)
}

// commitEffects commits a step that performs effs (driver.Step.Inject),
// through the agent's real commit path.
func commitEffects(ctx context.Context, a *Agent, now time.Time, effs ...lease.Effect) error {
	s := a.sh.Begin(now)
	s.Inject(effs...)
	return s.Commit(ctx)
}

func feedInput(a *Agent, now time.Time, in input) []lease.Effect {
	s := a.sh.Begin(now)
	a.feed(s, in)
	return s.Effects()
}

func hasEffect[E lease.Effect](effs []lease.Effect) bool {
	for _, e := range effs {
		if _, ok := e.(E); ok {
			return true
		}
	}
	return false
}

// signed signs an event with the given kind, time, tags and content.
func signed(t *testing.T, k *identity.Keys, kind int, at time.Time, tags nostr.Tags, content string) *nostr.Event {
	t.Helper()
	ev := &nostr.Event{Kind: kind, CreatedAt: nostr.Timestamp(at.Unix()), Tags: tags, Content: content}
	if err := k.Sign(ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// paygressRevocation is a revocation as Paygress v1 writes it: its own key as
// hex in primary_provider_npub and the d tag, no epoch and no successor
// field (heartbeat/wire_test.go shows the same shape).
func paygressRevocation(t *testing.T, primary *identity.Keys, at time.Time, standbys ...*identity.Keys) *nostr.Event {
	t.Helper()
	list := ""
	tags := nostr.Tags{{"t", "paygress"}, {"t", "paygress-revocation"},
		{"d", heartbeat.RevocationDTag(primary.PublicKey(), "w1")}, {"v", "1"}, {"workload", "w1"}}
	for i, s := range standbys {
		if i > 0 {
			list += ","
		}
		list += `"` + s.PublicKey() + `"`
		tags = append(tags, nostr.Tag{"p", s.PublicKey()})
	}
	content := fmt.Sprintf(`{"workload_id":"w1","primary_provider_npub":%q,"standby_providers":[%s],"reason":"lost relay quorum","revoked_at":%d,"version":1}`,
		primary.PublicKey(), list, at.Unix())
	return signed(t, primary, heartbeat.KindRevocation, at, tags, content)
}

// paygressAnnouncement is a promotion announcement as Paygress v1 writes it
// after starting the workload: new_primary_npub in hex, no epoch, no status.
func paygressAnnouncement(t *testing.T, k *identity.Keys, at time.Time) *nostr.Event {
	t.Helper()
	tags := nostr.Tags{{"t", "paygress"}, {"t", "paygress-promoted"}, {"d", heartbeat.PromotionDTag("w1")}, {"v", "1"}, {"workload", "w1"}}
	content := fmt.Sprintf(`{"workload_id":"w1","new_primary_npub":%q,"promoted_at":%d,"version":1}`, k.PublicKey(), at.Unix())
	return signed(t, k, heartbeat.KindPromotion, at, tags, content)
}

// TestRevocationSuccessor: the first standby claims on a revocation that
// names it and on a Paygress revocation (which names nobody, so the first
// standby is meant); our revocation with "successor":"" (the primary saw no
// standby alive) makes nobody claim: takeover decides.
func TestRevocationSuccessor(t *testing.T) {
	t.Parallel()
	primary, second := newTestKeys(t), newTestKeys(t)
	t0 := time.Now()
	tests := []struct {
		name      string
		build     func(self *identity.Keys) *nostr.Event
		wantClaim bool
	}{
		{"ours naming the first standby", func(self *identity.Keys) *nostr.Event {
			ev, err := heartbeat.BuildRevocation(primary, heartbeat.RevocationParams{WorkloadID: "w1",
				Standbys: []string{self.PublicKey(), second.PublicKey()}, Reason: "fenced", At: t0, Successor: self.PublicKey(), Epoch: 1, QuorumAt: t0})
			if err != nil {
				t.Fatal(err)
			}
			return ev
		}, true},
		{"ours with empty successor", func(self *identity.Keys) *nostr.Event {
			ev, err := heartbeat.BuildRevocation(primary, heartbeat.RevocationParams{WorkloadID: "w1",
				Standbys: []string{self.PublicKey(), second.PublicKey()}, Reason: "fenced", At: t0, Epoch: 1})
			if err != nil {
				t.Fatal(err)
			}
			return ev
		}, false},
		{"paygress without successor field", func(self *identity.Keys) *nostr.Event {
			return paygressRevocation(t, primary, t0, self, second)
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, self := firstStandby(t, t0, primary, second)
			// The primary's heartbeats on M relays: a Paygress one carries
			// no quorum_at, and these bound its takeover instead.
			for _, r := range stepRelays[:2] {
				feedInput(a, t0, input{hb: &lease.Heartbeat{Provider: primary.PublicKey(), Relay: r, CreatedAt: t0.Truncate(time.Second), ReceivedAt: t0}})
			}
			effs := step(t, a, t0.Add(time.Second), tt.build(self), nil)
			w, _ := a.machine().Workload("w1")
			if got := hasEffect[lease.PublishClaim](effs); got != tt.wantClaim {
				t.Fatalf("feed(%s) = %v (state %s), want PublishClaim %v", tt.name, effs, w.State, tt.wantClaim)
			}
			if !tt.wantClaim && w.State != lease.StateStandby {
				t.Fatalf("state after %s = %s, want standby", tt.name, w.State)
			}
		})
	}
}

// TestPaygressAnnouncementFences: a Paygress announcement (no epoch) by a
// standby, made after we began holding, fences our copy at once (DESIGN rule
// 8: it counts as an active claim; rule 9); one made before we began holding
// is an old event and changes nothing.
func TestPaygressAnnouncementFences(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	tests := []struct {
		name      string
		at        time.Duration // announcement time relative to our grant
		wantFence bool
	}{
		{"after we began holding", 3 * time.Second, true},
		{"before we began holding", -time.Minute, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			standby := newTestKeys(t)
			a := newStepAgent(t, stepOpts{})
			spec := stepSpec(a.PublicKey(), standby.PublicKey())
			feedInput(a, t0, input{grant: &spec})
			ev := paygressAnnouncement(t, standby, t0.Add(tt.at))
			effs := step(t, a, t0.Add(4*time.Second), ev, nil)
			w, _ := a.machine().Workload("w1")
			if got := hasEffect[lease.StopWorkload](effs) && w.State == lease.StateFenced; got != tt.wantFence {
				t.Fatalf("feed(announcement %s) = %v, state %s; want fenced %v", tt.name, effs, w.State, tt.wantFence)
			}
		})
	}
}

// TestPaygressAnnouncementCompetes: a standby in the claim step that reads a
// Paygress announcement (no epoch) made since it began watching counts it as
// a competing claim and withdraws; an announcement older than that (from an
// earlier epoch) does not block it.
func TestPaygressAnnouncementCompetes(t *testing.T) {
	t.Parallel()
	primary, other := newTestKeys(t), newTestKeys(t)
	t0 := time.Now()
	tests := []struct {
		name     string
		at       time.Duration // announcement time relative to the grant
		wantWins bool
	}{
		{"fresh announcement", 2 * time.Second, false},
		{"announcement older than the epoch", -time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, self := firstStandby(t, t0, primary, other)
			rev, err := heartbeat.BuildRevocation(primary, heartbeat.RevocationParams{WorkloadID: "w1",
				Standbys: []string{self.PublicKey(), other.PublicKey()}, Reason: "fenced", At: t0, Successor: self.PublicKey(), Epoch: 1, QuorumAt: t0})
			if err != nil {
				t.Fatal(err)
			}
			if effs := step(t, a, t0.Add(time.Second), rev, nil); !hasEffect[lease.PublishClaim](effs) {
				t.Fatalf("feed(revocation naming us) = %v, want PublishClaim", effs)
			}
			if effs := feedInput(a, t0.Add(time.Second), input{claimAck: &lease.ClaimAck{Workload: "w1", Epoch: 2, Accepted: 3}}); !hasEffect[lease.ReadClaims](effs) {
				t.Fatalf("feed(claim ack) = %v, want ReadClaims", effs)
			}
			// The read: the announcement as one relay served it, then the report.
			ev := paygressAnnouncement(t, other, t0.Add(tt.at))
			effs := step(t, a, t0.Add(3*time.Second), ev, func(in *input) {
				in.claimRead = &lease.ClaimRead{Workload: "w1", Epoch: 2, Relays: 3}
			})
			won, withdrew := hasEffect[lease.StartWorkload](effs), hasEffect[lease.WithdrawClaim](effs)
			if won != tt.wantWins || withdrew == tt.wantWins {
				t.Fatalf("ClaimsRead after %s = %v, want start %v", tt.name, effs, tt.wantWins)
			}
		})
	}
}
