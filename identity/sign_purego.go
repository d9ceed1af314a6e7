//go:build !libsecp256k1

package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/nbd-wtf/go-nostr"
)

// signer holds the parsed secret key: go-nostr's Event.Sign parses it and
// derives the public key (a scalar multiplication) on every call, which
// doubled the cost of signing the thousands of claims, announcements and
// revocations of a mass failover. With -tags libsecp256k1 go-nostr's own
// C signer is used instead (sign_libsecp256k1.go).
type signer struct {
	once sync.Once
	sk   *btcec.PrivateKey
}

// sign is go-nostr's pure-Go Event.Sign with the parsed key kept.
func (k *Keys) sign(ev *nostr.Event) error {
	k.signer.once.Do(func() {
		b, err := hex.DecodeString(k.secret)
		if err == nil && len(b) == 32 {
			k.signer.sk, _ = btcec.PrivKeyFromBytes(b)
		}
	})
	if k.signer.sk == nil {
		return errors.New("sign event: signing failed")
	}
	if ev.Tags == nil {
		ev.Tags = make(nostr.Tags, 0)
	}
	ev.PubKey = k.public
	h := sha256.Sum256(ev.Serialize())
	// FastSign skips btcec's verification of the signature it just made (two
	// thirds of the cost: 15 of 23 s of CPU signing the 100,000 revocations
	// of a mass eviction); TestSignedEventsVerify and every relay's own check
	// still verify what we sign.
	sig, err := schnorr.Sign(k.signer.sk, h[:], schnorr.FastSign())
	if err != nil {
		return errors.New("sign event: signing failed")
	}
	ev.ID = hex.EncodeToString(h[:])
	ev.Sig = hex.EncodeToString(sig.Serialize())
	return nil
}
