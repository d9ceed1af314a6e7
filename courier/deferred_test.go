package courier

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestDeferredIsNotAnAttempt: a forwarder that is not ready for a receipt
// yet (the agent's fence gate) defers it; the receipt is due again after
// the given delay, its attempts are not counted, it is never dead-lettered
// for waiting, and the other receipts of the flush are delivered at once.
func TestDeferredIsNotAnAttempt(t *testing.T) {
	e := newEnv(t, nil, Deps{})
	waiting := e.send(t, "waiting")
	var good []Receipt
	for i := range 5 {
		good = append(good, e.send(t, fmt.Sprint("good-", i)))
	}
	notYet := errors.New("workload not stopped yet")
	fwd := &recorder{fail: map[string]error{"waiting": Deferred(notYet, 2*time.Second)}}
	ctx := context.Background()
	max := e.c.Config().MaxAttempts
	for round := 1; round <= max+2; round++ {
		res, err := e.c.Flush(ctx, fwd)
		want := FlushResult{Deferred: 1, LastError: res.LastError}
		if round == 1 {
			want.Acknowledged = len(good)
		}
		if err != nil || res != want {
			t.Fatalf("Flush round %d = %+v, %v, want %+v", round, res, err, want)
		}
		got := e.get(t, waiting.ID)
		if got.State != StatePending || got.Attempts != 0 {
			t.Fatalf("deferred receipt after round %d = %s with %d attempts, want pending with 0", round, got.State, got.Attempts)
		}
		if !got.NextAttemptAt.Equal(e.clock.Now().Add(2 * time.Second)) {
			t.Fatalf("deferred receipt due at %v, want now+2s (%v)", got.NextAttemptAt, e.clock.Now().Add(2*time.Second))
		}
		if res, _ := e.c.Flush(ctx, fwd); res != (FlushResult{}) {
			t.Fatalf("Flush before the deferral ends = %+v, want nothing", res)
		}
		e.clock.Advance(2 * time.Second)
	}
	for _, g := range good {
		if got := e.get(t, g.ID); got.State != StateAcknowledged {
			t.Errorf("good receipt %s = %s, want acknowledged", g.ID, got.State)
		}
	}
	delete(fwd.fail, "waiting")
	if res, err := e.c.Flush(ctx, fwd); err != nil || res.Acknowledged != 1 {
		t.Fatalf("Flush once ready = %+v, %v, want the receipt acknowledged", res, err)
	}
}
