package localrelay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Every client connection of the relay writes through an outbound queue:
// a write copies the bytes into the connection's queue and returns at once,
// and the connection's own goroutine writes them to the socket, in writes
// of at most writeChunk bytes. A client that stops reading is dropped (its
// socket closed) when one of those writes is not taken by the kernel within
// the write timeout (gorilla/websocket's per-message write deadline, which
// khatru means to apply), or when its backlog would exceed the queue's
// bound; until then its frames wait in its queue and nobody else waits for
// it.
//
// khatru v0.19.1 has no such protection: WebSocket.WriteJSON writes under
// the connection's mutex with no deadline (Relay.WriteWait is declared but
// never applied), and an EVENT is fanned out to the subscribers inside the
// publisher's handler, before its OK (notifyListeners in listener.go, called
// from handlers.go). A subscriber that vanished without closing fills the
// kernel's buffers toward it (about 72 KB over a real network); from then on
// its write blocks the handler of every publisher whose events it matches,
// and their OKs, until the pong deadline (60 s) ends it; its keep-alive
// ping waits on the same mutex. The queue sits below the websocket library,
// on the hijacked net.Conn, so khatru and coder/websocket (the strfry front
// end) are used unchanged.

// DefaultWriteTimeout is Options.WriteTimeout's default: khatru's WriteWait,
// the write deadline khatru declares and never applies.
const DefaultWriteTimeout = 10 * time.Second

// DefaultMaxPendingOutbound is Options.MaxPendingOutbound's default,
// strfry's relay.maxPendingOutboundBytes (32 MiB): room for one filter's
// worth of the largest events, so a client's own big query never trips it.
const DefaultMaxPendingOutbound = StrfryMaxPendingOutbound

// writeChunk is the most one socket write of the queue carries, so that
// the write timeout asks a client with a backlog to read at least
// writeChunk per timeout (6.4 KB/s by default), however much is queued.
const writeChunk = 64 << 10

// closeFlushTimeout bounds how long a closing connection spends writing
// what is still queued (a close frame, a last OK) before its socket closes;
// khatru gives its close frame the same second.
const closeFlushTimeout = time.Second

// errClientDropped is what writes to a dropped connection return.
var errClientDropped = errors.New("client stopped reading: connection dropped")

// outbound owns the queued connections of one HTTP server.
type outbound struct {
	// writeTimeout drops a client that does not take a write (of at most
	// writeChunk bytes) within this long (0: never).
	writeTimeout time.Duration
	// maxPending drops a client whose backlog would exceed it (0: unbounded).
	maxPending int
	// sendBuffer, when positive, is each connection's SO_SNDBUF.
	sendBuffer int
	logger     *slog.Logger
	// onDrop is called once for each dropped connection.
	onDrop func()
	// bytesIn and bytesOut count what the connections read and wrote.
	bytesIn, bytesOut atomic.Int64

	mu     sync.Mutex
	conns  map[*queuedConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func newOutbound(writeTimeout time.Duration, maxPending, sendBuffer int, logger *slog.Logger, onDrop func()) *outbound {
	return &outbound{writeTimeout: writeTimeout, maxPending: maxPending, sendBuffer: sendBuffer, logger: logger,
		onDrop: onDrop, conns: map[*queuedConn]struct{}{}}
}

// handler serves h with every connection h hijacks (websocket upgrades)
// writing through a queue; other responses are untouched.
func (o *outbound) handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h.ServeHTTP(&queueingResponseWriter{ResponseWriter: w, o: o}, req)
	})
}

// pending is the number of bytes queued toward clients and not yet taken
// by the kernel.
func (o *outbound) pending() int {
	o.mu.Lock()
	conns := make([]*queuedConn, 0, len(o.conns))
	for q := range o.conns {
		conns = append(conns, q)
	}
	o.mu.Unlock()
	n := 0
	for _, q := range conns {
		q.mu.Lock()
		n += q.pending
		q.mu.Unlock()
	}
	return n
}

// closeAll closes every connection (each writes what it has queued, for at
// most closeFlushTimeout) and waits for their goroutines; later hijacks fail.
func (o *outbound) closeAll(ctx context.Context) error {
	o.mu.Lock()
	o.closed = true
	conns := make([]*queuedConn, 0, len(o.conns))
	for q := range o.conns {
		conns = append(conns, q)
	}
	o.mu.Unlock()
	for _, q := range conns {
		_ = q.Close()
	}
	done := make(chan struct{})
	go func() { o.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close client connections: %w", ctx.Err())
	}
}

func (o *outbound) add(raw net.Conn) (*queuedConn, error) {
	if tc, ok := raw.(*net.TCPConn); ok && o.sendBuffer > 0 {
		if err := tc.SetWriteBuffer(o.sendBuffer); err != nil {
			o.logger.Warn("set the send buffer of a client connection", "err", err)
		}
	}
	q := &queuedConn{Conn: raw, o: o}
	q.cond = sync.NewCond(&q.mu)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return nil, net.ErrClosed
	}
	o.conns[q] = struct{}{}
	o.wg.Add(1)
	go q.run()
	return q, nil
}

func (o *outbound) remove(q *queuedConn) {
	o.mu.Lock()
	delete(o.conns, q)
	o.mu.Unlock()
	o.wg.Done()
}

// queueingResponseWriter hands out queued connections when hijacked.
type queueingResponseWriter struct {
	http.ResponseWriter
	o    *outbound
	conn *queuedConn // once hijacked
}

// hijackedConn is the queued connection that w, a response writer of
// outbound.handler, was hijacked into (nil before, or for another writer).
func hijackedConn(w http.ResponseWriter) *queuedConn {
	if qw, ok := w.(*queueingResponseWriter); ok {
		return qw.conn
	}
	return nil
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *queueingResponseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack takes the connection over from the server and returns it queued.
func (w *queueingResponseWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	raw, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	q, err := w.o.add(raw)
	if err != nil {
		_ = raw.Close()
		return nil, nil, err
	}
	// net/http flushed its buffered writer before handing it over; point
	// it at the queue too (coder/websocket writes its frames through it).
	brw.Writer.Reset(q)
	w.conn = q
	return q, brw, nil
}

// queuedConn is a client connection whose writes never block: Write
// queues, run writes. Reads go straight to the socket.
type queuedConn struct {
	net.Conn
	o *outbound

	mu      sync.Mutex
	cond    *sync.Cond // signalled when there is something to write or the state changes
	queue   []byte
	spare   []byte
	pending int       // bytes accepted by Write and not yet taken by the kernel
	closing bool      // Close was called: write what is queued, then close
	closeBy time.Time // with closing: when the socket closes, written or not
	dropped bool      // the socket was closed because the client stopped reading
	err     error     // what Write returns once closing or dropped
}

// Write queues p and returns at once. A write that would take the backlog
// over the bound drops the client instead.
func (q *queuedConn) Write(p []byte) (int, error) {
	q.mu.Lock()
	if q.err != nil {
		err := q.err
		q.mu.Unlock()
		return 0, err
	}
	if max := q.o.maxPending; max > 0 && q.pending+len(p) > max {
		backlog := q.pending + len(p)
		q.mu.Unlock()
		q.drop(fmt.Sprintf("backlog of %d bytes over the bound of %d", backlog, max))
		return 0, errClientDropped
	}
	q.queue = append(q.queue, p...)
	q.pending += len(p)
	q.cond.Signal()
	q.mu.Unlock()
	return len(p), nil
}

// Read reads from the socket; once the connection is closing it fails
// with net.ErrClosed.
func (q *queuedConn) Read(p []byte) (int, error) {
	n, err := q.Conn.Read(p)
	q.o.bytesIn.Add(int64(n))
	if err != nil {
		q.mu.Lock()
		if q.closing || q.dropped {
			err = net.ErrClosed
		}
		q.mu.Unlock()
	}
	return n, err
}

// Close stops further writes, ends any read in progress, and lets the
// writer goroutine write what is queued (at most closeFlushTimeout) before
// it closes the socket. It does not wait.
func (q *queuedConn) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closing || q.dropped {
		return nil
	}
	q.closing = true
	q.closeBy = time.Now().Add(closeFlushTimeout)
	q.err = net.ErrClosed
	q.cond.Signal()
	// Under q.mu, so that no later deadline set by write or
	// SetReadDeadline undoes them.
	_ = q.Conn.SetReadDeadline(time.Unix(1, 0))
	_ = q.Conn.SetWriteDeadline(q.closeBy)
	return nil
}

// SetDeadline sets the read deadline; writes have none (they never block,
// and the queue's own rules drop a stalled client).
func (q *queuedConn) SetDeadline(t time.Time) error { return q.SetReadDeadline(t) }

// SetReadDeadline sets the socket's read deadline.
func (q *queuedConn) SetReadDeadline(t time.Time) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closing || q.dropped {
		return net.ErrClosed
	}
	return q.Conn.SetReadDeadline(t)
}

// SetWriteDeadline does nothing: writes never block.
func (q *queuedConn) SetWriteDeadline(time.Time) error { return nil }

// drop closes the socket of a client that stopped reading, at once,
// discarding what is queued (once); it is logged with reason and counted.
func (q *queuedConn) drop(reason string) {
	q.mu.Lock()
	if q.dropped {
		q.mu.Unlock()
		return
	}
	wasClosing := q.closing
	q.dropped = true
	q.err = errClientDropped
	q.queue, q.spare = nil, nil
	q.cond.Signal()
	q.mu.Unlock()
	_ = q.Conn.Close() // ends the write in progress and the client's reads
	if wasClosing {
		return // going anyway: not counted
	}
	q.o.logger.Warn("dropped a client that stopped reading", "remote", q.RemoteAddr().String(), "reason", reason)
	if q.o.onDrop != nil {
		q.o.onDrop()
	}
}

// run writes the queue to the socket until the connection closes or the
// client is dropped.
func (q *queuedConn) run() {
	defer q.o.remove(q)
	for {
		q.mu.Lock()
		for len(q.queue) == 0 && !q.closing && !q.dropped {
			q.cond.Wait()
		}
		if q.dropped {
			q.mu.Unlock()
			return
		}
		buf := q.queue
		q.queue = q.spare[:0]
		q.spare = nil
		q.mu.Unlock()

		if len(buf) == 0 { // closing, everything written
			_ = q.Conn.Close()
			return
		}
		if err := q.write(buf); err != nil {
			q.mu.Lock()
			closing := q.closing
			q.mu.Unlock()
			if closing {
				_ = q.Conn.Close()
				return
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				q.drop(fmt.Sprintf("a write not taken within %v", q.o.writeTimeout))
			} else {
				q.closeGone() // the peer closed or reset: not a stalled client
			}
			return
		}
		q.mu.Lock()
		if q.spare == nil && cap(buf) <= 1<<20 { // keep a modest buffer for reuse
			q.spare = buf[:0]
		}
		q.mu.Unlock()
	}
}

// write writes buf to the socket in writes of at most writeChunk bytes,
// each of which must be taken within the write timeout; once the
// connection is closing, everything must be written by closeBy.
func (q *queuedConn) write(buf []byte) error {
	for len(buf) > 0 {
		q.mu.Lock()
		var deadline time.Time
		switch {
		case q.closing:
			deadline = q.closeBy
		case q.o.writeTimeout > 0:
			deadline = time.Now().Add(q.o.writeTimeout)
		}
		err := q.Conn.SetWriteDeadline(deadline) // under q.mu: Close's deadline is never undone
		q.mu.Unlock()
		if err != nil {
			return err
		}
		n, err := q.Conn.Write(buf[:min(len(buf), writeChunk)])
		buf = buf[n:]
		q.o.bytesOut.Add(int64(n))
		q.mu.Lock()
		q.pending -= n
		q.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// closeGone closes the socket of a peer that went away (a write failed
// other than by the deadline), quietly.
func (q *queuedConn) closeGone() {
	q.mu.Lock()
	q.closing = true
	q.err = net.ErrClosed
	q.queue, q.spare = nil, nil
	q.mu.Unlock()
	_ = q.Conn.Close()
}
