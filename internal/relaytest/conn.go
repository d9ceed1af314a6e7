package relaytest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/nbd-wtf/go-nostr"
)

// Conn is a raw Nostr websocket client for tests: it sends any JSON value
// and reads frames as go-nostr envelopes, one at a time.
type Conn struct {
	tb     testing.TB
	c      *websocket.Conn
	parser nostr.MessageParser
}

// Dial connects to url; the connection is closed when the test ends.
func Dial(tb testing.TB, url string) *Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	})
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		tb.Fatalf("dial %s: %v", url, err)
	}
	c.SetReadLimit(1 << 22)
	conn := &Conn{tb: tb, c: c, parser: nostr.NewMessageParser()}
	tb.Cleanup(conn.Close)
	return conn
}

// Send writes v (an envelope or any JSON-encodable value) as one frame.
func (c *Conn) Send(v any) {
	c.tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.tb.Fatalf("encode frame: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.c.Write(ctx, websocket.MessageText, b); err != nil {
		c.tb.Fatalf("send frame: %v", err)
	}
}

// Read returns the next frame, parsed, or an error when none arrives within
// timeout or the connection fails.
func (c *Conn) Read(timeout time.Duration) (nostr.Envelope, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, b, err := c.c.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("read frame: %w", err)
	}
	env, err := c.parser.ParseMessage(string(b))
	if err != nil {
		return nil, fmt.Errorf("parse frame %q: %w", b, err)
	}
	return env, nil
}

// Close closes the connection (idempotent).
func (c *Conn) Close() { _ = c.c.CloseNow() }
