package cutproxy

import (
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// echo is a TCP server that echoes every connection.
func echo(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	return roundTripOn(c)
}

// The proxy forwards; Cut drops open connections and refuses new ones;
// Restore opens the same address again; after Close, Restore fails.
func TestCutAndRestore(t *testing.T) {
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := roundTrip(p.Addr()); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	open, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	p.Cut()
	_ = open.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := open.Read(make([]byte, 1)); err == nil || errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("a connection open at the cut: read = %v, want it closed", err)
	}
	if err := roundTrip(p.Addr()); err == nil {
		t.Fatalf("after Cut: a new connection got through")
	}
	addr := p.Addr()
	if err := p.Restore(); err != nil {
		t.Fatalf("Restore = %v", err)
	}
	if p.Addr() != addr {
		t.Fatalf("Restore moved the proxy from %s to %s", addr, p.Addr())
	}
	if err := roundTrip(p.Addr()); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
	p.Close()
	if err := p.Restore(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Restore after Close = %v, want ErrClosed", err)
	}
}

// echoThrough is a proxy to an echo server and a connection through it,
// both closed when the test ends.
func echoThrough(t *testing.T) (*Proxy, net.Conn) {
	t.Helper()
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c
}

// Hold stalls the path without closing it; Release forwards what waited.
func TestHoldAndRelease(t *testing.T) {
	p, c := echoThrough(t)
	p.Hold()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	buf := make([]byte, 4)
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("read %q through a held path, want nothing", buf[:n])
	}
	p.Release()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "held" {
		t.Fatalf("after Release read %q, %v, want the held bytes", buf, err)
	}
}

// Delay holds back what the target sends, not what the client sends, and
// keeps order; 0 ends it.
func TestDelay(t *testing.T) {
	p, c := echoThrough(t)
	const d = 300 * time.Millisecond
	p.Delay(d)
	sent := time.Now()
	for _, s := range []string{"one ", "two "} {
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 8)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "one two " {
		t.Fatalf("read %q, %v through a delayed path, want %q", buf, err, "one two ")
	}
	if took := time.Since(sent); took < d {
		t.Fatalf("the echo came back after %v, want at least the delay %v", took, d)
	}
	p.Delay(0)
	sent = time.Now()
	if err := roundTripOn(c); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(sent); took >= d {
		t.Fatalf("after Delay(0) the echo took %v, want less than %v", took, d)
	}
}

func roundTripOn(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if string(b) != "ping" {
		return errors.New("echo mismatch")
	}
	return nil
}

// BenchmarkThroughProxy echoes 16 MiB through the proxy and straight to the
// echo server (the baseline, same run): MB/s each way, and the bytes the
// proxy allocates per MiB carried (its read buffers are reused: a few
// buffers per connection, not one per read).
func BenchmarkThroughProxy(b *testing.B) {
	target := echo(b)
	p, err := New(target)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	const total = 16 << 20
	carry := func(addr string) (time.Duration, uint64) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		go func() {
			chunk := make([]byte, 64<<10)
			for sent := 0; sent < total; sent += len(chunk) {
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		}()
		if _, err := io.CopyN(io.Discard, c, total); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		return took, after.TotalAlloc - before.TotalAlloc
	}
	var direct, proxied time.Duration
	var allocated uint64
	for range b.N {
		d, _ := carry(target)
		t, a := carry(p.Addr())
		direct, proxied, allocated = direct+d, proxied+t, allocated+a
	}
	mb := float64(total) / (1 << 20) * float64(b.N)
	b.ReportMetric(mb/direct.Seconds(), "direct-MiB/s")
	b.ReportMetric(mb/proxied.Seconds(), "proxied-MiB/s")
	b.ReportMetric(float64(allocated)/mb, "alloc-B/MiB")
}
