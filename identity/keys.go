package identity

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/nbd-wtf/go-nostr"
	"github.com/nbd-wtf/go-nostr/nip19"
)

// Key errors. Every error returned by the key functions wraps one of these, so
// callers can classify with errors.Is; the messages name the kind of input that
// was bad and never contain a secret key.
var (
	// ErrBadSecretKey means a secret key was neither 64 hex characters nor a
	// valid NIP-19 nsec, or is not a valid secp256k1 scalar.
	ErrBadSecretKey = errors.New("bad secret key")
	// ErrBadPublicKey means a public key was neither 64 hex characters nor a
	// valid NIP-19 npub, or is not a point on secp256k1.
	ErrBadPublicKey = errors.New("bad public key")
)

// ParseSecretKey accepts a secret key as 64 hex characters (either case) or as
// a NIP-19 "nsec1..." string and returns it as 64 lowercase hex characters.
// Surrounding white space is ignored. The error never echoes the input.
func ParseSecretKey(s string) (string, error) {
	s = strings.TrimSpace(s)
	var raw []byte
	switch {
	case s == "":
		return "", fmt.Errorf("parse secret key: empty: %w", ErrBadSecretKey)
	case strings.HasPrefix(strings.ToLower(s), "nsec1"):
		prefix, v, err := nip19.Decode(strings.ToLower(s))
		if err != nil || prefix != "nsec" {
			// err may quote the input (bech32 checksum messages do): drop it.
			return "", fmt.Errorf("parse secret key: invalid nsec (bad bech32 or checksum): %w", ErrBadSecretKey)
		}
		h, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("parse secret key: invalid nsec payload: %w", ErrBadSecretKey)
		}
		raw, _ = hex.DecodeString(h)
	case strings.HasPrefix(strings.ToLower(s), "npub1"):
		return "", fmt.Errorf("parse secret key: got an npub (public key) where a secret key is required: %w", ErrBadSecretKey)
	default:
		if len(s) != 64 {
			return "", fmt.Errorf("parse secret key: want 64 hex characters or nsec, got %d characters: %w", len(s), ErrBadSecretKey)
		}
		b, err := hex.DecodeString(s)
		if err != nil {
			return "", fmt.Errorf("parse secret key: not hex: %w", ErrBadSecretKey)
		}
		raw = b
	}
	if len(raw) != 32 {
		return "", fmt.Errorf("parse secret key: want 32 bytes, got %d: %w", len(raw), ErrBadSecretKey)
	}
	var scalar btcec.ModNScalar
	if overflow := scalar.SetByteSlice(raw); overflow || scalar.IsZero() {
		return "", fmt.Errorf("parse secret key: out of range for secp256k1: %w", ErrBadSecretKey)
	}
	return hex.EncodeToString(raw), nil
}

// ParsePublicKey accepts a public key as 64 hex characters (either case) or as
// a NIP-19 "npub1..." string and returns it as 64 lowercase hex characters (the
// form used in event pubkey fields and p tags). The key must be a valid x-only
// secp256k1 point.
func ParsePublicKey(s string) (string, error) {
	h, err := PublicKeyHex(s)
	if err != nil {
		return "", err
	}
	raw, _ := hex.DecodeString(h)
	if _, err := schnorr.ParsePubKey(raw); err != nil {
		return "", fmt.Errorf("parse public key: not a secp256k1 x-only point: %w", ErrBadPublicKey)
	}
	return h, nil
}

// PublicKeyHex is ParsePublicKey without the curve check (a square root, about
// 20us): for comparing a key named in content with a signer whose key the
// signature check has already validated.
func PublicKeyHex(s string) (string, error) {
	if len(s) == 64 && IsLowerHex(s) {
		return s, nil // the form Paygress and we write
	}
	if h, ok := npubCache.get(s); ok {
		return h, nil
	}
	h, err := publicKeyHexSlow(s)
	if err == nil && strings.HasPrefix(s, "npub1") {
		npubCache.put(s, h)
	}
	return h, err
}

// npubCache remembers recent npub -> hex decodings: heartbeats of agents
// before issue 12 name their provider by npub, and bech32 decoding costs a
// few microseconds.
var npubCache = &stringCache{m: map[string]string{}, max: 4096}

// stringCache is a bounded map, emptied when full (providers are few, so it
// rarely is).
type stringCache struct {
	mu  sync.RWMutex
	m   map[string]string
	max int
}

func (c *stringCache) get(k string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *stringCache) put(k, v string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[k] = v
}

func publicKeyHexSlow(s string) (string, error) {
	s = strings.TrimSpace(s)
	var raw []byte
	switch {
	case s == "":
		return "", fmt.Errorf("parse public key: empty: %w", ErrBadPublicKey)
	case strings.HasPrefix(strings.ToLower(s), "npub1"):
		prefix, v, err := nip19.Decode(strings.ToLower(s))
		if err != nil || prefix != "npub" {
			return "", fmt.Errorf("parse public key: invalid npub %q: %w", s, ErrBadPublicKey)
		}
		h, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("parse public key: invalid npub payload %q: %w", s, ErrBadPublicKey)
		}
		raw, _ = hex.DecodeString(h)
	case strings.HasPrefix(strings.ToLower(s), "nsec1"):
		// Do not echo: this is a secret key given by mistake.
		return "", fmt.Errorf("parse public key: got an nsec (secret key) where a public key is required: %w", ErrBadPublicKey)
	default:
		if len(s) != 64 {
			return "", fmt.Errorf("parse public key: want 64 hex characters or npub, got %d characters: %w", len(s), ErrBadPublicKey)
		}
		b, err := hex.DecodeString(s)
		if err != nil {
			return "", fmt.Errorf("parse public key: not hex: %w", ErrBadPublicKey)
		}
		raw = b
	}
	if len(raw) != 32 {
		return "", fmt.Errorf("parse public key: want 32 bytes, got %d: %w", len(raw), ErrBadPublicKey)
	}
	return hex.EncodeToString(raw), nil
}

// EncodeNpub returns the NIP-19 npub form of a public key given as hex or
// npub (an npub comes back normalised to lower case).
func EncodeNpub(pub string) (string, error) {
	h, err := ParsePublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("encode npub: %w", err)
	}
	npub, err := nip19.EncodePublicKey(h)
	if err != nil {
		return "", fmt.Errorf("encode npub: %w", ErrBadPublicKey)
	}
	return npub, nil
}

// PublicKeyOf returns the hex x-only public key of a secret key given as hex
// or nsec.
func PublicKeyOf(secret string) (string, error) {
	h, err := ParseSecretKey(secret)
	if err != nil {
		return "", fmt.Errorf("public key of: %w", err)
	}
	raw, _ := hex.DecodeString(h)
	_, pk := btcec.PrivKeyFromBytes(raw)
	return hex.EncodeToString(schnorr.SerializePubKey(pk)), nil
}

// NpubOfHex is EncodeNpub for a hex key already known to be valid (a verified
// event's pubkey); it skips the curve check.
func NpubOfHex(hexKey string) (string, error) {
	npub, err := nip19.EncodePublicKey(hexKey)
	if err != nil {
		return "", fmt.Errorf("encode npub: %w", ErrBadPublicKey)
	}
	return npub, nil
}

// Keys is a provider's signing identity: a validated secret key with its hex
// public key and npub. String, GoString and LogValue print the npub only, so a
// Keys value can be logged without leaking the secret.
type Keys struct {
	secret string
	public string
	npub   string
	signer signer
}

// NewKeys parses a secret key given as hex or nsec.
func NewKeys(secret string) (*Keys, error) {
	sk, err := ParseSecretKey(secret)
	if err != nil {
		return nil, fmt.Errorf("new keys: %w", err)
	}
	pk, err := PublicKeyOf(sk)
	if err != nil {
		return nil, fmt.Errorf("new keys: %w", err)
	}
	npub, err := NpubOfHex(pk)
	if err != nil {
		return nil, fmt.Errorf("new keys: %w", err)
	}
	return &Keys{secret: sk, public: pk, npub: npub}, nil
}

// PublicKey returns the hex x-only public key.
func (k *Keys) PublicKey() string { return k.public }

// Npub returns the NIP-19 npub of the public key.
func (k *Keys) Npub() string { return k.npub }

// Sign sets ev's PubKey, ID and Sig (e.g. for a NIP-42 AUTH event).
func (k *Keys) Sign(ev *nostr.Event) error { return k.sign(ev) }

// String returns "Keys(<npub>)".
func (k *Keys) String() string { return "Keys(" + k.npub + ")" }

// GoString is String, so %#v does not print the secret.
func (k *Keys) GoString() string { return k.String() }

// LogValue logs the npub only.
func (k *Keys) LogValue() slog.Value { return slog.StringValue(k.npub) }

// IsLowerHex reports whether s has only the characters 0-9 and a-f (the
// form of event ids, pubkeys and signatures on the wire).
func IsLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
