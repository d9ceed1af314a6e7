package courier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Headers set by HTTPForwarder on every POST.
const (
	HeaderReceipt        = "X-Courier-Receipt"
	HeaderBlake3         = "X-Courier-Blake3"
	HeaderSender         = "X-Courier-Sender"
	HeaderIdempotencyKey = "Idempotency-Key"
)

// maxRetryAfter bounds a parsed Retry-After before Config.MaxRetryAfter
// applies, so absurd values cannot overflow.
const maxRetryAfter = 365 * 24 * time.Hour

// HTTPForwarder POSTs each bundle to one URL. 2xx acknowledges; 429 is
// rate-limited (Retry-After in seconds or as an HTTP date is honoured);
// other 4xx and 3xx are client errors (only 307 and 308 are followed); 5xx
// and other statuses are server errors; a request that gets no response is
// a transport error.
type HTTPForwarder struct {
	url    string
	client *http.Client
	// Now is used to turn an HTTP-date Retry-After into a delay.
	// Default time.Now.
	Now func() time.Time
}

var _ Forwarder = (*HTTPForwarder)(nil)

// NewHTTPForwarder returns a forwarder to rawURL (http or https). A nil
// client means http.DefaultClient; set its Timeout or rely on
// Config.ForwardTimeout.
func NewHTTPForwarder(rawURL string, client *http.Client) (*HTTPForwarder, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("http forwarder: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("http forwarder: url %q: want http:// or https:// with a host", truncate(rawURL, 80))
	}
	if client == nil {
		client = http.DefaultClient
	}
	// Follow only method-preserving redirects (307, 308): the client would
	// turn a POST into a bodiless GET on 301, 302 and 303, and a 200 to
	// that GET would count as an acknowledgement it is not.
	c := *client
	inner := client.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.Response != nil && req.Response.StatusCode != http.StatusTemporaryRedirect &&
			req.Response.StatusCode != http.StatusPermanentRedirect {
			return http.ErrUseLastResponse
		}
		if inner != nil {
			return inner(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &HTTPForwarder{url: u.String(), client: &c, Now: time.Now}, nil
}

// Destination is DestinationHTTP.
func (f *HTTPForwarder) Destination() Destination { return DestinationHTTP }

// Forward POSTs d.Bundle with the receipt id, BLAKE3 hash, sender and
// idempotency key (the receipt id when the sender gave none) as headers.
func (f *HTTPForwarder) Forward(ctx context.Context, d Delivery) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, bytes.NewReader(d.Bundle))
	if err != nil {
		return ClientError(fmt.Errorf("build request: %w", err))
	}
	key := d.IdempotencyKey
	if key == "" {
		key = d.ReceiptID.String()
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set(HeaderReceipt, d.ReceiptID.String())
	req.Header.Set(HeaderBlake3, d.BundleHash)
	req.Header.Set(HeaderSender, d.Sender)
	req.Header.Set(HeaderIdempotencyKey, key)
	resp, err := f.client.Do(req)
	if err != nil {
		return TransportError(fmt.Errorf("post receipt %s: %w", d.ReceiptID, err))
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return nil
	}
	err = fmt.Errorf("post receipt %s: %s: %q", d.ReceiptID, resp.Status, strings.TrimSpace(string(snippet)))
	switch {
	case code == http.StatusTooManyRequests:
		now := time.Now
		if f.Now != nil {
			now = f.Now
		}
		return RateLimited(err, ParseRetryAfter(resp.Header.Get("Retry-After"), now()))
	case code >= 300 && code < 500:
		return ClientError(err)
	default:
		return ServerError(err)
	}
}

// ParseRetryAfter reads a Retry-After header value: delay seconds or an
// HTTP date (relative to now). It returns 0 for an empty, malformed or
// past value, and caps the result at one year.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	secs, err := strconv.ParseUint(v, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return maxRetryAfter
	}
	if err == nil {
		if secs > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		return time.Duration(secs) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	d := t.Sub(now)
	if d <= 0 {
		return 0
	}
	return min(d, maxRetryAfter)
}
