package uploadertest

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/fiatjaf/khatru"
	"github.com/fiatjaf/khatru/blossom"
	"github.com/nbd-wtf/go-nostr"
)

// Server is a Blossom server (khatru/blossom) on an httptest server.
type Server struct {
	// URL is the server's base URL, e.g. http://127.0.0.1:41234.
	URL string

	srv *httptest.Server
	mu  sync.Mutex
	// guarded by mu
	blobs     map[string][]byte
	rejects   map[string]*rejection
	failNext  int
	puts      map[string]int
	corrupt   map[string]bool
	uploaders map[string]int // pubkey -> accepted uploads
	down      bool
	inFlight  int           // PUT /upload requests being served now
	maxFlight int           // most PUT /upload requests served at once
	putDelay  time.Duration // added to every PUT /upload while counted in flight
	gate      chan struct{} // HoldPuts barrier; nil when none is armed
	gateN     int
	gateWait  time.Duration
}

type rejection struct {
	times  int // remaining; < 0 = forever
	code   int
	reason string
}

// NewServer starts a Blossom server and closes it when the test ends.
func NewServer(t testing.TB) *Server {
	t.Helper()
	s := &Server{
		blobs:     map[string][]byte{},
		rejects:   map[string]*rejection{},
		puts:      map[string]int{},
		corrupt:   map[string]bool{},
		uploaders: map[string]int{},
	}
	rl := khatru.NewRelay()
	rl.Log = log.New(io.Discard, "", 0)
	s.srv = httptest.NewUnstartedServer(nil)
	s.URL = "http://" + s.srv.Listener.Addr().String()
	bl := blossom.New(rl, s.URL)
	bl.Store = &memIndex{descs: map[string]blossom.BlobDescriptor{}, owner: map[string]map[string]bool{}}
	bl.RejectUpload = append(bl.RejectUpload, s.rejectUpload)
	bl.StoreBlob = append(bl.StoreBlob, s.storeBlob)
	bl.LoadBlob = append(bl.LoadBlob, s.loadBlob)
	s.srv.Config.Handler = s.countPuts(rl)
	s.srv.Start()
	t.Cleanup(s.Close)
	return s
}

// Close stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	if s.down {
		s.mu.Unlock()
		return
	}
	s.down = true
	s.mu.Unlock()
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Down takes the server down: from now on connections are refused.
func (s *Server) Down() { s.Close() }

// Reject makes the next times uploads of blob sha fail with code and reason
// (times < 0: forever).
func (s *Server) Reject(sha string, times, code int, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejects[sha] = &rejection{times: times, code: code, reason: reason}
}

// FailNext makes the next n uploads, whatever the blob, fail with 503.
func (s *Server) FailNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = n
}

// Corrupt makes downloads of blob sha return altered bytes.
func (s *Server) Corrupt(sha string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.corrupt[sha] = true
}

// Puts returns how many authorised PUT /upload requests named blob sha in
// their authorisation's x tag.
func (s *Server) Puts(sha string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts[sha]
}

// TotalPuts returns the number of authorised PUT /upload requests.
func (s *Server) TotalPuts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.puts {
		n += v
	}
	return n
}

// Has reports whether the server stores blob sha.
func (s *Server) Has(sha string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.blobs[sha]
	return ok
}

// Blobs returns how many blobs the server stores.
func (s *Server) Blobs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.blobs)
}

// Uploads returns how many blobs the given hex pubkey uploaded successfully.
func (s *Server) Uploads(pubkey string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.uploaders[pubkey]
}

// SlowPuts makes every later PUT /upload wait d before it is served (while
// counted in flight), so concurrent uploads overlap.
func (s *Server) SlowPuts(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putDelay = d
}

// HoldPuts arms a one-shot barrier: the next PUT /upload requests wait until
// n of them are in flight at once, then all go on. If n is not reached within
// wait (an uploader that sends fewer at once), the barrier opens anyway, so a
// test fails on its assertion rather than hanging.
func (s *Server) HoldPuts(n int, wait time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate, s.gateN, s.gateWait = make(chan struct{}), n, wait
}

// MaxPutsInFlight returns the most PUT /upload requests the server was
// serving at the same moment since it started (or since ResetMaxPutsInFlight).
func (s *Server) MaxPutsInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxFlight
}

// ResetMaxPutsInFlight restarts MaxPutsInFlight from the requests in flight now.
func (s *Server) ResetMaxPutsInFlight() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxFlight = s.inFlight
}

// countPuts wraps the Blossom handler: it counts PUT /upload requests in
// flight (whatever their outcome) and applies SlowPuts and HoldPuts.
func (s *Server) countPuts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || r.URL.Path != "/upload" {
			next.ServeHTTP(w, r)
			return
		}
		s.mu.Lock()
		s.inFlight++
		s.maxFlight = max(s.maxFlight, s.inFlight)
		gate, wait, delay := s.gate, s.gateWait, s.putDelay
		if gate != nil && s.inFlight >= s.gateN {
			close(gate)
			s.gate = nil
		}
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.inFlight--
			s.mu.Unlock()
		}()
		if gate != nil {
			timer := time.NewTimer(wait)
			select {
			case <-gate:
			case <-r.Context().Done():
			case <-timer.C:
				s.mu.Lock()
				if s.gate == gate {
					close(gate)
					s.gate = nil
				}
				s.mu.Unlock()
			}
			timer.Stop()
		}
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) rejectUpload(ctx context.Context, auth *nostr.Event, size int, ext string) (bool, string, int) {
	sha := ""
	if tag := auth.Tags.Find("x"); len(tag) >= 2 {
		sha = tag[1]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.puts[sha]++
	if s.failNext > 0 {
		s.failNext--
		return true, "temporarily unavailable", http.StatusServiceUnavailable
	}
	if r := s.rejects[sha]; r != nil && r.times != 0 {
		if r.times > 0 {
			r.times--
		}
		return true, r.reason, r.code
	}
	s.uploaders[auth.PubKey]++
	return false, "", 0
}

func (s *Server) storeBlob(ctx context.Context, sha, ext string, body []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blobs[sha] = bytes.Clone(body)
	return nil
}

func (s *Server) loadBlob(ctx context.Context, sha, ext string) (io.ReadSeeker, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blobs[sha]
	if !ok {
		return nil, nil
	}
	b = bytes.Clone(b)
	if s.corrupt[sha] && len(b) > 0 {
		b[0] ^= 0xff
	}
	return bytes.NewReader(b), nil
}

// memIndex is an in-memory, locked BlobIndex (slicestore neither locks nor
// drains its query goroutines).
type memIndex struct {
	mu    sync.Mutex
	descs map[string]blossom.BlobDescriptor // sha256 -> descriptor
	owner map[string]map[string]bool        // sha256 -> owners
}

func (m *memIndex) Keep(ctx context.Context, blob blossom.BlobDescriptor, pubkey string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.descs[blob.SHA256]; !ok {
		m.descs[blob.SHA256] = blob
		m.owner[blob.SHA256] = map[string]bool{}
	}
	m.owner[blob.SHA256][pubkey] = true
	return nil
}

func (m *memIndex) List(ctx context.Context, pubkey string) (chan blossom.BlobDescriptor, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(chan blossom.BlobDescriptor, len(m.descs))
	for sha, d := range m.descs {
		if m.owner[sha][pubkey] {
			d.Owner = pubkey
			out <- d
		}
	}
	close(out)
	return out, nil
}

func (m *memIndex) Get(ctx context.Context, sha256 string) (*blossom.BlobDescriptor, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.descs[sha256]
	if !ok {
		return nil, nil
	}
	return &d, nil
}

func (m *memIndex) Delete(ctx context.Context, sha256, pubkey string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.owner[sha256], pubkey)
	if len(m.owner[sha256]) == 0 {
		delete(m.descs, sha256)
		delete(m.owner, sha256)
	}
	return nil
}
