package relaytest

import (
	"context"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Socket settings of StallProxy's connections to the relay: those of a host
// on an Ethernet path (MSS 1448, where loopback's is 65,483) with a small
// receive buffer, so that little of what the relay sends a stalled client
// waits on the proxy's side. The rest waits in the relay's kernel send
// buffer, which over loopback Linux keeps growing for a peer that stopped
// reading (its ACKs of zero-window probes keep coming), to hundreds of
// kilobytes within a minute; over a network a vanished peer sends no ACK and
// the buffer stays small (72 KB in a partition trial between
// real hosts). Fix the relay's
// buffer (KindOptions.SendBuffer) for a relay to meet the stall after as
// little traffic as in the field.
const (
	stallProxyMSS     = 1448
	stallProxyRcvBuf  = 4096
	stallProxyReadBuf = 16 << 10
)

// StallProxy is a TCP forwarder between clients and one relay that can
// stall silently: Stall stops it reading and forwarding in both directions
// without closing anything, as when a peer vanishes behind a firewall that
// drops its packets (no FIN, no RST); Resume forwards again. Connections
// accepted while stalled are held and forwarded once resumed. Clients dial
// URL instead of the relay (an agent through Config.DialAddrs). The proxy is
// closed when the test ends.
type StallProxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	stalled bool
	resumed chan struct{} // closed by Resume (and Close) to release the stalled pipes
	closed  bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

// NewStallProxy listens on a free 127.0.0.1 port and forwards every
// connection to target (host:port, e.g. Relay.Addr()).
func NewStallProxy(tb testing.TB, target string) *StallProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("stall proxy: listen: %v", err)
	}
	p := &StallProxy{target: target, ln: ln, resumed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *StallProxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy as a websocket URL (ws://host:port).
func (p *StallProxy) URL() string { return "ws://" + p.Addr() }

// Stall stops reading and forwarding on every connection, in both
// directions, without closing any: the relay's writes toward the clients
// fill the kernel's buffers and then block, and nothing the clients send
// reaches the relay. At most one read already in progress per direction
// completes; its bytes are held until Resume.
func (p *StallProxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled || p.closed {
		return
	}
	p.stalled = true
	p.resumed = make(chan struct{})
}

// Resume forwards again, starting with what was held.
func (p *StallProxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stalled {
		return
	}
	p.stalled = false
	close(p.resumed)
}

// Close closes the listener and every connection and waits for the
// forwarding goroutines (idempotent).
func (p *StallProxy) Close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		_ = p.ln.Close()
		for c := range p.conns {
			_ = c.Close()
		}
		if p.stalled {
			p.stalled = false
			close(p.resumed)
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// gate blocks while the proxy is stalled; it reports false once closed.
func (p *StallProxy) gate() bool {
	for {
		p.mu.Lock()
		stalled, resumed, closed := p.stalled, p.resumed, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		if !stalled {
			return true
		}
		<-resumed
	}
}

// track registers c; it reports false (and closes c) once the proxy is closed.
func (p *StallProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *StallProxy) forget(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *StallProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

func (p *StallProxy) forward(c net.Conn) {
	defer p.wg.Done()
	defer p.forget(c)
	if !p.gate() { // a connection accepted while stalled waits here
		return
	}
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			if serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG, stallProxyMSS); serr != nil {
				return
			}
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, stallProxyRcvBuf)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	up, err := d.DialContext(context.Background(), "tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(up) {
		return
	}
	defer p.forget(up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		defer dst.Close()
		defer src.Close()
		buf := make([]byte, stallProxyReadBuf)
		for p.gate() {
			n, err := src.Read(buf)
			if n > 0 {
				if !p.gate() {
					return
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}
