package relay_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"
	"github.com/nbd-wtf/go-nostr"

	"provideragent/relay"
)

// scripted is a hostile relay on a real httptest server: it serves a NIP-11
// document, sends junk frames, and answers REQs with EOSE, recording them.
type scripted struct {
	srv   *httptest.Server
	nip11 string
	junk  []string
	// answer, when set, answers each REQ instead of a bare EOSE (send
	// writes one frame).
	answer func(req nostr.ReqEnvelope, send func(frame string))

	mu    sync.Mutex
	reqs  []nostr.ReqEnvelope
	conns int
}

func newScripted(t *testing.T, nip11 string, junk ...string) *scripted {
	s := &scripted{nip11: nip11, junk: junk}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *scripted) url() string { return "ws" + strings.TrimPrefix(s.srv.URL, "http") }

func (s *scripted) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Accept") == "application/nostr+json" {
		w.Header().Set("Content-Type", "application/nostr+json")
		_, _ = w.Write([]byte(s.nip11))
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	s.mu.Lock()
	s.conns++
	s.mu.Unlock()
	ctx := r.Context()
	for _, j := range s.junk {
		if err := c.Write(ctx, websocket.MessageText, []byte(j)); err != nil {
			return
		}
	}
	parser := nostr.NewMessageParser()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		env, err := parser.ParseMessage(string(b))
		if err != nil {
			continue
		}
		if req, ok := env.(*nostr.ReqEnvelope); ok {
			s.mu.Lock()
			s.reqs = append(s.reqs, *req)
			s.mu.Unlock()
			if s.answer != nil {
				s.answer(*req, func(frame string) { _ = c.Write(ctx, websocket.MessageText, []byte(frame)) })
				continue
			}
			_ = c.Write(ctx, websocket.MessageText, []byte(`["EOSE","`+req.SubscriptionID+`"]`))
		}
	}
}

func (s *scripted) snapshot() ([]nostr.ReqEnvelope, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]nostr.ReqEnvelope(nil), s.reqs...), s.conns
}

// Junk frames are dropped and counted; the subscription still completes.
// max_filters splits the subscription into several REQs, max_limit clamps.
func TestPoolHostileRelayAndLimits(t *testing.T) {
	s := newScripted(t, `{"limitation":{"max_filters":1,"max_limit":5}}`,
		`not json`, `["EVENT"]`, `["EVENT",{"id":"x"}]`, `["EVENT","nosuchsub",{}]`,
		`["OK","unknown",true,""]`, `["CLOSED"]`, `["EOSE","nosuchsub"]`, `["AUTH"]`, `[]`, `{}`, `["NOTICE","hi"]`)
	h := newPool(t, fastConfig(s.url()), relay.Options{Filters: []nostr.Filter{
		{Kinds: []int{1}, Limit: 100}, {Kinds: []int{2}}, {Kinds: []int{3}},
	}})
	eventually(t, "limits fetched", func() bool { return h.status(s.url()).Limits.MaxFilters == 1 })
	h.pool.SetFilters([]nostr.Filter{{Kinds: []int{1}, Limit: 100}, {Kinds: []int{2}}, {Kinds: []int{3}}})
	eventually(t, "EOSE after limits", func() bool {
		reqs, _ := s.snapshot()
		return len(reqs) >= 3 && h.status(s.url()).EOSESeen
	})
	reqs, conns := s.snapshot()
	last := reqs[len(reqs)-3:]
	for i, r := range last {
		if len(r.Filters) != 1 {
			t.Errorf("REQ %d has %d filters, want 1 (max_filters)", i, len(r.Filters))
		}
		if r.Filters[0].Limit > 5 {
			t.Errorf("REQ %d limit = %d, want <= 5 (max_limit)", i, r.Filters[0].Limit)
		}
	}
	if conns != 1 {
		t.Errorf("connections = %d, want 1 (junk must not drop the connection)", conns)
	}
	if v := counterSum(t, h, "relay_frames_dropped_total"); v < 5 {
		t.Errorf("relay_frames_dropped_total = %v, want >= 5", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if q := h.pool.Query(ctx, nostr.Filter{Kinds: []int{1}, Limit: 50}); !q[0].Complete() {
		t.Fatalf("Query() = %+v, want EOSE", q[0])
	}
}

// A frame over MaxMessageSize drops the connection; the supervisor reconnects.
func TestPoolOversizedFrameReconnects(t *testing.T) {
	s := newScripted(t, `{}`, `["NOTICE","`+strings.Repeat("x", 4096)+`"]`)
	cfg := fastConfig(s.url())
	cfg.MaxMessageSize = 2048
	h := newPool(t, cfg, relay.Options{})
	eventually(t, "reconnected", func() bool {
		_, conns := s.snapshot()
		return conns >= 2 && h.status(s.url()).Reconnects >= 1
	})
	if st := h.status(s.url()); st.LastError == "" {
		t.Errorf("Status.LastError empty, want the read error")
	}
}

func counterSum(t *testing.T, h *harness, name string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
