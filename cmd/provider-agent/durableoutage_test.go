package main

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"provideragent/agent"
	"provideragent/internal/devblossom"
	"provideragent/internal/relaytest"
)

// blossomAt is a dev-blossom server on addr ("127.0.0.1:0" picks a port)
// keeping its blobs in dir; stop it and start another on its address and
// dir, and the blobs are back.
func blossomAt(t *testing.T, dir, addr string) *devblossom.Server {
	t.Helper()
	s, err := devblossom.New(devblossom.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background(), addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

// TestRequiredRestoreOutlivesABlossomOutage: two real agents (a primary and
// its only standby), three relays, two dev-blossom servers, the counter
// workload granted durable with restore=required. kill -9 of the primary,
// and both Blossom servers go down; the standby takes over and cannot
// restore. It used to fail the workload at provision_timeout and leave it
// failed after the servers came back. Now it hands the workload on and
// takes it back by the retake rule: 20 s after the standby's first restore
// attempt the servers come back, and it runs the counter again, from at
// least the primary's last published checkpoint, within provision_timeout
// + takeover_after + the proof lag (heartbeat + 2 x relay_delay) + two
// claim timeouts + the restore timeout (5 + 12 + 3 + 10 + 3 = 33 s with
// the demo's timings) of the servers' return.
func TestRequiredRestoreOutlivesABlossomOutage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("workloads run as users of their own: needs root")
	}
	t.Parallel()
	tmp := t.TempDir()
	var relays []string
	for range 3 {
		relays = append(relays, relaytest.Start(t).URL())
	}
	dirs := []string{filepath.Join(tmp, "blobs1"), filepath.Join(tmp, "blobs2")}
	servers := []*devblossom.Server{blossomAt(t, dirs[0], "127.0.0.1:0"), blossomAt(t, dirs[1], "127.0.0.1:0")}
	d := startDurablePair(t, tmp, relays, requiredRestore, servers[0].URL(), servers[1].URL())
	a, b, pubA, starts := d.a, d.b, d.pubA, d.starts
	a.kill(t)
	_, lastValue := lastPublished(t, relays, pubA, d.keyA, "ctr", 1)
	var addrs []string
	for _, s := range servers {
		u, _ := url.Parse(s.URL())
		addrs = append(addrs, u.Host)
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	b.waitStatus(t, "the standby restoring ctr", 120*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "ctr")
		return ok && w.Restore != "" && w.Restore != "restored"
	})
	time.Sleep(20 * time.Second)
	for i := range servers {
		servers[i] = blossomAt(t, dirs[i], addrs[i])
	}
	back := time.Now()
	st := b.waitStatus(t, "ctr running on the standby again", 120*time.Second, func(st agent.Status) bool {
		w, ok := workloadIn(st, "ctr")
		return ok && w.State == "live" && w.Running
	})
	w, _ := workloadIn(st, "ctr")
	first := waitValue(t, startValue, starts, w.Epoch, "the counter's start")
	took := time.Since(back)
	t.Logf("servers back -> the counter started at epoch %d after %v, from %d (the primary's last published checkpoint: %d); restore: %s (%s)",
		w.Epoch, took.Round(time.Millisecond), first, lastValue, w.Restore, w.RestoreWhy)
	if first < lastValue {
		t.Errorf("the standby resumed from %d, below the primary's last published checkpoint %d", first, lastValue)
	}
	if bound := 33*time.Second + 10*time.Second; took > bound { // + 10 s for a loaded machine
		t.Errorf("the counter ran again %v after the servers came back, want within %v", took.Round(time.Millisecond), bound)
	}
}
