package uploader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
)

// ErrDeleteRefused means a server answered a delete with a refusal (401,
// 402, 403: not this key's blob, or not allowed): retrying will not help.
var ErrDeleteRefused = errors.New("blossom server refused the delete")

// Deleter deletes blobs from Blossom servers (BUD-12 DELETE /<sha256>)
// with a kind 24242 authorisation signed by Keys: t=delete, x=<sha256>
// (BUD-11 requires it) and a server tag of the server's host, so that the
// token deletes that blob on that server only. A server deletes only the
// uploads of the key that asks (khatru's handlers, dev-blossom).
type Deleter struct {
	Keys *identity.Keys
	// Client is the HTTP client (nil: http.DefaultClient; ctx bounds a
	// request).
	Client *http.Client
	// AuthTTL is how long an authorisation stays valid (0: 5 min).
	AuthTTL time.Duration
	// Now is the clock of the authorisations (nil: time.Now).
	Now func() time.Time
}

// Delete asks server to delete blob sha. A 2xx answer, or 404 (it holds
// no such blob: deleted before, or never kept), is success. A refusal
// wraps ErrDeleteRefused; other answers and unreachable servers are
// errors worth retrying later.
func (d Deleter) Delete(ctx context.Context, server, sha string) error {
	if !isSHA256Hex(sha) {
		return fmt.Errorf("delete blob: sha256 %q: want 64 lowercase hex characters", truncate(sha, 80))
	}
	base := ServerKey(server)
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return fmt.Errorf("delete blob %s: server %q: want a base URL", sha, server)
	}
	now, ttl := time.Now(), d.AuthTTL
	if d.Now != nil {
		now = d.Now()
	}
	if ttl <= 0 {
		ttl = 5 * time.Minute
	}
	auth, err := blossomAuth(d.Keys, now, ttl, nostr.Tags{{"t", "delete"}, {"x", sha}, {"server", strings.ToLower(u.Hostname())}},
		"Delete superseded checkpoint blob "+sha)
	if err != nil {
		return fmt.Errorf("delete blob %s: %w", sha, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, base+"/"+sha, nil)
	if err != nil {
		return fmt.Errorf("delete blob %s: %w", sha, err)
	}
	req.Header.Set("Authorization", auth)
	client := d.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("delete blob %s from %s: %w", sha, base, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBody))
	switch code := resp.StatusCode; {
	case code >= 200 && code <= 299, code == http.StatusNotFound:
		return nil
	case code == http.StatusUnauthorized || code == http.StatusPaymentRequired || code == http.StatusForbidden:
		return fmt.Errorf("delete blob %s from %s: %d %s: %w", sha, base, code, cleanReason(resp.Header.Get("X-Reason")), ErrDeleteRefused)
	default:
		return fmt.Errorf("delete blob %s from %s: %d %s", sha, base, code, cleanReason(resp.Header.Get("X-Reason")))
	}
}
