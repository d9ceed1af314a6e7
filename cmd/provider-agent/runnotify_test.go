package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"provideragent/internal/relaytest"
	"provideragent/internal/sdnotify"
)

// TestRunNotifiesSystemd runs the agent as systemd runs a Type=notify
// service: with $NOTIFY_SOCKET. It sends READY=1 once synced with its
// relays, its workloads do not inherit the variable (they cannot speak
// for the agent), and it sends STOPPING=1 when SIGTERM stops it.
func TestRunNotifiesSystemd(t *testing.T) {
	tmp := t.TempDir()
	sock := filepath.Join(tmp, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	datagrams := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(datagrams)
				return
			}
			datagrams <- string(buf[:n])
		}
	}()
	next := func(what string) string {
		t.Helper()
		for {
			select {
			case d, ok := <-datagrams:
				if !ok {
					t.Fatalf("notification socket closed before %s", what)
				}
				if strings.Contains(d, what) {
					return d
				}
				t.Logf("notification: %q", d)
			case <-time.After(60 * time.Second):
				t.Fatalf("no %s notification within 60 s", what)
			}
		}
	}

	dir := filepath.Join(tmp, "data")
	newKey(t, filepath.Join(dir, "identity.key"))
	cfg := fastConfig(t, tmp, dir, "127.0.0.1:0", []string{relaytest.Start(t).URL()}, 1)
	env := filepath.Join(sharedDir(t), "workload-env") // the workload's user writes it
	must(t, nil, "workloads", "grant", "--config", cfg, "--id", "w1",
		"--command", `printf %s "${NOTIFY_SOCKET-unset}" > `+env+`; exec sleep 1000`)
	t.Setenv(sdnotify.EnvSocket, sock)
	r := startRun(t, "--config", cfg)
	if d := next("READY=1"); !strings.Contains(d, "STATUS=synced with 1 of 1 relays") {
		t.Errorf("READY notification = %q, want the synced status with it", d)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got, err := os.ReadFile(env)
		if err == nil && len(got) > 0 {
			if string(got) != "unset" {
				t.Errorf("the workload's $NOTIFY_SOCKET = %q, want it unset", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workload did not start within 30 s")
		}
	}
	r.stop(t)
	next("STOPPING=1")
}
