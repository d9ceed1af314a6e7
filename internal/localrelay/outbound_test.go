package localrelay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// queuedPipe returns a queued connection over one end of a net.Pipe (which
// buffers nothing: a peer that does not read stalls every write) and the
// peer's end, with the drops counted.
func queuedPipe(t *testing.T, writeTimeout time.Duration, maxPending int) (*outbound, *queuedConn, net.Conn, *atomic.Int64) {
	t.Helper()
	drops := &atomic.Int64{}
	o := newOutbound(writeTimeout, maxPending, 0, slog.New(slog.NewTextHandler(io.Discard, nil)), func() { drops.Add(1) })
	server, peer := net.Pipe()
	q, err := o.add(server)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = peer.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := o.closeAll(ctx); err != nil {
			t.Errorf("closeAll() = %v, want nil", err)
		}
	})
	return o, q, peer, drops
}

func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestQueuedConnWritesNeverWaitForAStalledPeer(t *testing.T) {
	// A peer that reads nothing would hold a direct write on net.Pipe
	// forever: every Write returning, with all of it pending and the
	// connection not yet dropped (the write timeout is far longer than
	// queueing 1 MiB takes, even on a loaded machine), shows that they
	// were queued rather than written. No wall-clock bound on the Writes
	// themselves: one failed CI under load at 250 ms.
	o, q, _, drops := queuedPipe(t, 2*time.Second, 0)
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for range 16 { // 1 MiB to a peer that reads nothing
		if n, err := q.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("Write() = %d, %v; want %d, nil", n, err, len(chunk))
		}
	}
	if got, d := o.pending(), drops.Load(); got != 16*len(chunk) || d != 0 {
		t.Fatalf("pending() = %d, drops %d; want %d pending and no drop yet", got, d, 16*len(chunk))
	}
	// No byte taken for the write timeout: dropped, once.
	waitUntil(t, 10*time.Second, "the stalled peer dropped", func() bool { return drops.Load() == 1 })
	if _, err := q.Write(chunk); !errors.Is(err, errClientDropped) {
		t.Fatalf("Write() after the drop = %v, want errClientDropped", err)
	}
	if _, err := q.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read() after the drop = %v, want net.ErrClosed", err)
	}
	time.Sleep(50 * time.Millisecond)
	if got := drops.Load(); got != 1 {
		t.Fatalf("drops = %d, want 1", got)
	}
}

func TestQueuedConnSlowPeerIsNotDropped(t *testing.T) {
	// A peer that reads more than a write's worth (here the whole 20 KB
	// backlog, 0.4 s at 50 KB/s) per write timeout keeps its connection.
	_, q, peer, drops := queuedPipe(t, time.Second, 0)
	want := bytes.Repeat([]byte("0123456789"), 2000)
	if _, err := q.Write(want); err != nil {
		t.Fatal(err)
	}
	if got := readSlowly(peer, len(want), 1000, 20*time.Millisecond); !bytes.Equal(got, want) || drops.Load() != 0 {
		t.Fatalf("peer got %d bytes (equal %v), drops %d; want all %d bytes and no drop", len(got), bytes.Equal(got, want), drops.Load(), len(want))
	}
}

func TestQueuedConnTricklingPeerIsDropped(t *testing.T) {
	// A peer that takes a little now and then, as a vanished peer's kernel
	// may (zero-window probes), is dropped all the same: a write of 20 KB
	// is not taken within the write timeout at 2 KB/s.
	_, q, peer, drops := queuedPipe(t, 300*time.Millisecond, 0)
	if _, err := q.Write(make([]byte, 20000)); err != nil {
		t.Fatal(err)
	}
	got := readSlowly(peer, 20000, 100, 50*time.Millisecond)
	if len(got) >= 20000 || drops.Load() != 1 {
		t.Fatalf("peer got %d bytes, drops %d; want the connection dropped before the end", len(got), drops.Load())
	}
}

// readSlowly reads up to want bytes from c, at most chunk every gap, until
// an error.
func readSlowly(c net.Conn, want, chunk int, gap time.Duration) []byte {
	var got []byte
	buf := make([]byte, chunk)
	for len(got) < want {
		time.Sleep(gap)
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	return got
}

func TestQueuedConnBacklogBound(t *testing.T) {
	_, q, _, drops := queuedPipe(t, 0, 1000) // no write timeout: only the bound drops
	if _, err := q.Write(make([]byte, 600)); err != nil {
		t.Fatalf("Write(600) = %v, want nil", err)
	}
	if _, err := q.Write(make([]byte, 600)); !errors.Is(err, errClientDropped) {
		t.Fatalf("Write(600) over the bound of 1000 = %v, want errClientDropped", err)
	}
	if got := drops.Load(); got != 1 {
		t.Fatalf("drops = %d, want 1", got)
	}
}

func TestQueuedConnCloseFlushes(t *testing.T) {
	_, q, peer, drops := queuedPipe(t, time.Second, 0)
	if _, err := q.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Write([]byte("more")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write() after Close = %v, want net.ErrClosed", err)
	}
	got, err := io.ReadAll(peer)
	if string(got) != "last words" || err != nil {
		t.Fatalf("peer read %q, %v; want \"last words\" then EOF", got, err)
	}
	if drops.Load() != 0 {
		t.Fatalf("drops = %d, want 0: a close is not a drop", drops.Load())
	}
}

func TestQueuedConnCloseIsBounded(t *testing.T) {
	// No write timeout (as strfry): Close still closes a stalled peer's
	// socket after closeFlushTimeout, and unblocks a read at once.
	o, q, _, drops := queuedPipe(t, 0, 0)
	if _, err := q.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := q.Read(make([]byte, 1))
		readErr <- err
	}()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	_ = q.Close()
	select {
	case err := <-readErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read() during Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Read() still blocked 1 s after Close")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := o.closeAll(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < closeFlushTimeout/2 || took > closeFlushTimeout+time.Second {
		t.Fatalf("the stalled socket closed %v after Close, want about %v", took, closeFlushTimeout)
	}
	if drops.Load() != 0 {
		t.Fatalf("drops = %d, want 0", drops.Load())
	}
}

func TestOutboundHandlerQueuesHijackedConnections(t *testing.T) {
	drops := &atomic.Int64{}
	o := newOutbound(time.Second, 0, 0, slog.New(slog.NewTextHandler(io.Discard, nil)), func() { drops.Add(1) })
	var sawQueued atomic.Bool
	srv := httptest.NewServer(o.handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("Hijack() = %v", err)
			return
		}
		_, isQueued := conn.(*queuedConn)
		sawQueued.Store(isQueued && hijackedConn(w) == conn)
		// Both ways of writing a hijacked connection go through the queue.
		_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello")
		_ = brw.Flush()
		_, _ = conn.Write([]byte(" world"))
		_ = conn.Close()
	})))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(bufio.NewReader(resp.Body))
	_ = resp.Body.Close()
	if string(body) != "hello world" || !sawQueued.Load() {
		t.Fatalf("body %q, queued %v; want \"hello world\" through a queuedConn", body, sawQueued.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := o.closeAll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := o.add(nil); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("add() after closeAll = %v, want net.ErrClosed", err)
	}
	if drops.Load() != 0 {
		t.Fatalf("drops = %d, want 0", drops.Load())
	}
}
