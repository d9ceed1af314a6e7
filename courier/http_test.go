package courier

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

func TestHTTPForwarderStatusClasses(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name       string
		status     int
		retryAfter string
		wantClass  ErrorClass // "" = success
		wantAfter  time.Duration
	}{
		{"200", 200, "", "", 0},
		{"204", 204, "", "", 0},
		{"299", 299, "", "", 0},
		{"300", 300, "", ClassClient, 0},
		{"429 seconds", 429, "7", ClassRateLimited, 7 * time.Second},
		{"429 date", 429, now.Add(90 * time.Second).Format(http.TimeFormat), ClassRateLimited, 90 * time.Second},
		{"429 none", 429, "", ClassRateLimited, 0},
		{"429 garbage", 429, "soon", ClassRateLimited, 0},
		{"400", 400, "", ClassClient, 0},
		{"404", 404, "", ClassClient, 0},
		{"413", 413, "", ClassClient, 0},
		{"304 unfollowed", 304, "", ClassClient, 0},
		{"500", 500, "", ClassServer, 0},
		{"503", 503, "", ClassServer, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var got *http.Request
			var body []byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				got = r.Clone(context.Background())
				body, _ = io.ReadAll(r.Body)
				mu.Unlock()
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, "detail")
			}))
			defer srv.Close()
			f, err := NewHTTPForwarder(srv.URL+"/receipts", srv.Client())
			if err != nil {
				t.Fatal(err)
			}
			f.Now = func() time.Time { return now }
			d := Delivery{ReceiptID: 42, BundleHash: "abc", Sender: "alice", Bundle: []byte("payload"), Attempt: 1}
			err = f.Forward(context.Background(), d)
			if tt.wantClass == "" {
				if err != nil {
					t.Fatalf("Forward(%d) = %v, want nil", tt.status, err)
				}
			} else {
				class, after := Classify(err)
				if err == nil || class != tt.wantClass || after != tt.wantAfter {
					t.Fatalf("Forward(%d) = %v (class %s, retry after %v), want %s, %v", tt.status, err, class, after, tt.wantClass, tt.wantAfter)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			want := map[string]string{
				HeaderReceipt: "000000000000002a", HeaderBlake3: "abc", HeaderSender: "alice",
				HeaderIdempotencyKey: "000000000000002a", "Content-Type": "application/octet-stream",
			}
			for h, v := range want {
				if got.Header.Get(h) != v {
					t.Errorf("header %s = %q, want %q", h, got.Header.Get(h), v)
				}
			}
			if got.Method != http.MethodPost || got.URL.Path != "/receipts" || string(body) != "payload" {
				t.Errorf("request = %s %s %q, want POST /receipts payload", got.Method, got.URL.Path, body)
			}
		})
	}
}

func TestHTTPForwarderIdempotencyKeyAndTransport(t *testing.T) {
	keys := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys <- r.Header.Get(HeaderIdempotencyKey)
	}))
	f, err := NewHTTPForwarder(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Forward(context.Background(), Delivery{ReceiptID: 1, IdempotencyKey: "rev-7"}); err != nil {
		t.Fatalf("Forward = %v, want nil", err)
	}
	if k := <-keys; k != "rev-7" {
		t.Errorf("Idempotency-Key = %q, want rev-7", k)
	}
	srv.Close()
	err = f.Forward(context.Background(), Delivery{ReceiptID: 1})
	if class, _ := Classify(err); err == nil || class != ClassTransport {
		t.Errorf("Forward(closed server) = %v (%s), want transport error", err, class)
	}
	var de *DeliveryError
	if !errors.As(err, &de) {
		t.Errorf("Forward(closed server) = %T, want *DeliveryError", err)
	}
}

func TestNewHTTPForwarderRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "ftp://x", "http://", "://bad", "localhost:8080"} {
		if _, err := NewHTTPForwarder(u, nil); err == nil {
			t.Errorf("NewHTTPForwarder(%q) = nil error, want error", u)
		}
	}
}

// TestFlushHonoursRetryAfterOverHTTP runs the whole path: a 429 with
// Retry-After reschedules exactly that far, then a 200 acknowledges.
func TestFlushHonoursRetryAfterOverHTTP(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	e := newEnv(t, nil, Deps{})
	f, err := NewHTTPForwarder(srv.URL, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	r := e.send(t, "x")
	ctx := context.Background()
	if res, err := e.c.Flush(ctx, f); err != nil || res.Retried != 1 {
		t.Fatalf("Flush(429) = %+v, %v, want 1 retried", res, err)
	}
	if got := e.get(t, r.ID); !got.NextAttemptAt.Equal(e.clock.Now().Add(120 * time.Second)) {
		t.Errorf("NextAttemptAt = %v, want now+120s", got.NextAttemptAt)
	}
	e.clock.Advance(119 * time.Second)
	if res, _ := e.c.Flush(ctx, f); res != (FlushResult{}) {
		t.Errorf("Flush before Retry-After = %+v, want nothing", res)
	}
	e.clock.Advance(time.Second)
	if res, err := e.c.Flush(ctx, f); err != nil || res.Acknowledged != 1 {
		t.Errorf("Flush after Retry-After = %+v, %v, want 1 acknowledged", res, err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{" 5 ", 5 * time.Second},
		{"-5", 0},
		{"1.5", 0},
		{"99999999999999999999", 365 * 24 * time.Hour},
		{"18446744073709551615", 365 * 24 * time.Hour},
		{now.Add(time.Minute).Format(http.TimeFormat), time.Minute},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"Mon, 02 Jan 9999 03:04:05 GMT", 365 * 24 * time.Hour},
	}
	for _, tt := range tests {
		if got := ParseRetryAfter(tt.in, now); got != tt.want {
			t.Errorf("ParseRetryAfter(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestHTTPForwarderRedirects(t *testing.T) {
	var mu sync.Mutex
	var finalMethods []string
	var finalBodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/302":
			http.Redirect(w, r, "/final", http.StatusFound)
		case "/307":
			http.Redirect(w, r, "/final", http.StatusTemporaryRedirect)
		case "/final":
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			finalMethods = append(finalMethods, r.Method)
			finalBodies = append(finalBodies, string(b))
			mu.Unlock()
		}
	}))
	defer srv.Close()
	tests := []struct {
		path      string
		wantClass ErrorClass
	}{
		{"/302", ClassClient}, // would become a GET without the bundle
		{"/307", ""},          // method and body preserved
	}
	for _, tt := range tests {
		f, err := NewHTTPForwarder(srv.URL+tt.path, srv.Client())
		if err != nil {
			t.Fatal(err)
		}
		err = f.Forward(context.Background(), Delivery{ReceiptID: 1, Bundle: []byte("b")})
		if class, _ := Classify(err); (tt.wantClass == "") != (err == nil) || (err != nil && class != tt.wantClass) {
			t.Errorf("Forward(%s) = %v, want class %q", tt.path, err, tt.wantClass)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(finalMethods) != 1 || finalMethods[0] != http.MethodPost || finalBodies[0] != "b" {
		t.Errorf("final endpoint saw %v %v, want one POST with the bundle", finalMethods, finalBodies)
	}
}
