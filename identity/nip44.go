package identity

import (
	"fmt"

	"github.com/nbd-wtf/go-nostr/nip44"
)

// ConversationKey is the NIP-44 v2 conversation key between k and the
// public key peer (hex): what both sides compute to encrypt to each other
// (nip44.Encrypt, nip44.Decrypt) without the secret key leaving Keys.
func (k *Keys) ConversationKey(peer string) ([32]byte, error) {
	pub, err := ParsePublicKey(peer)
	if err != nil {
		return [32]byte{}, fmt.Errorf("conversation key: %w", err)
	}
	ck, err := nip44.GenerateConversationKey(pub, k.secret)
	if err != nil {
		// Not nip44's error: one of them quotes the secret key.
		return [32]byte{}, fmt.Errorf("conversation key with %s: %w (not a point of secp256k1)", pub, ErrBadPublicKey)
	}
	return ck, nil
}
