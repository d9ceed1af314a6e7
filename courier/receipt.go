package courier

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"
)

// ID is a receipt's random 64-bit identifier, written as 16 hex digits.
type ID uint64

// NewID draws a random non-zero ID from crypto/rand.
func NewID() (ID, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("new receipt id: %w", err)
		}
		if id := ID(binary.BigEndian.Uint64(b[:])); id != 0 {
			return id, nil
		}
	}
}

// String returns the id as 16 lowercase hex digits.
func (id ID) String() string { return fmt.Sprintf("%016x", uint64(id)) }

// ParseID parses 16 hex digits (either case) into a non-zero ID.
func ParseID(s string) (ID, error) {
	if len(s) != 16 {
		return 0, fmt.Errorf("parse receipt id %q: want 16 hex digits: %w", truncate(s, 40), ErrInvalidID)
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("parse receipt id %q: want 16 hex digits, not all zero: %w", s, ErrInvalidID)
	}
	return ID(v), nil
}

// MarshalText writes the hex form (used by JSON).
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText parses the hex form.
func (id *ID) UnmarshalText(b []byte) error {
	v, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// State is a receipt's persisted delivery state.
type State string

const (
	// StatePending: not yet delivered; due at NextAttemptAt.
	StatePending State = "pending"
	// StateAcknowledged: the forwarder accepted it; pruned after Retention.
	StateAcknowledged State = "acknowledged"
	// StateDead: dead-lettered (client error or MaxAttempts failures);
	// waits for an operator to resend, replay or drop it.
	StateDead State = "dead"
)

// Valid reports whether s is one of the three states.
func (s State) Valid() bool {
	return s == StatePending || s == StateAcknowledged || s == StateDead
}

// Destination is the kind of forwarder a receipt is for, persisted with
// it. Flush and Replay hand a forwarder only the receipts of its own
// destination (Forwarder.Destination), so a bundle meant for Nostr relays
// is never acknowledged by an HTTP endpoint, or the reverse.
type Destination string

const (
	// DestinationHTTP: the bundle is POSTed to an HTTP endpoint
	// (HTTPForwarder). The default of SendOptions.Destination.
	DestinationHTTP Destination = "http"
	// DestinationNostr: the bundle is one signed Nostr event, published to
	// relays (the agent's Nostr forwarder); the agent's revocations, claim
	// withdrawals and promotion announcements.
	DestinationNostr Destination = "nostr"
)

// Destinations lists every destination.
var Destinations = []Destination{DestinationHTTP, DestinationNostr}

// Valid reports whether d is one of Destinations.
func (d Destination) Valid() bool { return d == DestinationHTTP || d == DestinationNostr }

// ParseDestination parses "http" or "nostr".
func ParseDestination(s string) (Destination, error) {
	if d := Destination(s); d.Valid() {
		return d, nil
	}
	return "", fmt.Errorf("destination %q: want http or nostr: %w", truncate(s, 40), ErrInvalidSend)
}

// Receipt is the stored record of one sent bundle.
type Receipt struct {
	ID             ID     `json:"id"`
	BundleHash     string `json:"bundle_hash"` // BLAKE3-256, hex
	Sender         string `json:"sender"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Destination is the kind of forwarder that may deliver it.
	Destination    Destination `json:"destination"`
	CreatedAt      time.Time   `json:"created_at"`
	State          State       `json:"state"`
	Attempts       int         `json:"attempts"`
	NextAttemptAt  time.Time   `json:"next_attempt_at"`
	LastError      string      `json:"last_error,omitempty"`
	FailedAt       time.Time   `json:"failed_at,omitzero"`
	AcknowledgedAt time.Time   `json:"acknowledged_at,omitzero"`
	Size           int         `json:"size"`             // bundle length in bytes
	Bundle         []byte      `json:"bundle,omitempty"` // filled by Get and ExportDLQ only
}

// Delivery is what a Forwarder receives. ReceiptID, BundleHash and
// IdempotencyKey let the far side deduplicate (delivery is at least once).
type Delivery struct {
	ReceiptID      ID
	BundleHash     string
	IdempotencyKey string // empty when the sender gave none
	Sender         string
	Destination    Destination
	Bundle         []byte
	Attempt        int // 1 for the first attempt
}

// Forwarder delivers one bundle. Forward returns nil once the far side has
// accepted it, or an error classified with ClientError, RateLimited,
// ServerError or TransportError (unclassified errors count as transport
// errors). It must honour ctx and be safe for concurrent use. Destination
// says which receipts it delivers: Flush and Replay give it no other.
type Forwarder interface {
	Forward(ctx context.Context, d Delivery) error
	Destination() Destination
}

// ForwarderFunc adapts a function to a Forwarder of DestinationHTTP
// receipts (ForwarderTo picks another destination).
type ForwarderFunc func(ctx context.Context, d Delivery) error

// Forward calls f.
func (f ForwarderFunc) Forward(ctx context.Context, d Delivery) error { return f(ctx, d) }

// Destination is DestinationHTTP.
func (f ForwarderFunc) Destination() Destination { return DestinationHTTP }

// ForwarderTo adapts a function to a Forwarder of dest receipts.
func ForwarderTo(dest Destination, f func(ctx context.Context, d Delivery) error) Forwarder {
	return destForwarder{dest: dest, f: f}
}

type destForwarder struct {
	dest Destination
	f    func(ctx context.Context, d Delivery) error
}

func (f destForwarder) Forward(ctx context.Context, d Delivery) error { return f.f(ctx, d) }
func (f destForwarder) Destination() Destination                      { return f.dest }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
