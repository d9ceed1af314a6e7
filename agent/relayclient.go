package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/nbd-wtf/go-nostr"
)

// RelayEvent is one event as one relay delivered it. Relay is the relay's
// canonical URL (the one the lease lists), whatever address was dialled.
type RelayEvent struct {
	Relay string
	Event *nostr.Event
}

// PublishResult says how each relay answered one publish. Only an OK true
// counts as accepted; a dropped connection or no answer before the deadline
// is a timeout.
type PublishResult struct {
	Accepted []string
	Rejected map[string]string // relay -> the relay's reason
	TimedOut []string
}

// RelayPool is what the agent needs of the relay layer: supervised
// connections that deliver events, publish with real OK tracking, one-shot
// queries, and per-relay state. relayClient implements it on websockets.
type RelayPool interface {
	// Run connects to every relay, keeps the subscription alive and sends
	// every received event to out until ctx ends; it returns after closing
	// every socket.
	Run(ctx context.Context, out chan<- RelayEvent) error
	// Publish sends ev to every connected relay and waits for their OKs
	// until ctx ends.
	Publish(ctx context.Context, ev *nostr.Event) PublishResult
	// Query runs a one-shot REQ on every connected relay and returns what
	// each relay served before its EOSE (or ctx's end), and how many relays
	// answered with EOSE.
	Query(ctx context.Context, f nostr.Filter) ([]RelayEvent, int)
	// Status reports each relay connection.
	Status() []RelayStatus
	// EOSECount is how many relays sent EOSE for the live subscription on
	// their current connection.
	EOSECount() int
}

// relayClientConfig configures relayClient, the built-in websocket client.
type relayClientConfig struct {
	// Relays are the canonical URLs.
	Relays []string
	// DialAddrs maps a canonical URL to the websocket URL actually dialled
	// (the demo and tests route an agent through a Proxy); absent means the
	// canonical URL itself.
	DialAddrs map[string]string
	// Filters returns the live subscription's filters; called at every
	// (re)subscribe so that `since` follows the persisted cursor.
	Filters func() nostr.Filters
	// BackoffInitial and BackoffMax bound the jittered reconnect delay.
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// Sign answers NIP-42 AUTH challenges (nil: no AUTH).
	Sign func(ev *nostr.Event) error
	// Metrics receive per-relay publish outcomes and received events (nil ok).
	OnReceived func(relay string)
	OnPublish  func(relay, outcome string)
	Logger     *slog.Logger
}

type relayClient struct {
	cfg   relayClientConfig
	conns []*relayConn
}

var _ RelayPool = (*relayClient)(nil)

func newRelayClient(cfg relayClientConfig) *relayClient {
	if cfg.BackoffInitial <= 0 {
		cfg.BackoffInitial = 250 * time.Millisecond
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &relayClient{cfg: cfg}
	for _, u := range cfg.Relays {
		dial := u
		if d, ok := cfg.DialAddrs[u]; ok && d != "" {
			dial = d
		}
		c.conns = append(c.conns, &relayConn{
			client: c, url: u, dial: dial,
			logger:  cfg.Logger.With("relay", u),
			waiters: make(map[string]chan okResult),
			queries: make(map[string]*queryState),
		})
	}
	return c
}

func (c *relayClient) Run(ctx context.Context, out chan<- RelayEvent) error {
	var wg sync.WaitGroup
	for _, rc := range c.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc.supervise(ctx, out)
		}()
	}
	wg.Wait()
	return nil
}

func (c *relayClient) Publish(ctx context.Context, ev *nostr.Event) PublishResult {
	res := PublishResult{Rejected: map[string]string{}}
	type answer struct {
		relay   string
		outcome string
		reason  string
	}
	answers := make(chan answer, len(c.conns))
	for _, rc := range c.conns {
		go func() {
			ok, reason, err := rc.publish(ctx, ev)
			switch {
			case err != nil:
				answers <- answer{rc.url, "timeout", err.Error()}
			case ok:
				answers <- answer{rc.url, "accepted", ""}
			default:
				answers <- answer{rc.url, "rejected", reason}
			}
		}()
	}
	for range c.conns {
		a := <-answers
		if c.cfg.OnPublish != nil {
			c.cfg.OnPublish(a.relay, a.outcome)
		}
		switch a.outcome {
		case "accepted":
			res.Accepted = append(res.Accepted, a.relay)
		case "rejected":
			res.Rejected[a.relay] = a.reason
		default:
			res.TimedOut = append(res.TimedOut, a.relay)
		}
	}
	return res
}

func (c *relayClient) Query(ctx context.Context, f nostr.Filter) ([]RelayEvent, int) {
	type answer struct {
		evs  []RelayEvent
		eose bool
	}
	answers := make(chan answer, len(c.conns))
	for _, rc := range c.conns {
		go func() {
			evs, eose := rc.query(ctx, f)
			answers <- answer{evs, eose}
		}()
	}
	var all []RelayEvent
	n := 0
	for range c.conns {
		a := <-answers
		all = append(all, a.evs...)
		if a.eose {
			n++
		}
	}
	return all, n
}

func (c *relayClient) Status() []RelayStatus {
	out := make([]RelayStatus, 0, len(c.conns))
	for _, rc := range c.conns {
		out = append(out, rc.status())
	}
	return out
}

func (c *relayClient) EOSECount() int {
	n := 0
	for _, rc := range c.conns {
		if rc.eose.Load() {
			n++
		}
	}
	return n
}

type okResult struct {
	ok     bool
	reason string
}

type queryState struct {
	events []RelayEvent
	done   chan struct{}
	closed bool
	eose   bool
}

// relayConn is one supervised websocket to one relay.
type relayConn struct {
	client *relayClient
	url    string // canonical
	dial   string
	logger *slog.Logger

	eose  atomic.Bool
	subN  atomic.Uint64
	mu    sync.Mutex
	conn  *websocket.Conn // nil when down
	subID string
	// connDone is closed when the current connection ends.
	connDone   chan struct{}
	waiters    map[string]chan okResult
	queries    map[string]*queryState
	reconnects int
	lastMsg    time.Time
	lastErr    string
}

func (rc *relayConn) status() RelayStatus {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return RelayStatus{
		URL: rc.url, Connected: rc.conn != nil, EOSE: rc.eose.Load(),
		Reconnects: rc.reconnects, LastMessage: rc.lastMsg, LastError: rc.lastErr,
	}
}

func (rc *relayConn) supervise(ctx context.Context, out chan<- RelayEvent) {
	cfg := rc.client.cfg
	delay := cfg.BackoffInitial
	first := true
	for ctx.Err() == nil {
		connected := rc.session(ctx, out, first)
		first = false
		if ctx.Err() != nil {
			return
		}
		if connected {
			delay = cfg.BackoffInitial
		}
		// Full jitter in [delay/2, delay].
		wait := delay/2 + time.Duration(rand.Int64N(int64(delay/2)+1))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(delay*2, cfg.BackoffMax)
	}
}

// session dials, subscribes and reads until the connection ends. It reports
// whether the dial succeeded.
func (rc *relayConn) session(ctx context.Context, out chan<- RelayEvent, first bool) bool {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	conn, _, err := websocket.Dial(dctx, rc.dial, nil)
	cancel()
	if err != nil {
		rc.mu.Lock()
		rc.lastErr = err.Error()
		rc.mu.Unlock()
		rc.logger.Debug("relay dial failed", "err", err)
		return false
	}
	conn.SetReadLimit(1 << 22)
	done := make(chan struct{})
	rc.mu.Lock()
	rc.conn = conn
	rc.connDone = done
	if !first {
		rc.reconnects++
	}
	rc.lastErr = ""
	rc.mu.Unlock()
	rc.eose.Store(false)
	rc.logger.Info("relay connected")

	// Closing the connection when ctx ends unblocks the read below.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close(websocket.StatusNormalClosure, "agent stopping") })
	defer stop()

	if err := rc.subscribe(ctx); err != nil {
		rc.logger.Debug("relay subscribe failed", "err", err)
	}
	err = rc.readLoop(ctx, conn, out)

	rc.mu.Lock()
	rc.conn = nil
	close(done)
	if err != nil && ctx.Err() == nil {
		rc.lastErr = err.Error()
	}
	for id, w := range rc.waiters {
		close(w)
		delete(rc.waiters, id)
	}
	for id, q := range rc.queries {
		if !q.closed {
			q.closed = true
			close(q.done)
		}
		delete(rc.queries, id)
	}
	rc.mu.Unlock()
	rc.eose.Store(false)
	_ = conn.CloseNow()
	if ctx.Err() == nil {
		rc.logger.Info("relay disconnected", "err", err)
	}
	return true
}

func (rc *relayConn) subscribe(ctx context.Context) error {
	var filters nostr.Filters
	if f := rc.client.cfg.Filters; f != nil {
		filters = f()
	}
	if len(filters) == 0 {
		return nil
	}
	id := "live-" + strconv.FormatUint(rc.subN.Add(1), 10)
	rc.mu.Lock()
	rc.subID = id
	rc.mu.Unlock()
	rc.eose.Store(false)
	b, err := nostr.ReqEnvelope{SubscriptionID: id, Filters: filters}.MarshalJSON()
	if err != nil {
		return fmt.Errorf("marshal req: %w", err)
	}
	return rc.write(ctx, b)
}

func (rc *relayConn) write(ctx context.Context, b []byte) error {
	rc.mu.Lock()
	conn := rc.conn
	rc.mu.Unlock()
	if conn == nil {
		return errRelayDown
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := conn.Write(wctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("write to relay: %w", err)
	}
	return nil
}

var errRelayDown = errors.New("relay not connected")

func (rc *relayConn) readLoop(ctx context.Context, conn *websocket.Conn, out chan<- RelayEvent) error {
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return err
		}
		rc.mu.Lock()
		rc.lastMsg = time.Now()
		rc.mu.Unlock()
		env := nostr.ParseMessage(string(data))
		switch e := env.(type) {
		case *nostr.EventEnvelope:
			if e.SubscriptionID == nil {
				continue
			}
			ev := e.Event
			rc.mu.Lock()
			live := *e.SubscriptionID == rc.subID
			q := rc.queries[*e.SubscriptionID]
			if q != nil && !q.closed {
				q.events = append(q.events, RelayEvent{Relay: rc.url, Event: &ev})
			}
			rc.mu.Unlock()
			if live {
				if f := rc.client.cfg.OnReceived; f != nil {
					f(rc.url)
				}
				select {
				case out <- RelayEvent{Relay: rc.url, Event: &ev}:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		case *nostr.EOSEEnvelope:
			id := string(*e)
			rc.mu.Lock()
			if id == rc.subID {
				rc.eose.Store(true)
			}
			if q := rc.queries[id]; q != nil && !q.closed {
				q.closed, q.eose = true, true
				close(q.done)
			}
			rc.mu.Unlock()
		case *nostr.OKEnvelope:
			rc.mu.Lock()
			if w, ok := rc.waiters[e.EventID]; ok {
				w <- okResult{ok: e.OK, reason: strings.Clone(e.Reason)}
				delete(rc.waiters, e.EventID)
			}
			rc.mu.Unlock()
		case *nostr.ClosedEnvelope:
			rc.mu.Lock()
			live := e.SubscriptionID == rc.subID
			if q := rc.queries[e.SubscriptionID]; q != nil && !q.closed {
				q.closed = true
				close(q.done)
			}
			rc.mu.Unlock()
			if live {
				reason := e.Reason
				rc.logger.Warn("relay closed our subscription", "reason", reason)
				if strings.HasPrefix(reason, "blocked:") || strings.HasPrefix(reason, "restricted:") {
					rc.mu.Lock()
					rc.lastErr = "subscription closed: " + reason
					rc.subID = ""
					rc.mu.Unlock()
					continue
				}
				// Transient: resubscribe (the reader must not block on it).
				go func() { _ = rc.subscribe(ctx) }()
			}
		case *nostr.AuthEnvelope:
			if e.Challenge != nil && rc.client.cfg.Sign != nil {
				challenge := *e.Challenge
				go rc.auth(ctx, challenge)
			}
		}
	}
}

func (rc *relayConn) auth(ctx context.Context, challenge string) {
	ev := nostr.Event{
		CreatedAt: nostr.Now(), Kind: nostr.KindClientAuthentication,
		Tags: nostr.Tags{{"relay", rc.url}, {"challenge", challenge}},
	}
	if err := rc.client.cfg.Sign(&ev); err != nil {
		return
	}
	b, err := nostr.AuthEnvelope{Event: ev}.MarshalJSON()
	if err != nil {
		return
	}
	_ = rc.write(ctx, b)
	// Resubscribe: the first REQ may have been refused before AUTH.
	_ = rc.subscribe(ctx)
}

// publish sends ev and waits for this relay's OK. err is non-nil when the
// relay was down, the connection dropped or ctx ended before an OK.
func (rc *relayConn) publish(ctx context.Context, ev *nostr.Event) (bool, string, error) {
	w := make(chan okResult, 1)
	rc.mu.Lock()
	if rc.conn == nil {
		rc.mu.Unlock()
		return false, "", errRelayDown
	}
	rc.waiters[ev.ID] = w
	rc.mu.Unlock()
	b, err := nostr.EventEnvelope{Event: *ev}.MarshalJSON()
	if err == nil {
		err = rc.write(ctx, b)
	}
	if err != nil {
		rc.mu.Lock()
		delete(rc.waiters, ev.ID)
		rc.mu.Unlock()
		return false, "", err
	}
	select {
	case r, ok := <-w:
		if !ok {
			return false, "", errRelayDown
		}
		return r.ok, r.reason, nil
	case <-ctx.Done():
		rc.mu.Lock()
		if rc.waiters[ev.ID] == w {
			delete(rc.waiters, ev.ID)
		}
		rc.mu.Unlock()
		return false, "", ctx.Err()
	}
}

func (rc *relayConn) query(ctx context.Context, f nostr.Filter) ([]RelayEvent, bool) {
	id := "q-" + strconv.FormatUint(rc.subN.Add(1), 10)
	q := &queryState{done: make(chan struct{})}
	rc.mu.Lock()
	if rc.conn == nil {
		rc.mu.Unlock()
		return nil, false
	}
	rc.queries[id] = q
	rc.mu.Unlock()
	defer func() {
		rc.mu.Lock()
		delete(rc.queries, id)
		if !q.closed {
			q.closed = true
			close(q.done)
		}
		rc.mu.Unlock()
		if b, err := nostr.CloseEnvelope(id).MarshalJSON(); err == nil {
			_ = rc.write(context.WithoutCancel(ctx), b)
		}
	}()
	b, err := nostr.ReqEnvelope{SubscriptionID: id, Filters: nostr.Filters{f}}.MarshalJSON()
	if err != nil || rc.write(ctx, b) != nil {
		return nil, false
	}
	select {
	case <-q.done:
	case <-ctx.Done():
		return nil, false
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	// done is also closed when the connection drops or a CLOSED arrives:
	// only an EOSE counts as an answer.
	return q.events, q.eose
}
