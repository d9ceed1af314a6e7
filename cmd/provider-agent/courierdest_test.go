package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/courier"
	"provideragent/heartbeat"
	"provideragent/internal/relaytest"
	"provideragent/internal/sqlitedb"
)

// revocationEvent is a signed kind 38385 event as the agent queues it.
func revocationEvent(t *testing.T, workload string) nostr.Event {
	t.Helper()
	sk := nostr.GeneratePrivateKey()
	pub, _ := nostr.GetPublicKey(sk)
	ev := nostr.Event{
		Kind: heartbeat.KindRevocation, CreatedAt: nostr.Now(),
		Tags:    nostr.Tags{{"d", "paygress:revocation:v1:" + pub + ":" + workload}, {"workload", workload}},
		Content: fmt.Sprintf(`{"workload_id":%q,"primary_provider_npub":%q,"standby_providers":[],"reason":"test","revoked_at":1,"version":1}`, workload, pub),
	}
	if err := ev.Sign(sk); err != nil {
		t.Fatal(err)
	}
	return ev
}

// agentOutboxV1 writes the outbox of an agent that ran before receipts had
// a destination (courier migration 0001 only): the agent's revocations, a
// pending one and a dead one, as the agent stored them (sender "agent").
// It returns their ids.
func agentOutboxV1(t *testing.T, dbPath string) (pending, dead courier.ID, events []nostr.Event) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlitedb.Open(ctx, dbPath, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	migs, err := courier.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlitedb.Migrate(ctx, db, courier.Component, migs, 1); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	for i, state := range []string{"pending", "dead"} {
		ev := revocationEvent(t, fmt.Sprintf("job-%d", i))
		b, _ := json.Marshal(ev)
		id := int64(0x1000 + i)
		if _, err := db.Exec(`INSERT INTO courier_receipts (seq, id, bundle_hash, sender, created_at, state, attempts, next_attempt_at, last_error, failed_at, size)
			VALUES (?, ?, ?, 'agent', ?, ?, 10, ?, 'fewer than quorum relays accepted', ?, ?)`,
			i+1, id, courier.HashBundle(b), now, state, now+int64(time.Hour/time.Millisecond), now, len(b)); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO courier_bundles (seq, bundle) VALUES (?, ?)`, i+1, b); err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
	}
	return courier.ID(0x1000), courier.ID(0x1001), events
}

// TestCourierRefusesToPostNostrReceipts: the scenario. An agent's
// revocations sit in its outbox (one pending, one dead-lettered after the
// relays failed). 'courier resend' then 'courier flush --to URL', and
// 'courier dlq replay --to URL', must not acknowledge them by POSTing them
// to an HTTP endpoint: they are refused, named with their destination, and
// stay as they were. 'courier flush --relays' (the agent stopped) publishes
// them to the agent's relays; while an agent runs it refuses.
func TestCourierRefusesToPostNostrReceipts(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	newKey(t, filepath.Join(dir, "identity.key"))
	pending, dead, events := agentOutboxV1(t, filepath.Join(dir, "provider-agent.db"))
	var posts atomic.Int32
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts.Add(1)
	}))
	defer sink.Close()

	must(t, nil, "courier", "resend", pending.String(), "--data-dir", dir)
	r := cli(t, nil, "courier", "flush", "--to", sink.URL, "--data-dir", dir)
	if r.code != 1 || !strings.Contains(r.stderr, pending.String()) || !strings.Contains(r.stderr, "destination nostr") {
		t.Errorf("courier flush --to URL with a due revocation = exit %d %q %q, want exit 1 naming %s and its destination nostr",
			r.code, r.stdout, r.stderr, pending)
	}
	r = cli(t, nil, "courier", "dlq", "replay", "--to", sink.URL, "--rate", "100", "--data-dir", dir)
	if r.code != 1 || !strings.Contains(r.stderr, dead.String()) || !strings.Contains(r.stderr, "destination nostr") {
		t.Errorf("courier dlq replay --to URL with a dead revocation = exit %d %q %q, want exit 1 naming %s and its destination nostr",
			r.code, r.stdout, r.stderr, dead)
	}
	if n := posts.Load(); n != 0 {
		t.Errorf("the HTTP sink got %d POSTs, want none", n)
	}
	for id, want := range map[courier.ID]string{pending: "pending", dead: "dead"} {
		show := must(t, nil, "courier", "show", id.String(), "--data-dir", dir)
		if !strings.Contains(show.stdout, want) || !strings.Contains(show.stdout, "nostr") {
			t.Errorf("courier show %s = %q, want state %s, destination nostr", id, show.stdout, want)
		}
	}

	// --relays publishes them to the agent's relays, with its key.
	var relays []*relaytest.Relay
	args := []string{"--data-dir", dir, "--quorum", "2"}
	for range 3 {
		rl := relaytest.Start(t)
		relays = append(relays, rl)
		args = append(args, "--relay", rl.URL())
	}
	// Not while an agent runs on the data dir: it publishes them itself.
	lock, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	r = cli(t, nil, append([]string{"courier", "flush", "--relays"}, args...)...)
	if want := fmt.Sprintf("pid %d", os.Getpid()); r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("courier flush --relays while the data dir is held = exit %d %q, want exit 1 naming %s", r.code, r.stderr, want)
	}
	lock.Close()
	r = must(t, nil, append([]string{"courier", "flush", "--relays"}, args...)...)
	if !strings.Contains(r.stdout, "acknowledged 1") {
		t.Errorf("courier flush --relays = %q, want the pending revocation acknowledged", r.stdout)
	}
	r = must(t, nil, append([]string{"courier", "dlq", "replay", "--relays", "--rate", "100"}, args...)...)
	if !strings.Contains(r.stdout, "acknowledged 1") {
		t.Errorf("courier dlq replay --relays = %q, want the dead revocation acknowledged", r.stdout)
	}
	// An http receipt is never published to relays: --relays refuses it,
	// names it and leaves it pending.
	plain := filepath.Join(t.TempDir(), "order.txt")
	if err := os.WriteFile(plain, []byte("order 7"), 0o600); err != nil {
		t.Fatal(err)
	}
	sent := must(t, nil, "courier", "send", plain, "--sender", "ops", "--destination", "http", "--data-dir", dir)
	httpID := strings.Fields(sent.stdout)[0]
	r = cli(t, nil, append([]string{"courier", "flush", "--relays"}, args...)...)
	if r.code != 1 || !strings.Contains(r.stderr, httpID) || !strings.Contains(r.stderr, "destination http") {
		t.Errorf("courier flush --relays with a due http receipt = exit %d %q %q, want exit 1 naming %s and its destination http",
			r.code, r.stdout, r.stderr, httpID)
	}
	if show := must(t, nil, "courier", "show", httpID, "--data-dir", dir); !strings.Contains(show.stdout, "pending") {
		t.Errorf("courier show %s after flush --relays = %q, want it still pending", httpID, show.stdout)
	}
	for _, ev := range events {
		c := relaytest.Dial(t, relays[0].URL())
		c.Send(nostr.ReqEnvelope{SubscriptionID: "r", Filters: nostr.Filters{{IDs: []string{ev.ID}}}})
		env, err := c.Read(10 * time.Second)
		if got, ok := env.(*nostr.EventEnvelope); err != nil || !ok || got.ID != ev.ID {
			t.Errorf("relay query for revocation %s = %v, %v, want the event", ev.ID, env, err)
		}
		c.Close()
	}
}

// TestCourierSendRecordsTheDestination: send stores what the operator says
// the bundle is; a nostr bundle must be a signed event; list shows it.
func TestCourierSendRecordsTheDestination(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	tmp := t.TempDir()
	ev := revocationEvent(t, "job-9")
	b, _ := json.Marshal(ev)
	evFile, plain := filepath.Join(tmp, "rev.json"), filepath.Join(tmp, "order.txt")
	if err := os.WriteFile(evFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, []byte("order 7"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := must(t, nil, "courier", "send", evFile, "--sender", "ops", "--destination", "nostr", "--data-dir", dir)
	h := must(t, nil, "courier", "send", plain, "--sender", "ops", "--destination", "http", "--data-dir", dir)
	if !strings.Contains(n.stdout, " nostr ") || !strings.Contains(h.stdout, " http ") {
		t.Errorf("courier send printed %q and %q, want their destinations", n.stdout, h.stdout)
	}
	// The event stored for HTTP is allowed, with a warning.
	w := must(t, nil, "courier", "send", evFile, "--sender", "ops", "--destination", "http", "--data-dir", dir)
	if !strings.Contains(w.stderr, "warning") || !strings.Contains(w.stderr, "never published to relays") {
		t.Errorf("courier send of an event for http: stderr %q, want a warning", w.stderr)
	}
	if r := cli(t, nil, "courier", "send", plain, "--sender", "ops", "--destination", "nostr", "--data-dir", dir); r.code != 1 || !strings.Contains(r.stderr, "not one signed Nostr event") {
		t.Errorf("courier send of a plain file for nostr = exit %d %q, want exit 1", r.code, r.stderr)
	}
	if r := cli(t, nil, "courier", "send", plain, "--sender", "ops", "--data-dir", dir); r.code != 2 || !strings.Contains(r.stderr, "--destination is required") {
		t.Errorf("courier send without --destination = exit %d %q, want a usage error", r.code, r.stderr)
	}
	l := must(t, nil, "courier", "list", "--destination", "nostr", "--data-dir", dir)
	if !strings.Contains(l.stdout, strings.Fields(n.stdout)[0]) || strings.Contains(l.stdout, strings.Fields(h.stdout)[0]) {
		t.Errorf("courier list --destination nostr = %q, want only the nostr receipt", l.stdout)
	}
}
