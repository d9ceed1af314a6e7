package relay

// A relay connection: one websocket, its writes, the publishes awaiting
// an OK, the NOTICEs that may explain a refusal, and its NIP-42 state.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/nbd-wtf/go-nostr"
)

// conn is one open websocket. Writes may come from any goroutine.
type conn struct {
	ctx          context.Context // the session's; writes end with it
	ws           *websocket.Conn
	writeTimeout time.Duration
	closed       chan struct{} // closed when the session ends
	closeOnce    sync.Once

	mu         sync.Mutex
	pending    map[string][]*okWaiter
	queries    map[string]*querySink
	qslots     chan struct{} // query slots (Config.QuerySlots), made on first use
	authed     chan struct{} // closed when AUTH succeeded
	authBad    chan struct{} // closed when AUTH failed
	authFailed bool
	authWhy    string // the relay's words when AUTH failed
	seq        int
}

// okWaiter is one publish (or AUTH) waiting for the OK of an event id.
type okWaiter struct {
	ch chan nostr.OKEnvelope // buffered 1: one OK per waiter
	// notice is the first NOTICE the relay sent while this waiter waited
	// (guarded by conn.mu): the probable reason when no OK comes.
	notice string
}

func newConn(ctx context.Context, ws *websocket.Conn, writeTimeout time.Duration) *conn {
	return &conn{
		ctx:          ctx,
		ws:           ws,
		writeTimeout: writeTimeout,
		closed:       make(chan struct{}),
		pending:      make(map[string][]*okWaiter),
		queries:      make(map[string]*querySink),
		authed:       make(chan struct{}),
		authBad:      make(chan struct{}),
	}
}

func (c *conn) shutdown() {
	c.closeOnce.Do(func() {
		close(c.closed)
		_ = c.ws.CloseNow()
	})
}

func (c *conn) writeRaw(b []byte) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.writeTimeout)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}

// write sends one of go-nostr's envelopes, encoded by its own encoder
// (json.Marshal would scan and compact the result once more: the REQ
// frames of the narrowed subscription are up to max_message_length).
func (c *conn) write(v json.Marshaler) error {
	b, err := v.MarshalJSON()
	if err != nil {
		return fmt.Errorf("encode frame: %w", err)
	}
	return c.writeRaw(b)
}

func (c *conn) nextID(prefix string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return fmt.Sprintf("%s%d", prefix, c.seq)
}

func (c *conn) addPending(id string) *okWaiter {
	w := &okWaiter{ch: make(chan nostr.OKEnvelope, 1)}
	c.mu.Lock()
	c.pending[id] = append(c.pending[id], w)
	c.mu.Unlock()
	return w
}

// noticeOf returns the NOTICE attached to w, if any.
func (c *conn) noticeOf(w *okWaiter) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return w.notice
}

// attachNotice hands a NOTICE to every publish still waiting for its OK on
// this connection (a relay may answer a bad EVENT with a NOTICE and no OK,
// as @nostr-relay/core does); it reports how many got it.
func (c *conn) attachNotice(text string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, list := range c.pending {
		for _, w := range list {
			if w.notice == "" {
				w.notice = text
				n++
			}
		}
	}
	return n
}

func (c *conn) removePending(id string, w *okWaiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	list := c.pending[id]
	for i, x := range list {
		if x == w {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(c.pending, id)
	} else {
		c.pending[id] = list
	}
}

// resolve hands an OK to everyone waiting for that event id on this connection.
func (c *conn) resolve(ok nostr.OKEnvelope) bool {
	c.mu.Lock()
	list := c.pending[ok.EventID]
	delete(c.pending, ok.EventID)
	c.mu.Unlock()
	for _, w := range list {
		w.ch <- ok // buffered 1, one OK per waiter
	}
	return len(list) > 0
}

// failAuth records a failed AUTH (the relay's words) and wakes publishes
// waiting for it.
func (c *conn) failAuth(why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.authFailed {
		c.authFailed = true
		c.authWhy = why
		close(c.authBad)
	}
}

// authFailure returns the relay's words for a failed AUTH, "" if none.
func (c *conn) authFailure() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.authWhy
}

func (c *conn) isAuthed() bool {
	select {
	case <-c.authed:
		return true
	default:
		return false
	}
}
