package sdnotify_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"provideragent/internal/sdnotify"
)

// listen opens a unixgram socket as systemd's notification socket.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func read(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c := listen(t, path)
	t.Setenv(sdnotify.EnvSocket, path)
	n := sdnotify.FromEnv()
	if v, ok := os.LookupEnv(sdnotify.EnvSocket); ok {
		t.Errorf("after FromEnv, $%s = %q, want it removed (workloads must not inherit it)", sdnotify.EnvSocket, v)
	}
	if err := n.Notify("READY=1", "STATUS=synced with 3 relays"); err != nil {
		t.Fatalf("Notify() = %v", err)
	}
	if got, want := read(t, c), "READY=1\nSTATUS=synced with 3 relays"; got != want {
		t.Errorf("datagram = %q, want %q", got, want)
	}
}

func TestNotifyAbstract(t *testing.T) {
	name := "provider-agent-sdnotify-test-" + filepath.Base(t.TempDir())
	c := listen(t, "\x00"+name)
	if err := sdnotify.New("@" + name).Notify("STOPPING=1"); err != nil {
		t.Fatalf("Notify() = %v", err)
	}
	if got := read(t, c); got != "STOPPING=1" {
		t.Errorf("datagram = %q, want STOPPING=1", got)
	}
}

func TestNotifyWithoutSocket(t *testing.T) {
	t.Setenv(sdnotify.EnvSocket, "")
	if n := sdnotify.FromEnv(); n != nil {
		t.Fatalf("FromEnv() without $%s = %v, want nil", sdnotify.EnvSocket, n)
	}
	var n *sdnotify.Notifier
	if err := n.Notify("READY=1"); err != nil {
		t.Errorf("nil Notify() = %v, want nil", err)
	}
}
