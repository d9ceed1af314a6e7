package conformance

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/nbd-wtf/go-nostr"

	"provideragent/identity"
)

// Key is one of the fixed keys of the vectors and the NIP's examples. Its
// secret is public: never use it for anything else.
type Key struct {
	// Name is its role: primary, standby, issuer or stranger.
	Name string
	// Secret and Public are 64 lowercase hex characters.
	Secret, Public string
	keys           *identity.Keys
	sk             *btcec.PrivateKey
}

// KeyNames are the roles of the fixed keys, in the order the NIP lists them.
var KeyNames = []string{"primary", "standby", "issuer", "stranger"}

// FixedKey returns the fixed key of a role: its secret is
// sha256("provider-agent conformance key " + name).
func FixedKey(name string) (Key, error) {
	h := sha256.Sum256([]byte("provider-agent conformance key " + name))
	secret := hex.EncodeToString(h[:])
	k, err := identity.NewKeys(secret)
	if err != nil {
		return Key{}, fmt.Errorf("fixed key %s: %w", name, err)
	}
	sk, _ := btcec.PrivKeyFromBytes(h[:])
	return Key{Name: name, Secret: secret, Public: k.PublicKey(), keys: k, sk: sk}, nil
}

// sign sets ev's pubkey, id and signature. The signature is BIP-340 with
// the RFC 6979 nonce btcec derives when given no auxiliary randomness, so
// the same event always gets the same signature, whichever signer
// identity.Keys was built with (go-nostr's libsecp256k1 one is
// randomised).
func (k Key) sign(ev *nostr.Event) error {
	ev.PubKey = k.Public
	if ev.Tags == nil {
		ev.Tags = nostr.Tags{}
	}
	h := sha256.Sum256(ev.Serialize())
	sig, err := schnorr.Sign(k.sk, h[:])
	if err != nil {
		return fmt.Errorf("sign as %s: %w", k.Name, err)
	}
	ev.ID = hex.EncodeToString(h[:])
	ev.Sig = hex.EncodeToString(sig.Serialize())
	return nil
}
