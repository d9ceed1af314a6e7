// Package cutproxy is a TCP forwarder that a test or the demo cuts: the
// agent dials the proxy (lease.dial_addrs) instead of the relay, and Cut
// closes the listener and every connection through it, so the agent sees
// its connection drop and its reconnects refused while others still reach
// the relay directly; Restore opens the path again on the same address.
// Hold instead stalls the path without closing anything (a network that
// drops packets while TCP retransmits them): what either side sends waits,
// in order, until Release. Delay slows one direction: what the target
// sends reaches the client a fixed time later (a slow path to one
// subscriber), in order.
package cutproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Proxy forwards every connection it accepts to one target until Cut.
type Proxy struct {
	target string

	mu    sync.Mutex
	addr  string
	ln    net.Listener
	conns map[net.Conn]struct{}
	cut   bool
	wg    sync.WaitGroup
	// held is open while the path is held (Hold): forwarding waits for it
	// to close; nil when not held.
	held chan struct{}
	// delay is how long bytes from the target wait before they are
	// written to the client (Delay).
	delay time.Duration
}

// ErrClosed is returned by Restore after Close.
var ErrClosed = errors.New("proxy closed")

// New listens on 127.0.0.1 (a free port) and forwards every accepted
// connection to target (host:port).
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), ln: ln, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept(ln)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// URL is the proxy as a websocket URL (ws://host:port).
func (p *Proxy) URL() string { return "ws://" + p.addr }

// Cut closes the listener and every open connection: the path is down.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return
	}
	p.cut = true
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
}

// Restore listens again on the same address after Cut.
func (p *Proxy) Restore() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		return nil
	}
	if p.conns == nil {
		return ErrClosed
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("proxy restore %s: %w", p.addr, err)
	}
	p.cut = false
	p.ln = ln
	p.wg.Add(1)
	go p.accept(ln)
	return nil
}

// Hold stalls every connection, open or new, without closing any: bytes
// either side sends wait, in order, until Release.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
}

// Release ends Hold: what waited is forwarded, in order.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
}

// Delay makes every byte the target sends, on open connections and new
// ones, reach the client d after the proxy read it (0: at once); what the
// client sends is not delayed. Order is kept: a smaller delay set later
// does not let newer bytes overtake older ones.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = max(d, 0)
}

func (p *Proxy) currentDelay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay
}

// gate returns a channel to wait on before forwarding: closed unless held.
func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		return p.held
	}
	return closedGate
}

var closedGate = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Close cuts the path for good and waits for every forwarding goroutine.
func (p *Proxy) Close() {
	p.Cut()
	p.mu.Lock()
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut || p.conns == nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.forward(c)
	}
}

func (p *Proxy) forward(c net.Conn) {
	defer p.wg.Done()
	defer p.forget(c)
	d := net.Dialer{Timeout: 5 * time.Second}
	up, err := d.DialContext(context.Background(), "tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.cut || p.conns == nil {
		p.mu.Unlock()
		_ = up.Close()
		_ = c.Close()
		return
	}
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer p.forget(up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn, delayed bool) {
		defer func() {
			_ = dst.Close()
			_ = src.Close()
			done <- struct{}{}
		}()
		if delayed {
			p.delayedCopy(dst, src)
			return
		}
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				<-p.gate()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go pipe(up, c, false)
	go pipe(c, up, true)
	<-done
	<-done
}

// chunk is bytes read from the target and when.
type chunk struct {
	at time.Time
	b  []byte
}

// delayedCopy copies src to dst, each read written no earlier than the
// proxy's delay after it was read (Delay) and after Hold is released. While
// held it stops reading too, so that the target sees the stall as before
// (TCP's backpressure); at most 64 reads wait for their delay. It returns
// when src ends or dst fails, with src closed so that its reader stops too.
// The read buffers are reused (free): the scale benchmark's proxies carry
// megabytes a second inside the agent's process, whose garbage collector
// they would otherwise load as if the agent allocated it.
func (p *Proxy) delayedCopy(dst, src net.Conn) {
	chunks := make(chan chunk, 64)
	free := make(chan []byte, cap(chunks)+2) // queued, being written, being read
	go func() {
		defer close(chunks)
		for {
			<-p.gate()
			var buf []byte
			select {
			case buf = <-free:
			default:
				buf = make([]byte, 32<<10)
			}
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{at: time.Now(), b: buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		_ = src.Close()
		for range chunks { // let the reader end
		}
	}()
	for c := range chunks {
		if wait := time.Until(c.at.Add(p.currentDelay())); wait > 0 {
			time.Sleep(wait)
		}
		<-p.gate()
		if _, err := dst.Write(c.b); err != nil {
			return
		}
		select {
		case free <- c.b[:cap(c.b)]:
		default:
		}
	}
}

func (p *Proxy) forget(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	if p.conns != nil {
		delete(p.conns, c)
	}
	p.mu.Unlock()
}
