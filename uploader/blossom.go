package uploader

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
)

// KindBlossomAuth is the Nostr kind of a Blossom authorisation event (BUD-01).
const KindBlossomAuth = 24242

// maxResponseBody bounds how much of a server response is read.
const maxResponseBody = 64 << 10

// ErrBadKey means the secret key is neither 64 hex characters nor an nsec of
// a valid secp256k1 scalar (see identity.ParseSecretKey). The error never
// contains the key.
var ErrBadKey = errors.New("bad blossom secret key")

// BlossomUploader is the inner Uploader: it PUTs pending tiles to Blossom
// servers (BUD-01/02) with bounded concurrency, checks each returned blob
// descriptor's sha256, and marks accepted tiles uploaded in the Store.
type BlossomUploader struct {
	store       *Store
	servers     []string
	keys        *identity.Keys
	client      *http.Client
	logger      *slog.Logger
	metrics     *Metrics
	concurrency int
	minReplicas int
	authTTL     time.Duration
	wallNow     func() time.Time // wire timestamps of authorisation events
}

var _ Uploader = (*BlossomUploader)(nil)

// NewBlossomUploader builds the Blossom uploader from cfg and deps
// (deps.Store and deps.SecretKey are required).
func NewBlossomUploader(cfg Config, deps Deps) (*BlossomUploader, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil {
		return nil, errors.New("new blossom uploader: nil store")
	}
	keys, err := identity.NewKeys(deps.SecretKey)
	if err != nil {
		// identity's key errors never echo the key.
		return nil, fmt.Errorf("new blossom uploader: %w: %w", ErrBadKey, err)
	}
	client := deps.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: cfg.RequestTimeout}
	}
	servers := make([]string, len(cfg.Servers))
	for i, s := range cfg.Servers {
		servers[i] = strings.TrimRight(s, "/")
	}
	return &BlossomUploader{
		store:       deps.Store,
		servers:     servers,
		keys:        keys,
		client:      client,
		logger:      loggerOrDiscard(deps.Logger),
		metrics:     deps.Metrics.orNop(),
		concurrency: cfg.Concurrency,
		minReplicas: cfg.MinReplicas,
		authTTL:     cfg.AuthTTL,
		wallNow:     time.Now,
	}, nil
}

// PublicKey returns the hex public key that signs the authorisations.
func (u *BlossomUploader) PublicKey() string { return u.keys.PublicKey() }

func loggerOrDiscard(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}

// EnumeratePending lists the pending tiles of workload ("" = all).
func (u *BlossomUploader) EnumeratePending(ctx context.Context, workload string) ([]Tile, error) {
	return u.store.PendingUploads(ctx, workload, 0)
}

// ConfirmState checks the store answers and that at least MinReplicas servers
// respond to HEAD /upload (any HTTP status counts as reachable).
func (u *BlossomUploader) ConfirmState(ctx context.Context) error {
	if _, err := u.store.CountPending(ctx, ""); err != nil {
		return fmt.Errorf("confirm state: %w", err)
	}
	reachable := 0
	var lastErr error
	for _, srv := range u.servers {
		if _, err := ProbeServer(ctx, u.client, srv); err != nil {
			lastErr = err
			continue
		}
		reachable++
	}
	if reachable < u.minReplicas {
		return fmt.Errorf("confirm state: %d of %d servers reachable, need %d: %w (last: %v)",
			reachable, len(u.servers), u.minReplicas, ErrServerUnreachable, lastErr)
	}
	return nil
}

// ProbeServer sends HEAD /upload (BUD-06's upload check) to the Blossom
// server srv and returns the HTTP status: any status means the server is
// reachable; an error means it is not.
func ProbeServer(ctx context.Context, client *http.Client, srv string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, srv+"/upload", nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// batch is the shared state of one UploadPending call.
type batch struct {
	down    []atomic.Bool // per server: could not be reached
	bytes   atomic.Int64
	mu      sync.Mutex
	err     error // first local (store) error
	refused []bool
}

func (b *batch) fail(err error) {
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.mu.Unlock()
}

// UploadPending uploads the pending tiles selected by req. Each tile is PUT
// to every reachable server; it is accepted when at least MinReplicas servers
// stored it and returned a descriptor with its sha256. Accepted tiles are
// marked uploaded; rejected tiles stay pending with the reason recorded. When
// fewer than MinReplicas servers can be reached it returns the report so far
// and an error wrapping ErrServerUnreachable.
func (u *BlossomUploader) UploadPending(ctx context.Context, req Request) (Report, error) {
	rep, err := u.uploadPending(ctx, req)
	outcome := string(rep.Outcome)
	if err != nil {
		outcome = "error"
	}
	u.metrics.Uploads.WithLabelValues(outcome).Inc()
	return rep, err
}

func (u *BlossomUploader) uploadPending(ctx context.Context, req Request) (Report, error) {
	tiles, err := u.store.PendingUploads(ctx, req.Workload, req.Limit)
	if err != nil {
		return Report{}, fmt.Errorf("upload pending: %w", err)
	}
	if len(tiles) == 0 {
		return Report{Outcome: OutcomeSuccess, Tiles: []TileResult{}}, nil
	}
	b := &batch{down: make([]atomic.Bool, len(u.servers)), refused: make([]bool, len(tiles))}
	results := make([]TileResult, len(tiles))
	jobs := make(chan int)
	var wg sync.WaitGroup
	workers := min(u.concurrency, len(tiles))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				results[i], b.refused[i] = u.uploadTile(ctx, tiles[i], b)
			}
		}()
	}
feed:
	for i := range tiles {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()

	rep := Report{Tiles: make([]TileResult, 0, len(tiles)), BytesUploaded: b.bytes.Load()}
	allRefused := true
	for i, r := range results {
		if r.Verdict == "" { // not attempted (context ended)
			continue
		}
		rep.Tiles = append(rep.Tiles, r)
		if r.Verdict == VerdictAccepted {
			rep.Accepted++
		} else {
			rep.Rejected++
			allRefused = allRefused && b.refused[i]
		}
	}
	switch {
	case rep.Rejected == 0:
		rep.Outcome = OutcomeSuccess
	case rep.Accepted == 0 && allRefused:
		rep.Outcome = OutcomeFailure
	default:
		rep.Outcome = OutcomePartial
	}
	u.metrics.TileRejections.Add(float64(rep.Rejected))
	u.metrics.BytesUploaded.Add(float64(rep.BytesUploaded))
	if b.err != nil {
		return rep, fmt.Errorf("upload pending: %w", b.err)
	}
	if err := ctx.Err(); err != nil {
		return rep, fmt.Errorf("upload pending: %w", err)
	}
	reachable := 0
	for i := range b.down {
		if !b.down[i].Load() {
			reachable++
		}
	}
	if reachable < u.minReplicas {
		return rep, fmt.Errorf("upload pending: %d of %d servers reachable, need %d: %w",
			reachable, len(u.servers), u.minReplicas, ErrServerUnreachable)
	}
	return rep, nil
}

// uploadTile PUTs one tile to every reachable server and records the verdict
// in the store, and each server that stored it as a placement. refused reports whether every server answered 401, 402 or
// 403 (a refusal of the uploader, not of the tile).
func (u *BlossomUploader) uploadTile(ctx context.Context, t Tile, b *batch) (TileResult, bool) {
	res := TileResult{TileID: t.ID, SHA256: t.SHA256, Size: t.Size, Verdict: VerdictRejected}
	content, err := u.store.Content(ctx, t.ID)
	if err != nil {
		b.fail(err)
		res.Reason = "local store: " + err.Error()
		return res, false
	}
	refused := true
	var acked []string // servers that stored the tile and confirmed its hash
	if sum := sha256.Sum256(content); hex.EncodeToString(sum[:]) != t.SHA256 || int64(len(content)) != t.Size {
		res.Reason = "local tile content does not match its sha256 or size"
		refused = false
	} else {
		auth, err := u.authorization(t.SHA256)
		if err != nil {
			b.fail(err)
			res.Reason = err.Error()
			return res, false
		}
		for s, srv := range u.servers {
			if b.down[s].Load() {
				continue
			}
			code, reason, err := u.put(ctx, srv, content, t.SHA256, auth)
			if err != nil {
				if ctx.Err() != nil {
					res.Reason = ctx.Err().Error()
					return TileResult{}, false
				}
				if !b.down[s].Swap(true) {
					u.logger.Warn("blossom server unreachable", "server", srv, "err", err)
				}
				res.Reason, res.Code = "server "+srv+" unreachable", 0
				refused = false
				continue
			}
			if reason == "" {
				acked = append(acked, srv)
				b.bytes.Add(t.Size)
				continue
			}
			res.Reason, res.Code = reason, code
			if code != http.StatusUnauthorized && code != http.StatusPaymentRequired && code != http.StatusForbidden {
				refused = false
			}
		}
	}
	// Every acknowledgement is a placement, whether or not the tile
	// reaches min_replicas: a checkpoint counts its own servers (Placed).
	if err := u.store.RecordPlacements(ctx, t.Workload, t.SHA256, acked); err != nil {
		b.fail(err)
	}
	acks := len(acked)
	if acks >= u.minReplicas {
		res.Verdict, res.Reason, res.Code = VerdictAccepted, "", http.StatusOK
		if err := u.store.MarkUploaded(ctx, t.ID); err != nil {
			b.fail(err)
		}
		return res, false
	}
	if res.Reason == "" {
		res.Reason = fmt.Sprintf("accepted by %d servers, need %d", acks, u.minReplicas)
	}
	if err := u.store.RecordRejection(ctx, t.ID, res.Reason); err != nil {
		b.fail(err)
	}
	return res, refused
}

// authorization returns the Authorization header value for uploading the
// blob sha: "Nostr " + base64 of a signed kind 24242 event with t=upload,
// x=<sha256> and an expiration.
func (u *BlossomUploader) authorization(sha string) (string, error) {
	return blossomAuth(u.keys, u.wallNow(), u.authTTL, nostr.Tags{{"t", "upload"}, {"x", sha}}, "Upload checkpoint tile "+sha)
}

// blossomAuth is an Authorization header value: "Nostr " + base64 of a
// kind 24242 event (BUD-11) with tags, an expiration ttl after now and
// content, signed by keys.
func blossomAuth(keys *identity.Keys, now time.Time, ttl time.Duration, tags nostr.Tags, content string) (string, error) {
	ev := nostr.Event{
		Kind:      KindBlossomAuth,
		CreatedAt: nostr.Timestamp(now.Unix()),
		Tags:      append(tags, nostr.Tag{"expiration", strconv.FormatInt(now.Add(ttl).Unix(), 10)}),
		Content:   content,
	}
	if err := keys.Sign(&ev); err != nil {
		return "", fmt.Errorf("sign blossom authorization: %w: %w", ErrBadKey, err)
	}
	j, err := json.Marshal(ev)
	if err != nil {
		return "", fmt.Errorf("encode blossom authorization: %w", err)
	}
	return "Nostr " + base64.StdEncoding.EncodeToString(j), nil
}

// put uploads one blob. It returns an error only when the server could not
// be reached (or ctx ended); otherwise reason is "" for an accepted upload
// whose descriptor confirms sha, or says why the server rejected it.
func (u *BlossomUploader) put(ctx context.Context, server string, content []byte, sha, auth string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, server+"/upload", bytes.NewReader(content))
	if err != nil {
		return 0, "", err
	}
	req.ContentLength = int64(len(content))
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-SHA-256", sha)
	resp, err := u.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	if err != nil {
		return 0, "", err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		reason := cleanReason(resp.Header.Get("X-Reason"))
		if reason == "" {
			reason = http.StatusText(resp.StatusCode)
		}
		return resp.StatusCode, fmt.Sprintf("%s: %d %s", server, resp.StatusCode, reason), nil
	}
	d, err := ParseDescriptor(body)
	if err != nil {
		return resp.StatusCode, fmt.Sprintf("%s: %v", server, err), nil
	}
	if d.SHA256 != sha {
		return resp.StatusCode, fmt.Sprintf("%s: descriptor sha256 %s, want %s", server, d.SHA256, sha), nil
	}
	if d.Size != 0 && d.Size != int64(len(content)) {
		return resp.StatusCode, fmt.Sprintf("%s: descriptor size %d, want %d", server, d.Size, len(content)), nil
	}
	return resp.StatusCode, "", nil
}

// cleanReason makes a server-supplied reason safe to log and store: printable
// characters only, at most 300 bytes.
func cleanReason(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, s)
	return truncate(strings.TrimSpace(s), 300)
}

// Descriptor is the part of a BUD-02 blob descriptor the uploader checks.
type Descriptor struct {
	URL    string `json:"url"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	Type   string `json:"type"`
}

// ErrBadDescriptor means a server's blob descriptor could not be used.
var ErrBadDescriptor = errors.New("bad blob descriptor")

// ParseDescriptor decodes a blob descriptor returned by a server (untrusted
// input): valid JSON object, sha256 of 64 lowercase hex characters, size not
// negative.
func ParseDescriptor(b []byte) (Descriptor, error) {
	var d Descriptor
	if err := json.Unmarshal(b, &d); err != nil {
		return Descriptor{}, fmt.Errorf("%w: %w", ErrBadDescriptor, err)
	}
	if !isSHA256Hex(d.SHA256) {
		return Descriptor{}, fmt.Errorf("%w: sha256 %q", ErrBadDescriptor, truncate(cleanReason(d.SHA256), 80))
	}
	if d.Size < 0 {
		return Descriptor{}, fmt.Errorf("%w: size %d", ErrBadDescriptor, d.Size)
	}
	return d, nil
}
