package courier_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"provideragent/courier"
	"provideragent/internal/sqlitedb"
)

// fixedClock is a clock that moves only when told, so that retries come
// due when the example says.
type fixedClock struct{ now time.Time }

func (c *fixedClock) Now() time.Time { return c.now }

// openCourier opens a courier on a fresh SQLite file in a temporary
// directory, with a clock of its own (which the returned fixedClock moves)
// and no jitter; closeAll closes it and removes the directory.
func openCourier() (c *courier.Courier, clock *fixedClock, closeAll func(), err error) {
	dir, err := os.MkdirTemp("", "courier-")
	if err != nil {
		return nil, nil, nil, err
	}
	clock = &fixedClock{now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	db, err := sqlitedb.Open(context.Background(), filepath.Join(dir, "outbox.db"), sqlitedb.Options{})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	c, err = courier.Open(context.Background(), db, courier.DefaultConfig(), courier.Deps{Clock: clock, Rand: func() float64 { return 0.5 }})
	if err != nil {
		db.Close()
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	return c, clock, func() { c.Close(); db.Close(); os.RemoveAll(dir) }, nil
}

// Send stores a bundle durably and returns its receipt; Flush hands the
// due receipts to a forwarder and records the outcome. A failed delivery
// is retried after a backoff; an idempotency key makes a repeated send
// return the first receipt.
func ExampleCourier_Flush() {
	ctx := context.Background()
	c, clock, closeAll, err := openCourier()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeAll()

	r, _ := c.Send(ctx, []byte(`{"hello":"world"}`), "example", courier.SendOptions{IdempotencyKey: "greeting-1"})
	again, _ := c.Send(ctx, []byte(`{"hello":"world"}`), "example", courier.SendOptions{IdempotencyKey: "greeting-1"})
	fmt.Println("same receipt:", again.ID == r.ID, r.State)

	down := true
	fwd := courier.ForwarderTo(courier.DestinationHTTP, func(ctx context.Context, d courier.Delivery) error {
		if down {
			return courier.ServerError(errors.New("503 service unavailable"))
		}
		fmt.Printf("delivered %s (attempt %d)\n", d.Bundle, d.Attempt)
		return nil
	})
	res, _ := c.Flush(ctx, fwd)
	fmt.Println("first flush: retried", res.Retried)

	down = false
	clock.now = clock.now.Add(time.Second) // past the first backoff (at most 100 ms)
	res, _ = c.Flush(ctx, fwd)
	fmt.Println("second flush: acknowledged", res.Acknowledged)
	got, _ := c.Get(ctx, r.ID)
	fmt.Println(got.State, "after", got.Attempts, "attempts")
	// Output:
	// same receipt: true pending
	// first flush: retried 1
	// delivered {"hello":"world"} (attempt 2)
	// second flush: acknowledged 1
	// acknowledged after 2 attempts
}

// A client error (the far side refuses the bundle) dead-letters the
// receipt at once; so do MaxAttempts failures. An operator lists the
// dead-letter queue and may resend a receipt once the cause is fixed.
func ExampleCourier_Resend() {
	ctx := context.Background()
	c, _, closeAll, err := openCourier()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeAll()

	r, _ := c.Send(ctx, []byte("not json"), "example", courier.SendOptions{})
	refuse := courier.ForwarderTo(courier.DestinationHTTP, func(ctx context.Context, d courier.Delivery) error {
		return courier.ClientError(errors.New("400 bad request"))
	})
	res, _ := c.Flush(ctx, refuse)
	fmt.Println("dead-lettered:", res.DeadLettered)

	dead, _ := c.List(ctx, courier.ListOptions{State: courier.StateDead})
	for _, d := range dead {
		fmt.Println(d.ID == r.ID, d.State, d.LastError)
	}

	back, _ := c.Resend(ctx, r.ID)
	fmt.Println("resent:", back.State)
	st, _ := c.Stats(ctx)
	fmt.Printf("%+v\n", st)
	// Output:
	// dead-lettered: 1
	// true dead client_error: 400 bad request
	// resent: pending
	// {Pending:1 Acknowledged:0 Dead:0}
}
