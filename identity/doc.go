// Package identity is a provider's Nostr signing identity and the key
// forms the project accepts: secret keys as 64 hex characters or NIP-19
// nsec, public keys as hex or npub (always returned as lowercase hex, the
// form events carry), and Keys, which signs events and prints only its
// npub. The agent, the wire protocol (heartbeat), the uploader's Blossom
// authorisation and the config's key files all take their keys from here.
//
// Errors wrap ErrBadSecretKey or ErrBadPublicKey and never echo a secret
// key. With -tags libsecp256k1 signing uses go-nostr's C signer.
package identity
