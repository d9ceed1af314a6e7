package identity

import (
	"errors"
	"strings"
	"testing"

	"github.com/nbd-wtf/go-nostr"
)

// NIP-19 test vectors from the NIP text.
const (
	nip19Npub    = "npub10elfcs4fr0l0r8af98jlmgdh9c8tcxjvz9qkw038js35mp4dma8qzvjptg"
	nip19NpubHex = "7e7e9c42a91bfef19fa929e5fda1b72e0ebc1a4c1141673e2794234d86addf4e"
	nip19Nsec    = "nsec1vl029mgpspedva04g90vltkh6fvh240zqtv9k0t9af8935ke9laqsnlfe5"
	nip19NsecHex = "67dea2ed018072d675f5415ecfaed7d2597555e202d85b3d65ea4e58d2d92ffa"
	// generator point x: public key of secret key 1.
	skOne = "0000000000000000000000000000000000000000000000000000000000000001"
	pkOne = "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798"
	// group order n: out of range as a secret key.
	skN = "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141"
)

func TestParseSecretKey(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
		ok   bool
	}{
		{"hex", nip19NsecHex, nip19NsecHex, true},
		{"upper hex", strings.ToUpper(nip19NsecHex), nip19NsecHex, true},
		{"spaces", "  " + nip19NsecHex + "\n", nip19NsecHex, true},
		{"nsec", nip19Nsec, nip19NsecHex, true},
		{"nsec upper", strings.ToUpper(nip19Nsec), nip19NsecHex, true},
		{"one", skOne, skOne, true},
		{"empty", "", "", false},
		{"short hex", nip19NsecHex[:62], "", false},
		{"not hex", "zz" + nip19NsecHex[2:], "", false},
		{"zero", strings.Repeat("0", 64), "", false},
		{"order n", skN, "", false},
		{"npub given", nip19Npub, "", false},
		{"bad checksum", nip19Nsec[:len(nip19Nsec)-1] + "q", "", false},
		{"nsec truncated", nip19Nsec[:40], "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseSecretKey(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("ParseSecretKey(%q) = %q, %v, want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
			}
			if err != nil {
				if !errors.Is(err, ErrBadSecretKey) {
					t.Fatalf("ParseSecretKey(%q) error %v, want ErrBadSecretKey", tt.in, err)
				}
				if len(tt.in) > 8 && strings.Contains(err.Error(), strings.TrimSpace(tt.in)[8:]) {
					t.Fatalf("ParseSecretKey(%q) error %q echoes the secret", tt.in, err)
				}
			}
		})
	}
}

func TestParsePublicKey(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
		ok   bool
	}{
		{"hex", nip19NpubHex, nip19NpubHex, true},
		{"upper hex", strings.ToUpper(nip19NpubHex), nip19NpubHex, true},
		{"npub", nip19Npub, nip19NpubHex, true},
		{"generator", pkOne, pkOne, true},
		{"empty", "", "", false},
		{"short", nip19NpubHex[:10], "", false},
		{"not hex", "g" + nip19NpubHex[1:], "", false},
		{"not on curve", strings.Repeat("f", 64), "", false},
		{"nsec given", nip19Nsec, "", false},
		{"bad checksum", nip19Npub[:len(nip19Npub)-1] + "q", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePublicKey(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("ParsePublicKey(%q) = %q, %v, want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrBadPublicKey) {
				t.Fatalf("ParsePublicKey(%q) error %v, want ErrBadPublicKey", tt.in, err)
			}
			if tt.name == "nsec given" && err != nil && strings.Contains(err.Error(), nip19Nsec) {
				t.Fatalf("ParsePublicKey(nsec) error %q echoes the secret", err)
			}
		})
	}
}

func TestEncodeNpub(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{nip19NpubHex, nip19Npub, true},
		{nip19Npub, nip19Npub, true},
		{strings.ToUpper(nip19Npub), nip19Npub, true},
		{"", "", false},
		{strings.Repeat("f", 64), "", false},
	}
	for _, tt := range tests {
		got, err := EncodeNpub(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("EncodeNpub(%q) = %q, %v, want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestPublicKeyOf(t *testing.T) {
	generated := nostr.GeneratePrivateKey()
	wantGenerated, err := nostr.GetPublicKey(generated)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{skOne, pkOne, true},
		{generated, wantGenerated, true},
		{nip19Nsec, mustGetPublicKey(t, nip19NsecHex), true},
		{skN, "", false},
		{"nonsense", "", false},
	}
	for _, tt := range tests {
		got, err := PublicKeyOf(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("PublicKeyOf(%q) = %q, %v, want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func mustGetPublicKey(t *testing.T, sk string) string {
	t.Helper()
	pk, err := nostr.GetPublicKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	return pk
}

// TestSignedEventsVerify: what Keys signs verifies (the pure-Go signer skips
// btcec's own check after signing), for many keys and contents.
func TestSignedEventsVerify(t *testing.T) {
	for i := range 200 {
		k, err := NewKeys(nostr.GeneratePrivateKey())
		if err != nil {
			t.Fatal(err)
		}
		ev := nostr.Event{Kind: 1, CreatedAt: nostr.Timestamp(1_700_000_000 + i), Content: strings.Repeat("x", i), Tags: nostr.Tags{{"d", "w"}}}
		if err := k.Sign(&ev); err != nil {
			t.Fatal(err)
		}
		if ev.PubKey != k.PublicKey() {
			t.Fatalf("signed event pubkey %s, want %s", ev.PubKey, k.PublicKey())
		}
		if ok, err := ev.CheckSignature(); !ok || err != nil {
			t.Fatalf("event %d signed by %v does not verify: %v", i, k, err)
		}
	}
}
