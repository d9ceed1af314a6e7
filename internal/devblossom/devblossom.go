// Package devblossom is a small Blossom server for trying checkpoint
// uploads without a third-party server: BUD-01/02 PUT /upload with a signed
// kind 24242 authorisation, GET and HEAD /<sha256>, GET /list/<pubkey> and
// DELETE /<sha256>, on khatru's Blossom handlers. Blobs live in memory or,
// with Options.Dir, as files named by their sha256 (kept across restarts).
// Uploads can be limited to some keys and bounded in size. It is what
// 'provider-agent dev-blossom' runs; it is not meant to face the internet.
//
//	s, _ := devblossom.New(devblossom.Options{Dir: "./blobs"})
//	_ = s.Start(ctx, "127.0.0.1:7448")
//	// point 'tiles upload --server' and 'tiles restore --server' at s.URL()
//	defer s.Shutdown(context.Background())
package devblossom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fiatjaf/khatru"
	"github.com/fiatjaf/khatru/blossom"
	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/atomicfile"
)

// Defaults of Options.
const (
	DefaultMaxBlobBytes  = 16 << 20
	DefaultMaxTotalBytes = 1 << 30
)

// Options configure a Server. The zero value keeps blobs in memory, accepts
// uploads from any key with a valid authorisation, blobs of at most 16 MiB
// and 1 GiB in all.
type Options struct {
	// Dir stores the blobs as files <Dir>/<sha256> (mode 0600), created if
	// missing; blobs found there at start are served. "" keeps them in
	// memory.
	Dir string
	// Allow lists the public keys (hex) whose uploads are accepted; empty
	// accepts any key. Downloads are open to anyone.
	Allow []string
	// MaxBlobBytes bounds one blob (413 above); MaxTotalBytes bounds all
	// blobs together (507 above). <= 0: the defaults.
	MaxBlobBytes  int64
	MaxTotalBytes int64
	// Logger receives one INFO line per stored blob and WARN lines for
	// refused uploads (nil: discard).
	Logger *slog.Logger
}

// Stats counts what the server holds.
type Stats struct {
	Blobs int   `json:"blobs"`
	Bytes int64 `json:"bytes"`
}

// Server is a running dev Blossom server.
type Server struct {
	opts  Options
	allow map[string]bool
	log   *slog.Logger

	mu    sync.Mutex
	blobs map[string]*blob // by sha256
	total int64
	// reserved counts the bytes of uploads that passed the quota check
	// and are not yet in total: the check and the reservation happen
	// under one lock, so parallel uploads cannot both pass a limit that
	// fits only one of them.
	reserved int64

	url  string
	srv  *http.Server
	done chan struct{} // closed when Serve returned
	stop func() bool   // cancels the shutdown tied to Start's ctx
}

type blob struct {
	desc   blossom.BlobDescriptor
	owners map[string]bool
	data   []byte // nil when stored in Dir
}

var shaPath = regexp.MustCompile(`^/[0-9a-f]{64}(\.[A-Za-z0-9]{1,10})?$`)

// New checks opts and loads the blobs of Options.Dir.
func New(opts Options) (*Server, error) {
	if opts.MaxBlobBytes <= 0 {
		opts.MaxBlobBytes = DefaultMaxBlobBytes
	}
	if opts.MaxTotalBytes <= 0 {
		opts.MaxTotalBytes = DefaultMaxTotalBytes
	}
	s := &Server{opts: opts, allow: map[string]bool{}, log: opts.Logger, blobs: map[string]*blob{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	for _, k := range opts.Allow {
		if len(k) != 64 || strings.Trim(strings.ToLower(k), "0123456789abcdef") != "" {
			return nil, fmt.Errorf("dev blossom: allowed key %q: want 64 hex characters", k)
		}
		s.allow[strings.ToLower(k)] = true
	}
	if opts.Dir != "" {
		if err := s.load(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// load indexes the blobs already in Dir.
func (s *Server) load() error {
	if err := os.MkdirAll(s.opts.Dir, 0o700); err != nil {
		return fmt.Errorf("dev blossom: blob dir: %w", err)
	}
	entries, err := os.ReadDir(s.opts.Dir)
	if err != nil {
		return fmt.Errorf("dev blossom: blob dir: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !shaPath.MatchString("/"+e.Name()) || strings.Contains(e.Name(), ".") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return fmt.Errorf("dev blossom: blob dir: %w", err)
		}
		s.blobs[e.Name()] = &blob{owners: map[string]bool{}, desc: blossom.BlobDescriptor{
			SHA256: e.Name(), Size: int(info.Size()), Type: "application/octet-stream",
			Uploaded: nostr.Timestamp(info.ModTime().Unix()),
		}}
		s.total += info.Size()
	}
	return nil
}

// Start listens on addr ("127.0.0.1:0" picks a port) and serves until
// Shutdown or ctx's end.
func (s *Server) Start(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("dev blossom: listen: %w", err)
	}
	s.url = "http://" + ln.Addr().String()
	rl := khatru.NewRelay()
	rl.Log = log.New(io.Discard, "", 0)
	bl := blossom.New(rl, s.url)
	bl.Store = index{s}
	bl.RejectUpload = append(bl.RejectUpload, s.rejectUpload)
	bl.StoreBlob = append(bl.StoreBlob, s.storeBlob)
	bl.LoadBlob = append(bl.LoadBlob, s.loadBlob)
	bl.DeleteBlob = append(bl.DeleteBlob, s.deleteBlob)
	bl.RejectDelete = append(bl.RejectDelete, s.rejectDelete)
	s.srv = &http.Server{Handler: s.routes(rl), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	s.done = make(chan struct{})
	go func() { defer close(s.done); _ = s.srv.Serve(ln) }()
	s.stop = context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
	})
	return nil
}

// URL is the server's base URL (after Start).
func (s *Server) URL() string { return s.url }

// Shutdown stops the server gracefully.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	s.stop()
	if err := s.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("dev blossom: shutdown: %w", err)
	}
	<-s.done // the Serve goroutine has returned
	return nil
}

// Stats counts the blobs held.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Blobs: len(s.blobs), Bytes: s.total}
}

// Has reports whether the server holds blob sha (an upload stored it and
// no delete removed it).
func (s *Server) Has(sha string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.blobs[sha] != nil
}

// routes serves the Blossom endpoints and a one-line index page, and
// nothing else (no Nostr relay, no /mirror: this server fetches nothing).
func (s *Server) routes(bl http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		switch {
		case p == "/" && r.Method == http.MethodGet && r.Header.Get("Upgrade") == "":
			st := s.Stats()
			fmt.Fprintf(w, "provider-agent dev-blossom: %d blobs, %d bytes (BUD-01/02: PUT /upload, GET /<sha256>)\n", st.Blobs, st.Bytes)
			return
		case r.Method == http.MethodDelete && !strings.HasPrefix(r.Header.Get("Authorization"), "Nostr "):
			http.Error(w, "missing \"Authorization\" header", http.StatusUnauthorized)
			return
		case p == "/upload" && (r.Method == http.MethodPut || r.Method == http.MethodHead):
			res := &reservation{}
			defer s.release(res)
			bl.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), reservationKey{}, res)))
			return
		case strings.HasPrefix(p, "/list/") && r.Method == http.MethodGet,
			shaPath.MatchString(p) && (r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodDelete):
			bl.ServeHTTP(w, r)
			return
		}
		http.Error(w, "not found", http.StatusNotFound)
	})
}

func (s *Server) rejectUpload(ctx context.Context, auth *nostr.Event, size int, _ string) (bool, string, int) {
	if len(s.allow) > 0 && !s.allow[auth.PubKey] {
		s.log.Warn("dev-blossom: upload refused: key not allowed", "pubkey", auth.PubKey)
		return true, "pubkey not allowed on this server", http.StatusForbidden
	}
	if int64(size) > s.opts.MaxBlobBytes {
		s.log.Warn("dev-blossom: upload refused: blob too large", "size", size, "max", s.opts.MaxBlobBytes)
		return true, fmt.Sprintf("blob of %d bytes is over the limit of %d", size, s.opts.MaxBlobBytes), http.StatusRequestEntityTooLarge
	}
	s.mu.Lock()
	full := s.total+s.reserved+int64(size) > s.opts.MaxTotalBytes
	if res, _ := ctx.Value(reservationKey{}).(*reservation); res != nil && !full {
		res.bytes += int64(size)
		s.reserved += int64(size)
	}
	s.mu.Unlock()
	if full {
		s.log.Warn("dev-blossom: upload refused: server full", "max_total", s.opts.MaxTotalBytes)
		return true, fmt.Sprintf("server full (limit %d bytes)", s.opts.MaxTotalBytes), http.StatusInsufficientStorage
	}
	return false, "", 0
}

// reservation is the quota one upload request holds between passing
// rejectUpload and its blob entering total (Keep) or the request ending.
type reservation struct{ bytes int64 }

type reservationKey struct{}

// release returns what res still holds (an upload that failed after the
// quota check, or a HEAD check that reserved nothing lasting).
func (s *Server) release(res *reservation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reserved -= res.bytes
	res.bytes = 0
}

// rejectDelete lets only a blob's uploaders delete it (blobs found in Dir
// at start have no known uploader and are not deleted over HTTP).
func (s *Server) rejectDelete(_ context.Context, auth *nostr.Event, sha, _ string) (bool, string, int) {
	if auth == nil {
		return true, "missing \"Authorization\" header", http.StatusUnauthorized
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.blobs[sha]; b != nil && !b.owners[auth.PubKey] {
		return true, "only an uploader of the blob may delete it", http.StatusForbidden
	}
	return false, "", 0
}

func (s *Server) storeBlob(_ context.Context, sha, _ string, body []byte) error {
	if s.opts.Dir != "" {
		if err := atomicfile.Write(filepath.Join(s.opts.Dir, sha), func(w io.Writer) error { _, err := w.Write(body); return err }); err != nil {
			s.log.Error("dev-blossom: store blob", "sha256", sha, "err", err)
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blobs[sha]
	if b == nil {
		return errors.New("blob descriptor lost") // Keep runs first
	}
	if s.opts.Dir == "" {
		b.data = bytes.Clone(body)
	}
	s.log.Info("dev-blossom: stored blob", "sha256", sha, "size", len(body))
	return nil
}

func (s *Server) loadBlob(_ context.Context, sha, _ string) (io.ReadSeeker, error) {
	s.mu.Lock()
	b := s.blobs[sha]
	var data []byte
	if b != nil {
		data = b.data
	}
	s.mu.Unlock()
	if b == nil {
		return nil, nil
	}
	if data != nil {
		return bytes.NewReader(data), nil
	}
	if s.opts.Dir == "" {
		return nil, nil // descriptor kept, body not stored yet
	}
	f, err := os.ReadFile(filepath.Join(s.opts.Dir, sha))
	if err != nil {
		return nil, nil
	}
	return bytes.NewReader(f), nil
}

func (s *Server) deleteBlob(_ context.Context, sha, _ string) error {
	if s.opts.Dir != "" {
		if err := os.Remove(filepath.Join(s.opts.Dir, sha)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// index is the BlobIndex of khatru's Blossom handlers over the Server.
type index struct{ s *Server }

func (x index) Keep(ctx context.Context, d blossom.BlobDescriptor, pubkey string) error {
	s := x.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if res, _ := ctx.Value(reservationKey{}).(*reservation); res != nil {
		s.reserved -= res.bytes // the blob's own size enters total below
		res.bytes = 0
	}
	b := s.blobs[d.SHA256]
	if b == nil {
		b = &blob{desc: d, owners: map[string]bool{}}
		s.blobs[d.SHA256] = b
		s.total += int64(d.Size)
	}
	b.owners[pubkey] = true
	return nil
}

func (x index) List(_ context.Context, pubkey string) (chan blossom.BlobDescriptor, error) {
	s := x.s
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []blossom.BlobDescriptor
	for _, b := range s.blobs {
		if b.owners[pubkey] {
			d := b.desc
			d.Owner = pubkey
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Uploaded < out[j].Uploaded })
	ch := make(chan blossom.BlobDescriptor, len(out))
	for _, d := range out {
		ch <- d
	}
	close(ch)
	return ch, nil
}

func (x index) Get(_ context.Context, sha string) (*blossom.BlobDescriptor, error) {
	s := x.s
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blobs[sha]
	if b == nil {
		return nil, nil
	}
	d := b.desc
	return &d, nil
}

func (x index) Delete(_ context.Context, sha, pubkey string) error {
	s := x.s
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.blobs[sha]
	if b == nil {
		return nil
	}
	delete(b.owners, pubkey)
	if len(b.owners) == 0 {
		delete(s.blobs, sha)
		s.total -= int64(b.desc.Size)
	}
	return nil
}
