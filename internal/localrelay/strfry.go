package localrelay

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/nbd-wtf/go-nostr"
)

// strfry's defaults (strfry.conf of github.com/hoytech/strfry), enforced by
// Options.Strfry with strfry's own messages.
const (
	// StrfryMaxEventSize is events.maxEventSize: the largest event, as
	// strfry's normalised JSON, in bytes ("invalid: event too large: N").
	StrfryMaxEventSize = 65536
	// StrfryMaxFrameSize is relay.maxWebsocketPayloadSize: a larger frame
	// ends the connection. NIP-11 max_message_length.
	StrfryMaxFrameSize = 131072
	// StrfryMaxSubscriptions is relay.maxSubsPerConnection: one REQ more is
	// dropped with NOTICE "ERROR: too many concurrent REQs" (no CLOSED, no
	// EOSE). NIP-11 max_subscriptions.
	StrfryMaxSubscriptions = 200
	// StrfryMaxFilterItem is MAX_INDEXED_TAG_VAL_SIZE: a tag filter value
	// longer than this ends the REQ with CLOSED "ERROR: bad req: error
	// parsing #d: filter item too large".
	StrfryMaxFilterItem = 255
	// StrfryMaxLimit is relay.maxFilterLimit: filter limits are clamped to
	// it, and a filter without limit gets it. NIP-11 max_limit.
	StrfryMaxLimit = 500
	// StrfryMaxReqFilters is relay.maxReqFilterSize ("ERROR: bad req: arr too big").
	StrfryMaxReqFilters = 200
	// StrfryMaxTagsPerFilter is relay.maxTagsPerFilter.
	StrfryMaxTagsPerFilter = 3
	// StrfryMaxNumTags is events.maxNumTags.
	StrfryMaxNumTags = 2000
	// StrfryMaxTagValSize is events.maxTagValSize (single-letter tags).
	StrfryMaxTagValSize = 1024
	// StrfryRejectNewerThan is events.rejectEventsNewerThanSeconds.
	StrfryRejectNewerThan = 900 * time.Second
	// StrfryRejectEphemeralOlderThan is events.rejectEphemeralEventsOlderThanSeconds.
	StrfryRejectEphemeralOlderThan = 60 * time.Second
	// StrfryAutoPing is relay.autoPingSeconds: every connection is pinged
	// at this period, and one that sent nothing (no pong, no message)
	// since the previous ping is terminated (uWebSockets'
	// Group::timerCallback). Default of Options.PingInterval with Strfry.
	StrfryAutoPing = 55 * time.Second
	// StrfryMaxPendingOutbound is relay.maxPendingOutboundBytes (strfry's
	// master branch; releases up to 1.1.1 have no bound): a connection
	// whose unsent backlog exceeds it is terminated. Strfry never waits for
	// a client: uWebSockets queues what the socket does not take.
	StrfryMaxPendingOutbound = 33554432
)

// strfrySoftware is what strfry's NIP-11 document says it is.
const strfrySoftware = "git+https://github.com/hoytech/strfry.git"

// strfryFront is the strfry emulation: a websocket front end on the
// relay's public address that applies strfry's limits, message forms and
// NIP-42 handling, and forwards what strfry would accept to the khatru relay
// (the store, fault options and broadcasting) listening on an internal
// address.
type strfryFront struct {
	r          *Relay
	backendURL string
	srv        *http.Server
	ln         net.Listener
	out        *outbound // the clients' connections: queued, no write timeout

	mu     sync.Mutex
	conns  map[*strfryConn]bool
	closed bool
	wg     sync.WaitGroup
}

func (r *Relay) startStrfry(addr, backendURL string) (*strfryFront, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	f := &strfryFront{r: r, backendURL: backendURL, ln: ln, conns: map[*strfryConn]bool{},
		out: newOutbound(0, r.opts.MaxPendingOutbound, r.opts.SendBuffer, r.logger, r.noteDrop)}
	mux := http.NewServeMux()
	if r.opts.Admin {
		mux.HandleFunc("POST "+InjectPath, r.handleInject)
		mux.HandleFunc("GET "+StatsPath, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(r.Stats())
		})
	}
	mux.HandleFunc("/", f.serveRoot)
	f.srv = &http.Server{Handler: f.out.handler(mux), ReadHeaderTimeout: 10 * time.Second}
	f.wg.Add(2)
	go func() {
		defer f.wg.Done()
		_ = f.srv.Serve(ln)
	}()
	go f.autoPing(r.opts.PingInterval)
	return f, nil
}

// autoPing is strfry's keep-alive (uWebSockets' Group::timerCallback): at
// every tick, a connection that sent nothing since the previous tick is
// terminated, and every other one is pinged. It runs until the relay shuts
// down.
func (f *strfryFront) autoPing(every time.Duration) {
	defer f.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-f.r.ctx.Done():
			return
		case <-t.C:
		}
		f.mu.Lock()
		conns := make([]*strfryConn, 0, len(f.conns))
		for c := range f.conns {
			conns = append(conns, c)
		}
		f.mu.Unlock()
		for _, c := range conns {
			if c.silent.Swap(true) {
				// uWebSockets' terminate(): the socket closes at once,
				// whatever is still queued.
				if c.queued != nil {
					c.queued.drop(fmt.Sprintf("sent nothing between two keep-alive pings %v apart", every))
				}
				c.close()
				continue
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				ctx, cancel := context.WithTimeout(c.ctx, every)
				defer cancel()
				_ = c.client.Ping(ctx) // the pong clears c.silent (OnPongReceived)
			}()
		}
	}
}

func (f *strfryFront) addr() string { return f.ln.Addr().String() }

// counts are the client connections open now and their subscriptions.
func (f *strfryFront) counts() (conns, subs int) {
	f.mu.Lock()
	cs := make([]*strfryConn, 0, len(f.conns))
	for c := range f.conns {
		cs = append(cs, c)
	}
	f.mu.Unlock()
	for _, c := range cs {
		c.mu.Lock()
		subs += len(c.subs)
		c.mu.Unlock()
	}
	return len(cs), subs
}

// serviceURL is relay.auth.serviceUrl: Options.ServiceURL, else the
// front end's own ws:// URL.
func (f *strfryFront) serviceURL() string {
	if f.r.opts.ServiceURL != "" {
		return f.r.opts.ServiceURL
	}
	return "ws://" + f.addr()
}

func (f *strfryFront) shutdown(ctx context.Context) error {
	f.mu.Lock()
	f.closed = true
	conns := make([]*strfryConn, 0, len(f.conns))
	for c := range f.conns {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	err := f.srv.Shutdown(ctx)
	for _, c := range conns {
		c.close()
	}
	if cerr := f.out.closeAll(ctx); cerr != nil && err == nil {
		err = cerr
	}
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("shutdown strfry front end: %w", ctx.Err())
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutdown strfry front end: %w", err)
	}
	return nil
}

func (f *strfryFront) serveRoot(w http.ResponseWriter, req *http.Request) {
	if strings.EqualFold(req.Header.Get("Upgrade"), "websocket") {
		f.serveWebsocket(w, req)
		return
	}
	// strfry answers NIP-11 on any GET with this Accept header.
	if strings.Contains(req.Header.Get("Accept"), "application/nostr+json") {
		w.Header().Set("Content-Type", "application/nostr+json")
		w.Header().Set("Access-Control-Allow-Origin", "*")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"name":           "provider-agent local relay (strfry emulation)",
			"description":    "internal/localrelay behaving as strfry with its default configuration",
			"supported_nips": []int{1, 2, 4, 9, 11, 22, 28, 40, 70, 77},
			"software":       strfrySoftware,
			"version":        "emulated",
			"limitation": map[string]int{
				"max_message_length": StrfryMaxFrameSize,
				"max_subscriptions":  StrfryMaxSubscriptions,
				"max_limit":          StrfryMaxLimit,
			},
		})
		return
	}
	http.Error(w, "Please use a Nostr client to connect.", http.StatusOK)
}

// strfryConn is one client connection and its connection to the backend.
type strfryConn struct {
	f       *strfryFront
	client  *websocket.Conn
	backend *websocket.Conn
	ctx     context.Context
	cancel  context.CancelFunc
	remote  string
	queued  *queuedConn // the client's connection under client
	// silent is set by autoPing at each ping and cleared by anything the
	// client sends (a message or a pong).
	silent *atomic.Bool

	mu        sync.Mutex
	subs      map[string]bool
	challenge string // "" until strfry would have sent one
	authed    string // hex pubkey once AUTH succeeded
}

func (f *strfryFront) serveWebsocket(w http.ResponseWriter, req *http.Request) {
	silent := &atomic.Bool{}
	client, err := websocket.Accept(w, req, &websocket.AcceptOptions{
		InsecureSkipVerify: true,
		OnPongReceived:     func(context.Context, []byte) { silent.Store(false) },
	})
	if err != nil {
		return
	}
	client.SetReadLimit(StrfryMaxFrameSize)
	ctx, cancel := context.WithCancel(f.r.ctx)
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	backend, resp, err := websocket.Dial(dctx, f.backendURL, &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
	})
	dcancel()
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		cancel()
		_ = client.Close(websocket.StatusInternalError, "backend unavailable")
		return
	}
	backend.SetReadLimit(1 << 24)
	c := &strfryConn{f: f, client: client, backend: backend, ctx: ctx, cancel: cancel, remote: req.RemoteAddr,
		queued: hijackedConn(w), silent: silent, subs: map[string]bool{}}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		c.close()
		return
	}
	f.conns[c] = true
	f.wg.Add(1)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
		f.wg.Done()
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.pumpBackend()
	}()
	c.pumpClient()
	c.close()
	<-done
}

func (c *strfryConn) close() {
	c.cancel()
	_ = c.client.CloseNow()
	_ = c.backend.CloseNow()
}

func (c *strfryConn) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	c.write(b)
}

// write sends one frame to the client. It does not wait for the client:
// the connection is queued (outbound.go), as uWebSockets queues in strfry.
func (c *strfryConn) write(b []byte) {
	_ = c.client.Write(c.ctx, websocket.MessageText, b)
}

func (c *strfryConn) toBackend(b []byte) {
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	_ = c.backend.Write(ctx, websocket.MessageText, b)
}

func (c *strfryConn) notice(msg string) {
	c.f.r.noteRefusal("NOTICE ERROR: " + msg)
	c.send(nostr.NoticeEnvelope("ERROR: " + msg))
}

func (c *strfryConn) closedError(sub, msg string) {
	c.f.r.noteRefusal("CLOSED ERROR: " + msg)
	c.send(nostr.ClosedEnvelope{SubscriptionID: sub, Reason: "ERROR: " + msg})
}

func (c *strfryConn) ok(id string, written bool, msg string) {
	if !written {
		c.f.r.noteRefusal("OK " + msg)
	}
	c.send(nostr.OKEnvelope{EventID: id, OK: written, Reason: msg})
}

// pumpClient reads client frames, answering or forwarding each as strfry
// would, until the connection ends (a frame over StrfryMaxFrameSize ends
// it, as in strfry).
func (c *strfryConn) pumpClient() {
	parser := nostr.NewMessageParser()
	for {
		_, b, err := c.client.Read(c.ctx)
		if err != nil {
			return
		}
		c.silent.Store(false)
		msg := string(b)
		if msg == "\n" {
			continue
		}
		if !strings.HasPrefix(msg, "[") {
			c.notice("bad msg: unparseable message")
			continue
		}
		env, err := parser.ParseMessage(msg)
		if err != nil || env == nil {
			c.notice("bad msg: " + strfryParseError(err))
			continue
		}
		switch e := env.(type) {
		case *nostr.EventEnvelope:
			c.handleEvent(b, &e.Event)
		case *nostr.ReqEnvelope:
			c.handleReq(e)
		case *nostr.CloseEnvelope:
			c.mu.Lock()
			delete(c.subs, string(*e))
			c.mu.Unlock()
			c.toBackend(b)
		case *nostr.AuthEnvelope:
			c.handleAuth(&e.Event)
		default:
			c.notice("bad msg: unknown cmd")
		}
	}
}

func strfryParseError(err error) string {
	if err == nil {
		return "unparseable message"
	}
	return err.Error()
}

// handleEvent applies strfry's event checks in its order (timestamps, id,
// signature, size, AUTH for writes, duplicates) and forwards the rest.
func (c *strfryConn) handleEvent(raw []byte, ev *nostr.Event) {
	c.f.r.countEventIn(ev.Kind)
	if msg := strfryCheckEvent(ev, time.Now()); msg != "" {
		c.ok(ev.ID, false, "invalid: "+msg)
		return
	}
	if c.f.r.opts.RequireAuth {
		c.mu.Lock()
		authed, hadSession := c.authed, c.challenge != ""
		if !hadSession {
			c.challenge = newChallenge()
		}
		challenge := c.challenge
		c.mu.Unlock()
		// strfry asks for AUTH on writes only for NIP-70 protected events;
		// with RequireAuth every write needs an authenticated connection
		// (any key: events relayed for others stay possible) and is refused
		// in strfry's words for a protected event.
		if authed == "" {
			if !hadSession {
				c.send(nostr.AuthEnvelope{Challenge: &challenge})
			}
			c.ok(ev.ID, false, "auth-required: event marked as protected")
			return
		}
	}
	if st := c.f.r.store; st != nil && st.has(ev.ID) {
		c.ok(ev.ID, true, "duplicate: have this event")
		return
	}
	c.toBackend(raw)
}

// strfryCheckEvent returns strfry's words (after "invalid: ") for an event
// it refuses, or "".
func strfryCheckEvent(ev *nostr.Event, now time.Time) string {
	if len(ev.Tags) > StrfryMaxNumTags {
		return fmt.Sprintf("too many tags: %d", len(ev.Tags))
	}
	for _, t := range ev.Tags {
		if len(t) < 1 {
			return "too few fields in tag"
		}
		if len(t[0]) == 1 && len(t) >= 2 {
			if len(t[1]) > StrfryMaxTagValSize {
				return fmt.Sprintf("tag val too large: %d", len(t[1]))
			}
			if (t[0] == "e" || t[0] == "p") && len(t[1]) != 64 {
				return "unexpected size for fixed-size tag: " + t[0]
			}
		}
	}
	ts := time.Unix(int64(ev.CreatedAt), 0)
	ephemeral := nostr.IsEphemeralKind(ev.Kind)
	if ephemeral && ts.Before(now.Add(-StrfryRejectEphemeralOlderThan)) {
		return "ephemeral event expired"
	}
	if ts.After(now.Add(StrfryRejectNewerThan)) {
		return "created_at too late"
	}
	if exp := ev.Tags.GetFirst([]string{"expiration", ""}); exp != nil && len(*exp) > 1 {
		if v, err := strconv.ParseInt((*exp)[1], 10, 64); err == nil && v > 1 && v <= now.Unix() {
			return "event expired"
		}
	}
	if !ev.CheckID() {
		return "bad event id"
	}
	if ok, err := ev.CheckSignature(); err != nil || !ok {
		return "bad signature"
	}
	if n := StrfryEventSize(ev); n > StrfryMaxEventSize {
		return fmt.Sprintf("event too large: %d", n)
	}
	return ""
}

// handleReq applies strfry's REQ rules: filter parsing limits, the AUTH
// gate, the per-connection subscription cap and the filter limit clamp.
func (c *strfryConn) handleReq(e *nostr.ReqEnvelope) {
	if len(e.Filters) > StrfryMaxReqFilters {
		c.closedError(e.SubscriptionID, "bad req: arr too big")
		return
	}
	filters := make(nostr.Filters, len(e.Filters))
	for i, f := range e.Filters {
		if msg := strfryCheckFilter(f); msg != "" {
			c.closedError(e.SubscriptionID, "bad req: "+msg)
			return
		}
		f = f.Clone()
		if !f.LimitZero && (f.Limit == 0 || f.Limit > StrfryMaxLimit) {
			f.Limit = StrfryMaxLimit
		}
		filters[i] = f
	}
	if c.f.r.opts.RequireAuth {
		c.mu.Lock()
		authed, hadSession := c.authed != "", c.challenge != ""
		if !hadSession {
			c.challenge = newChallenge()
		}
		challenge := c.challenge
		c.mu.Unlock()
		if !authed {
			// As strfry with every kind in relay.auth.restrictedReadKinds:
			// the first refused REQ brings the challenge.
			if !hadSession {
				c.send(nostr.AuthEnvelope{Challenge: &challenge})
			}
			c.closedError(e.SubscriptionID, "auth-required: requested filter requires authentication")
			return
		}
	}
	c.mu.Lock()
	if !c.subs[e.SubscriptionID] && len(c.subs) >= StrfryMaxSubscriptions {
		c.mu.Unlock()
		c.notice("too many concurrent REQs")
		return
	}
	c.subs[e.SubscriptionID] = true
	c.mu.Unlock()
	b, err := json.Marshal(nostr.ReqEnvelope{SubscriptionID: e.SubscriptionID, Filters: filters})
	if err != nil {
		c.closedError(e.SubscriptionID, "bad req: "+err.Error())
		return
	}
	c.toBackend(b)
}

// strfryCheckFilter returns strfry's words for a filter it cannot parse, or "".
func strfryCheckFilter(f nostr.Filter) string {
	hex32 := func(field string, items []string) string {
		for _, it := range items {
			b, err := hex.DecodeString(it)
			switch {
			case err != nil && len(it)%2 == 1:
				return "error parsing " + field + ": filter item too small"
			case err != nil:
				return "error parsing " + field + ": invalid hex"
			case len(b) < 32:
				return "error parsing " + field + ": filter item too small"
			case len(b) > 32:
				return "error parsing " + field + ": filter item too large"
			}
		}
		return ""
	}
	if msg := hex32("ids", f.IDs); msg != "" {
		return msg
	}
	if msg := hex32("authors", f.Authors); msg != "" {
		return msg
	}
	if len(f.Tags) > StrfryMaxTagsPerFilter {
		return "too many tags in filter"
	}
	for name, items := range f.Tags {
		field := "#" + name
		if len(name) != 1 {
			return "error parsing " + field + ": unindexed tag filter"
		}
		if name == "p" || name == "e" {
			if msg := hex32(field, items); msg != "" {
				return msg
			}
			continue
		}
		total := 0
		for _, it := range items {
			if len(it) > StrfryMaxFilterItem {
				return "error parsing " + field + ": filter item too large"
			}
			total += len(it)
		}
		if total > 65535 {
			return "error parsing " + field + ": total filter items too large"
		}
	}
	return ""
}

// handleAuth is strfry's NIP-42 check: the event is verified, then the
// challenge and the relay tag (against the service URL, compared as
// strfry's normalizeRelayUrl does: host[:port] lower-cased, scheme and
// path ignored).
func (c *strfryConn) handleAuth(ev *nostr.Event) {
	fail := func(msg string) { c.ok(ev.ID, false, "error: "+msg) }
	if msg := strfryCheckEvent(ev, time.Now()); msg != "" {
		fail(msg)
		return
	}
	if ev.Kind != nostr.KindClientAuthentication {
		fail("wrong event kind, expected 22242")
		return
	}
	c.mu.Lock()
	challenge, authed := c.challenge, c.authed
	c.mu.Unlock()
	switch {
	case challenge == "":
		fail("no auth status available for connection")
		return
	case authed != "":
		fail("already authenticated")
		return
	}
	foundChallenge, foundRelay := false, false
	want := strfryNormalizeRelayURL(c.f.serviceURL())
	for _, t := range ev.Tags {
		if len(t) < 2 {
			continue
		}
		switch {
		case t[0] == "relay" && strfryNormalizeRelayURL(t[1]) == want:
			foundRelay = true
		case t[0] == "challenge" && t[1] == challenge:
			foundChallenge = true
		}
	}
	if !foundChallenge {
		fail("challenge string mismatch")
		return
	}
	if !foundRelay {
		fail("incorrect or missing relay tag, expected: " + c.f.serviceURL())
		return
	}
	if allow := c.f.r.opts.AuthAllow; len(allow) > 0 && !contains(allow, ev.PubKey) {
		// strfry has no per-key allow list (a write policy plugin would
		// refuse each write); here the AUTH itself is refused.
		fail("pubkey not allowed")
		return
	}
	c.mu.Lock()
	c.authed = ev.PubKey
	c.mu.Unlock()
	c.ok(ev.ID, true, "successfully authenticated")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// strfryNormalizeRelayURL is strfry's normalizeRelayUrl: drop the scheme,
// keep up to the first '/', '?' or '#', lower-case.
func strfryNormalizeRelayURL(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		u = u[i+3:]
	}
	if i := strings.IndexAny(u, "/?#"); i >= 0 {
		u = u[:i]
	}
	return strings.ToLower(u)
}

// pumpBackend relays the backend's frames in strfry's forms: CLOSED and
// NOTICE wrapped in "ERROR: ", OK messages as strfry words them (an
// ephemeral event is accepted, with no "mute:"; no "broadcasted to N").
func (c *strfryConn) pumpBackend() {
	defer c.cancel()
	parser := nostr.NewMessageParser()
	for {
		_, b, err := c.backend.Read(c.ctx)
		if err != nil {
			return
		}
		env, err := parser.ParseMessage(string(b))
		if err != nil || env == nil {
			continue
		}
		switch e := env.(type) {
		case *nostr.ClosedEnvelope:
			c.mu.Lock()
			delete(c.subs, e.SubscriptionID)
			c.mu.Unlock()
			c.closedError(e.SubscriptionID, e.Reason)
		case *nostr.NoticeEnvelope:
			c.notice(string(*e))
		case *nostr.OKEnvelope:
			ok, reason := e.OK, e.Reason
			switch {
			case strings.HasPrefix(reason, "mute:"):
				ok, reason = true, ""
			case ok && strings.HasPrefix(reason, "broadcasted to "):
				reason = ""
			case strings.HasPrefix(reason, "duplicate:"):
				ok, reason = true, "duplicate: have this event"
			}
			c.ok(e.EventID, ok, reason)
		default:
			c.write(b)
		}
	}
}

// StrfryEventSize is the size strfry checks against events.maxEventSize:
// the event re-encoded by tao::json with its fields in key order (content,
// created_at, id, kind, pubkey, sig, tags), strings escaped only where
// JSON requires it (UTF-8 kept as is).
func StrfryEventSize(ev *nostr.Event) int {
	n := len(`{"content":,"created_at":,"id":,"kind":,"pubkey":,"sig":,"tags":}`)
	n += taoStringLen(ev.Content) + len(strconv.FormatInt(int64(ev.CreatedAt), 10)) + taoStringLen(ev.ID) +
		len(strconv.Itoa(ev.Kind)) + taoStringLen(ev.PubKey) + taoStringLen(ev.Sig)
	n += 2 // [ ]
	for i, t := range ev.Tags {
		if i > 0 {
			n++
		}
		n += 2
		for j, v := range t {
			if j > 0 {
				n++
			}
			n += taoStringLen(v)
		}
	}
	return n
}

// taoStringLen is the length of s as a JSON string written by tao::json.
func taoStringLen(s string) int {
	n := 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
			n += 2
		case c < 0x20:
			n += 6
		default:
			n++
		}
	}
	return n
}

func newChallenge() string {
	return nostr.GeneratePrivateKey()[:32]
}

// maxRefusalKinds bounds Stats.Refusals.
const maxRefusalKinds = 64

// noteRefusal counts one refusal in Stats.Refusals, its numbers replaced
// by N so that sizes and counts do not make new kinds.
func (r *Relay) noteRefusal(msg string) {
	var b strings.Builder
	digits := false
	for _, c := range msg {
		if c >= '0' && c <= '9' {
			if !digits {
				b.WriteByte('N')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(c)
	}
	key := b.String()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refusals == nil {
		r.refusals = map[string]int{}
	}
	if _, ok := r.refusals[key]; !ok && len(r.refusals) >= maxRefusalKinds {
		key = "other"
	}
	r.refusals[key]++
}
