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
	raw, err := secretForm.decode(s)
	if err != nil {
		return "", err
	}
	var scalar btcec.ModNScalar
	if overflow := scalar.SetByteSlice(raw); overflow || scalar.IsZero() {
		return "", secretForm.errorf("out of range for secp256k1")
	}
	return hex.EncodeToString(raw), nil
}

// keyForm is one kind of key the parsers accept: 64 hex characters or its
// NIP-19 form.
type keyForm struct {
	what, prefix     string // "secret key", "nsec"
	other, otherWhat string // the other kind's prefix and name, refused by name
	// echo: a bad input may be quoted in the error (a public key; a secret
	// key never is).
	echo bool
	err  error
}

var (
	secretForm = keyForm{what: "secret key", prefix: "nsec", other: "npub", otherWhat: "public key", err: ErrBadSecretKey}
	publicForm = keyForm{what: "public key", prefix: "npub", other: "nsec", otherWhat: "secret key", echo: true, err: ErrBadPublicKey}
)

// errorf is "parse <what>: <format>" wrapping the form's error.
func (f keyForm) errorf(format string, args ...any) error {
	return fmt.Errorf("parse "+f.what+": "+format+": %w", append(args, f.err)...)
}

// decode parses s (surrounding white space ignored) into the key's 32
// bytes.
func (f keyForm) decode(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	lower := strings.ToLower(s)
	var raw []byte
	switch {
	case s == "":
		return nil, f.errorf("empty")
	case strings.HasPrefix(lower, f.prefix+"1"):
		prefix, v, err := nip19.Decode(lower)
		h, ok := v.(string)
		switch {
		case (err != nil || prefix != f.prefix) && f.echo:
			return nil, f.errorf("invalid %s %q", f.prefix, s)
		case err != nil || prefix != f.prefix:
			// err may quote the input (bech32 checksum messages do): drop it.
			return nil, f.errorf("invalid %s (bad bech32 or checksum)", f.prefix)
		case !ok && f.echo:
			return nil, f.errorf("invalid %s payload %q", f.prefix, s)
		case !ok:
			return nil, f.errorf("invalid %s payload", f.prefix)
		}
		raw, _ = hex.DecodeString(h)
	case strings.HasPrefix(lower, f.other+"1"):
		// Never echoed: it may be a secret key given by mistake.
		return nil, f.errorf("got an %s (%s) where a %s is required", f.other, f.otherWhat, f.what)
	default:
		if len(s) != 64 {
			return nil, f.errorf("want 64 hex characters or %s, got %d characters", f.prefix, len(s))
		}
		b, err := hex.DecodeString(s)
		if err != nil {
			return nil, f.errorf("not hex")
		}
		raw = b
	}
	if len(raw) != 32 {
		return nil, f.errorf("want 32 bytes, got %d", len(raw))
	}
	return raw, nil
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

// npubCache remembers recent npub -> hex decodings: heartbeats of older
// agents name their provider by npub, and bech32 decoding costs a
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
	raw, err := publicForm.decode(s)
	if err != nil {
		return "", err
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
