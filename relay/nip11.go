package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Limits are the NIP-11 limitations the pool honours; zero means absent.
type Limits struct {
	// MaxMessageLength: events whose EVENT frame is longer are not sent (outcome failed).
	MaxMessageLength int `json:"max_message_length,omitempty"`
	// MaxSubscriptions: at most this many subscriptions at once (the
	// subscription plus queries); queries beyond it fail for that relay.
	MaxSubscriptions int `json:"max_subscriptions,omitempty"`
	// MaxFilters: a subscription's filters are split into REQs of at most this many.
	MaxFilters int `json:"max_filters,omitempty"`
	// MaxLimit: filter limits are clamped to it, and filters without a
	// limit get it (the catch-up then reads the rest page by page).
	MaxLimit int `json:"max_limit,omitempty"`
	// MaxContentLength and MaxEventTags bound the events the relay accepts
	// (the agent sizes its heartbeat shards with them).
	MaxContentLength int `json:"max_content_length,omitempty"`
	MaxEventTags     int `json:"max_event_tags,omitempty"`
	// AuthRequired is informational.
	AuthRequired bool `json:"auth_required,omitempty"`
}

type nip11Doc struct {
	Limitation *Limits `json:"limitation"`
}

// fetchLimits reads the relay's NIP-11 document. A missing or unparsable
// document is not an error for the caller: it returns zero Limits and the
// reason, for logging.
func fetchLimits(ctx context.Context, client *http.Client, wsURL, host string) (Limits, error) {
	httpURL := wsURL
	switch {
	case strings.HasPrefix(wsURL, "wss://"):
		httpURL = "https://" + strings.TrimPrefix(wsURL, "wss://")
	case strings.HasPrefix(wsURL, "ws://"):
		httpURL = "http://" + strings.TrimPrefix(wsURL, "ws://")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, httpURL, nil)
	if err != nil {
		return Limits{}, fmt.Errorf("nip11 request: %w", err)
	}
	req.Header.Set("Accept", "application/nostr+json")
	if host != "" {
		req.Host = host
	}
	resp, err := client.Do(req)
	if err != nil {
		return Limits{}, fmt.Errorf("nip11 fetch: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return Limits{}, fmt.Errorf("nip11 fetch: status %d", resp.StatusCode)
	}
	return parseLimits(io.LimitReader(resp.Body, 1<<16))
}

// parseLimits decodes a NIP-11 document, keeping only sane limits.
func parseLimits(r io.Reader) (Limits, error) {
	var doc nip11Doc
	if err := json.NewDecoder(r).Decode(&doc); err != nil {
		return Limits{}, fmt.Errorf("nip11 decode: %w", err)
	}
	if doc.Limitation == nil {
		return Limits{}, nil
	}
	l := *doc.Limitation
	// Negative or absurdly small values are ignored rather than obeyed.
	if l.MaxMessageLength < 1024 {
		l.MaxMessageLength = 0
	}
	if l.MaxSubscriptions < 1 {
		l.MaxSubscriptions = 0
	}
	if l.MaxFilters < 1 {
		l.MaxFilters = 0
	}
	if l.MaxLimit < 1 {
		l.MaxLimit = 0
	}
	if l.MaxContentLength < 256 {
		l.MaxContentLength = 0
	}
	if l.MaxEventTags < 1 {
		l.MaxEventTags = 0
	}
	return l, nil
}
