package courier

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// crashChildEnv makes the test binary act as the crash test's child: it
// sends and flushes into the database named by the variable until killed.
const crashChildEnv = "COURIER_CRASH_CHILD_DB"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		if err := crashChild(path, os.Getenv("COURIER_CRASH_CYCLE")); err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// crashChild runs Run with a flaky forwarder and 8 concurrent senders, and
// prints "SENT <id> <bundle>" after each Send has returned nil.
func crashChild(path, cycle string) error {
	ctx := context.Background()
	db, err := openDBErr(path)
	if err != nil {
		return err
	}
	cfg := DefaultConfig()
	cfg.Concurrency = 4
	cfg.InitialBackoff = time.Millisecond
	cfg.MaxBackoff = 5 * time.Millisecond
	cfg.ForwardTimeout = 100 * time.Millisecond
	cfg.ClaimTimeout = 200 * time.Millisecond
	cfg.FlushInterval = 5 * time.Millisecond
	c, err := Open(ctx, db, cfg, Deps{})
	if err != nil {
		return err
	}
	fwd := ForwarderFunc(func(ctx context.Context, d Delivery) error {
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
		switch p := rand.IntN(100); {
		case p < 20:
			return ServerError(fmt.Errorf("flaky"))
		case p < 23:
			return ClientError(fmt.Errorf("rejected"))
		}
		return nil
	})
	go c.Run(ctx, fwd) // runs until the process is killed
	var out sync.Mutex
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				bundle := fmt.Sprintf("c%s-g%d-%d", cycle, g, i)
				var opts SendOptions
				if i%3 == 0 {
					opts.IdempotencyKey = bundle
				}
				r, err := c.Send(ctx, []byte(bundle), "crash", opts)
				if err != nil {
					fmt.Fprintln(os.Stderr, "send:", err)
					os.Exit(4)
				}
				out.Lock()
				fmt.Fprintf(os.Stdout, "SENT %s %s\n", r.ID, bundle) // one write per line
				out.Unlock()
				if i%3 == 0 { // a retried send with the key returns the same receipt
					again, err := c.Send(ctx, []byte(bundle), "crash", opts)
					if err != nil || again.ID != r.ID {
						fmt.Fprintln(os.Stderr, "idempotent resend:", again.ID, err)
						os.Exit(5)
					}
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

func TestCrashSIGKILLLosesNoSend(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	path := filepath.Join(t.TempDir(), "crash.db")
	sent := map[string]string{} // id -> bundle
	// At least 20 cycles; up to 30 while the first 15 s last.
	const minCycles, maxCycles = 20, 30
	soft := time.Now().Add(15 * time.Second)
	cycles := 0
	for cycle := 0; cycle < maxCycles && (cycle < minCycles || time.Now().Before(soft)); cycle++ {
		cycles++
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path, fmt.Sprintf("COURIER_CRASH_CYCLE=%d", cycle))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		// Kill at a random moment after the first send returned.
		first, ok := <-lines
		if !ok {
			cmd.Wait()
			t.Fatalf("cycle %d: child exited before sending: %s", cycle, stderr.String())
		}
		got := []string{first}
		kill := time.After(time.Duration(rand.IntN(150)) * time.Millisecond)
	collect:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					break collect
				}
				got = append(got, l)
			case <-kill:
				cmd.Process.Kill() // SIGKILL
				kill = nil
			}
		}
		err = cmd.Wait()
		if kill != nil || err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("cycle %d: child ended with %v before being killed: %s", cycle, err, stderr.String())
		}
		for _, l := range got {
			f := strings.Fields(l)
			if len(f) != 3 || f[0] != "SENT" {
				t.Fatalf("cycle %d: bad child line %q", cycle, l)
			}
			if prev, dup := sent[f[1]]; dup && prev != f[2] {
				t.Fatalf("id %s used for %s and %s", f[1], prev, f[2])
			}
			sent[f[1]] = f[2]
		}
	}
	if len(sent) < cycles {
		t.Fatalf("only %d sends returned nil in the children, want at least %d", len(sent), cycles)
	}

	// Restart: with the clock well past every claim and backoff, flushes
	// finish every pending receipt.
	e := &env{db: openDB(t, path), clock: newFakeClock()}
	defer e.db.Close()
	e.clock.now = time.Now().Add(24 * time.Hour)
	c, err := Open(context.Background(), e.db, DefaultConfig(), Deps{Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := c.Flush(context.Background(), &recorder{}); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Hour)
	}
	var check string
	if err := e.db.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check = %q, %v, want ok", check, err)
	}
	rows, err := e.db.Query(`SELECT bundle, COUNT(*) FROM courier_bundles GROUP BY bundle HAVING COUNT(*) > 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var b string
		var n int
		rows.Scan(&b, &n)
		t.Errorf("bundle %q stored %d times, want once", b, n)
	}
	rows.Close()
	states := map[State]int{}
	for idHex, bundle := range sent {
		id, err := ParseID(idHex)
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Get(context.Background(), id)
		if err != nil {
			t.Errorf("sent receipt %s (%s) lost: %v", idHex, bundle, err)
			continue
		}
		if string(r.Bundle) != bundle || r.BundleHash != HashBundle(r.Bundle) {
			t.Errorf("receipt %s = %q (hash %s), want %q with matching hash", idHex, r.Bundle, r.BundleHash, bundle)
		}
		if r.State != StateAcknowledged && r.State != StateDead {
			t.Errorf("receipt %s state = %s, want acknowledged or dead", idHex, r.State)
		}
		states[r.State]++
	}
	t.Logf("%d cycles, %d sends returned nil; states at restart %+v, final %v", cycles, len(sent), before, states)
}
