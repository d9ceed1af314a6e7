//go:build libsecp256k1

package identity

import (
	"errors"

	"github.com/nbd-wtf/go-nostr"
)

// signer is empty: go-nostr's C signer is fast as it is.
type signer struct{}

func (k *Keys) sign(ev *nostr.Event) error {
	if err := ev.Sign(k.secret); err != nil {
		// go-nostr's message may quote the key: do not wrap it.
		return errors.New("sign event: signing failed")
	}
	return nil
}
