package courier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"pgregory.net/rapid"

	"provideragent/internal/sqlitedb"
)

// modelReceipt is the reference model's view of one receipt.
type modelReceipt struct {
	bundle   string
	key      string
	state    State
	attempts int
	due      time.Time
}

// outcomeKinds are what the test forwarder can answer.
var outcomeKinds = []string{"ok", "client", "server", "transport", "rate5s"}

func outcomeErr(kind string) error {
	switch kind {
	case "client":
		return ClientError(errBoom)
	case "server":
		return ServerError(errBoom)
	case "transport":
		return errBoom
	case "rate5s":
		return RateLimited(errBoom, 5*time.Second)
	}
	return nil
}

// TestCourierMatchesModel drives a courier with random sends, flushes
// (random outcome per receipt), clock steps, resends, drops and replays,
// and compares every receipt with a simple reference model after each step.
func TestCourierMatchesModel(t *testing.T) {
	// One database for all runs (emptied each time) keeps a run cheap.
	db, err := sqlitedb.Open(context.Background(), filepath.Join(t.TempDir(), "model.db"), sqlitedb.Options{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	migs, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlitedb.Migrate(context.Background(), db, Component, migs, 0); err != nil {
		t.Fatal(err)
	}
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		if _, err := db.ExecContext(ctx, `DELETE FROM courier_receipts`); err != nil {
			rt.Fatal(err)
		}
		clock := newFakeClock()
		cfg := DefaultConfig()
		cfg.MaxAttempts = rapid.IntRange(1, 4).Draw(rt, "maxAttempts")
		cfg.ClaimBatch = rapid.IntRange(1, 5).Draw(rt, "claimBatch")
		cfg.Concurrency = rapid.IntRange(1, 4).Draw(rt, "concurrency")
		c, err := Open(ctx, db, cfg, Deps{Clock: clock, Rand: func() float64 { return 0.5 }})
		if err != nil {
			rt.Fatal(err)
		}
		defer c.Close()
		backoff := cfg.Backoff()
		model := map[ID]*modelReceipt{}
		byKey := map[string]ID{}

		ids := func() []ID {
			out := make([]ID, 0, len(model))
			for id := range model {
				out = append(out, id)
			}
			sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
			return out
		}
		// drawOutcomes picks an answer for every receipt the model knows.
		drawOutcomes := func(rt *rapid.T) map[ID]string {
			out := map[ID]string{}
			for _, id := range ids() {
				out[id] = rapid.SampledFrom(outcomeKinds).Draw(rt, "outcome")
			}
			return out
		}
		forwarder := func(outcomes map[ID]string) Forwarder {
			return ForwarderFunc(func(_ context.Context, d Delivery) error {
				m := model[d.ReceiptID] // read-only during the call
				if m == nil || string(d.Bundle) != m.bundle || d.BundleHash != HashBundle([]byte(m.bundle)) || d.Attempt != m.attempts+1 {
					return ClientError(fmt.Errorf("unexpected delivery %+v", d))
				}
				return outcomeErr(outcomes[d.ReceiptID])
			})
		}

		rt.Repeat(map[string]func(*rapid.T){
			"send": func(rt *rapid.T) {
				bundle := rapid.SampledFrom([]string{"a", "b", "c", ""}).Draw(rt, "bundle")
				key := rapid.SampledFrom([]string{"", "", "k1", "k2"}).Draw(rt, "key")
				r, err := c.Send(ctx, []byte(bundle), "s", SendOptions{IdempotencyKey: key})
				if key != "" {
					if prev, ok := byKey[key]; ok {
						if model[prev] == nil {
							// dropped: the key is free again
						} else if model[prev].bundle != bundle {
							if !errors.Is(err, ErrIdempotencyConflict) || r.ID != prev {
								rt.Fatalf("Send(conflicting key) = %s, %v, want %s, ErrIdempotencyConflict", r.ID, err, prev)
							}
							return
						} else {
							if err != nil || r.ID != prev {
								rt.Fatalf("Send(same key) = %s, %v, want %s", r.ID, err, prev)
							}
							return
						}
					}
				}
				if err != nil {
					rt.Fatalf("Send = %v", err)
				}
				if model[r.ID] != nil {
					rt.Fatalf("Send returned existing id %s", r.ID)
				}
				model[r.ID] = &modelReceipt{bundle: bundle, key: key, state: StatePending, due: clock.Now()}
				if key != "" {
					byKey[key] = r.ID
				}
			},
			"advance": func(rt *rapid.T) {
				clock.Advance(rapid.SampledFrom([]time.Duration{0, 10 * time.Millisecond, 100 * time.Millisecond, 5 * time.Second, time.Hour}).Draw(rt, "step"))
			},
			"flush": func(rt *rapid.T) {
				outcomes := drawOutcomes(rt)
				now := clock.Now()
				var want FlushResult
				type change struct {
					id ID
					m  modelReceipt
				}
				var changes []change
				for id, m := range model {
					if m.state != StatePending || m.due.After(now) {
						continue
					}
					n := *m
					n.attempts++
					switch kind := outcomes[id]; {
					case kind == "ok":
						n.state = StateAcknowledged
						want.Acknowledged++
					case kind == "client" || n.attempts >= cfg.MaxAttempts:
						n.state = StateDead
						want.DeadLettered++
					case kind == "rate5s":
						n.due = now.Add(5 * time.Second)
						want.Retried++
					default:
						n.due = NextAttemptAt(backoff, now, n.attempts, 0.5)
						want.Retried++
					}
					changes = append(changes, change{id, n})
				}
				res, err := c.Flush(ctx, forwarder(outcomes))
				if err != nil {
					rt.Fatalf("Flush = %v", err)
				}
				for _, ch := range changes {
					*model[ch.id] = ch.m
				}
				res.LastError = ""
				if res != want {
					rt.Fatalf("Flush = %+v, want %+v", res, want)
				}
			},
			"resend": func(rt *rapid.T) {
				all := ids()
				if len(all) == 0 {
					rt.Skip("nothing to resend")
				}
				id := rapid.SampledFrom(all).Draw(rt, "id")
				if _, err := c.Resend(ctx, id); err != nil {
					rt.Fatalf("Resend(%s) = %v", id, err)
				}
				m := model[id]
				m.state, m.attempts, m.due = StatePending, 0, clock.Now()
			},
			"drop": func(rt *rapid.T) {
				all := ids()
				if len(all) == 0 {
					rt.Skip("nothing to drop")
				}
				id := rapid.SampledFrom(all).Draw(rt, "id")
				err := c.Drop(ctx, id)
				if model[id].state != StateDead {
					if !errors.Is(err, ErrNotDead) {
						rt.Fatalf("Drop(%s in %s) = %v, want ErrNotDead", id, model[id].state, err)
					}
					return
				}
				if err != nil {
					rt.Fatalf("Drop(%s) = %v", id, err)
				}
				if model[id].key != "" {
					delete(byKey, model[id].key)
				}
				delete(model, id)
			},
			"replay": func(rt *rapid.T) {
				outcomes := drawOutcomes(rt)
				var want ReplayResult
				var dead []ID
				for id, m := range model {
					if m.state != StateDead {
						continue
					}
					dead = append(dead, id)
					if outcomes[id] == "ok" {
						want.Acknowledged++
					} else {
						want.Failed++
					}
				}
				res, err := c.Replay(ctx, forwarder(outcomes), 1e9)
				if err != nil {
					rt.Fatalf("Replay = %v", err)
				}
				for _, id := range dead {
					model[id].attempts++
					if outcomes[id] == "ok" {
						model[id].state = StateAcknowledged
					}
				}
				res.LastError = ""
				if res != want {
					rt.Fatalf("Replay = %+v, want %+v", res, want)
				}
			},
			"": func(rt *rapid.T) {
				var st Stats
				for id, m := range model {
					r, err := c.Get(ctx, id)
					if err != nil {
						rt.Fatalf("Get(%s) = %v, want the receipt", id, err)
					}
					if r.State != m.state || r.Attempts != m.attempts || !bytes.Equal(r.Bundle, []byte(m.bundle)) {
						rt.Fatalf("Get(%s) = state %s attempts %d bundle %q, want %s %d %q", id, r.State, r.Attempts, r.Bundle, m.state, m.attempts, m.bundle)
					}
					if m.state == StatePending && !r.NextAttemptAt.Equal(m.due) {
						rt.Fatalf("Get(%s).NextAttemptAt = %v, want %v", id, r.NextAttemptAt, m.due)
					}
					switch m.state {
					case StatePending:
						st.Pending++
					case StateAcknowledged:
						st.Acknowledged++
					case StateDead:
						st.Dead++
					}
				}
				got, err := c.Stats(ctx)
				if err != nil || got != st {
					rt.Fatalf("Stats = %+v, %v, want %+v", got, err, st)
				}
			},
		})
	})
}
