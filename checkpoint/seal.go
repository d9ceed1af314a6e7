package checkpoint

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/nbd-wtf/go-nostr/nip44"
	"golang.org/x/crypto/chacha20poly1305"

	"provideragent/identity"
	"provideragent/uploader"
)

// Key is a grant's checkpoint key: 32 random bytes its issuer made, known
// to the lease's members only. Every tile and manifest of the grant's
// checkpoints is stored on the Blossom servers sealed with it
// (XChaCha20-Poly1305), so a server, or anyone who learns a blob's hash,
// reads nothing of the state.
type Key [32]byte

// ErrUndecryptable means a blob whose hash checked out does not open with
// the grant's checkpoint key: it was sealed with another key (an earlier
// grant's: a re-grant makes a new one) or not sealed at all.
var ErrUndecryptable = errors.New("checkpoint: does not open with the grant's checkpoint key (sealed with another key, such as an earlier grant's, or not sealed)")

// SealOverhead is what sealing adds to a blob: the 24-byte nonce before
// the ciphertext and the 16-byte Poly1305 tag after it.
const SealOverhead = chacha20poly1305.NonceSizeX + chacha20poly1305.Overhead

// What a sealed blob is, bound into its authentication (the associated
// data): a tile never opens as a manifest, or the other way round.
const (
	sealTile     = "provider-agent checkpoint tile v1"
	sealManifest = "provider-agent checkpoint manifest v1"
)

// subkey derives a key of its own for one use of k.
func (k Key) subkey(use string) []byte {
	mac := hmac.New(sha256.New, k[:])
	mac.Write([]byte("provider-agent checkpoint key v1: " + use))
	return mac.Sum(nil)
}

// seal encrypts plain as what: nonce || ciphertext || tag, the layout of
// Paygress's blossom_crypto. The nonce is not random but a keyed hash of
// what and plain (synthetic, as in SIV): the same tile sealed twice under
// one key is the same blob, so a checkpoint's unchanged tiles are not
// uploaded again and blobs shared by checkpoints stay shared. What that
// shows a server is which sealed tiles repeat within one grant, nothing
// of their content.
func (k Key) seal(what string, plain []byte) []byte {
	mac := hmac.New(sha256.New, k.subkey("nonce"))
	mac.Write([]byte(what))
	mac.Write([]byte{0})
	mac.Write(plain)
	nonce := mac.Sum(nil)[:chacha20poly1305.NonceSizeX]
	aead, err := chacha20poly1305.NewX(k.subkey("seal"))
	if err != nil {
		panic(err) // a 32-byte key always makes a cipher
	}
	out := make([]byte, 0, len(plain)+SealOverhead)
	out = append(out, nonce...)
	return aead.Seal(out, nonce, plain, []byte(what))
}

// open authenticates and decrypts a blob sealed as what; any other blob
// (another key, another use, a changed byte) is ErrUndecryptable.
func (k Key) open(what string, blob []byte) ([]byte, error) {
	if len(blob) < SealOverhead {
		return nil, fmt.Errorf("%w (%d bytes: too short to be sealed)", ErrUndecryptable, len(blob))
	}
	aead, err := chacha20poly1305.NewX(k.subkey("seal"))
	if err != nil {
		panic(err)
	}
	nonce, sealed := blob[:chacha20poly1305.NonceSizeX], blob[chacha20poly1305.NonceSizeX:]
	plain, err := aead.Open(nil, nonce, sealed, []byte(what))
	if err != nil {
		return nil, ErrUndecryptable
	}
	return plain, nil
}

// sealingReader reads r in tiles of size bytes and serves each sealed, back
// to back: cut again at size+SealOverhead bytes, its output is exactly the
// sealed tiles. It hashes and counts what it read.
type sealingReader struct {
	key   Key
	r     io.Reader
	size  int
	buf   []byte
	out   []byte // what is left of the sealed tile being served
	whole interface {
		io.Writer
		Sum([]byte) []byte
	}
	n   int64
	err error
}

func newSealingReader(key Key, r io.Reader, size int) *sealingReader {
	return &sealingReader{key: key, r: r, size: size, buf: make([]byte, size), whole: sha256.New()}
}

func (s *sealingReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		n, err := io.ReadFull(s.r, s.buf)
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			s.err = io.EOF
		case err != nil:
			s.err = err
		}
		if n > 0 {
			s.whole.Write(s.buf[:n])
			s.n += int64(n)
			s.out = s.key.seal(sealTile, s.buf[:n])
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// plainSHA256 is the hash of what was read (once read to the end).
func (s *sealingReader) plainSHA256() string { return hex.EncodeToString(s.whole.Sum(nil)) }

// NewGrantKey makes a new random checkpoint key and seals it to each of
// members (hex public keys) with NIP-44 v2 from issuer, the grant's
// signer: the Keys of the grant's lease.CheckpointPolicy. Each member, and
// no one else, opens its own with OpenGrantKey.
func NewGrantKey(issuer *identity.Keys, members []string) (map[string]string, error) {
	var key Key
	if _, err := rand.Read(key[:]); err != nil {
		return nil, fmt.Errorf("new checkpoint key: %w", err)
	}
	return SealGrantKey(issuer, key, members, nil)
}

// SealGrantKey seals key to each of members as NewGrantKey does; nonce,
// when not nil, makes the payloads reproducible (test vectors only).
func SealGrantKey(issuer *identity.Keys, key Key, members []string, nonce []byte) (map[string]string, error) {
	out := make(map[string]string, len(members))
	for _, m := range members {
		ck, err := issuer.ConversationKey(m)
		if err != nil {
			return nil, fmt.Errorf("seal the checkpoint key to %s: %w", m, err)
		}
		payload, err := encryptKey(hex.EncodeToString(key[:]), ck, nonce)
		if err != nil {
			return nil, fmt.Errorf("seal the checkpoint key to %s: %w", m, err)
		}
		out[m] = payload
	}
	return out, nil
}

func encryptKey(plain string, ck [32]byte, nonce []byte) (string, error) {
	if nonce != nil {
		return nip44.Encrypt(plain, ck, nip44.WithCustomNonce(nonce))
	}
	return nip44.Encrypt(plain, ck)
}

// OpenGrantKey opens the checkpoint key sealed to self in keys (a grant's
// lease.CheckpointPolicy.Keys). The payload is NIP-44 between the grant's
// issuer and self, and a lease does not name its issuer: each of issuers
// (this provider itself, for the grants it queues; the trusted issuers)
// is tried, a wrong one failing NIP-44's authentication.
func OpenGrantKey(self *identity.Keys, keys map[string]string, issuers []string) (Key, error) {
	payload, ok := keys[self.PublicKey()]
	if !ok {
		return Key{}, fmt.Errorf("open the grant's checkpoint key: the grant seals it to %d members, not to this provider (%s)",
			len(keys), self.Npub())
	}
	tried := map[string]bool{}
	for _, iss := range issuers {
		if tried[iss] {
			continue
		}
		tried[iss] = true
		ck, err := self.ConversationKey(iss)
		if err != nil {
			continue
		}
		plain, err := nip44.Decrypt(payload, ck)
		if err != nil {
			continue
		}
		raw, err := hex.DecodeString(plain)
		if err != nil || len(raw) != len(Key{}) {
			return Key{}, fmt.Errorf("open the grant's checkpoint key: sealed by %s, it is not 32 bytes as 64 hex characters", iss)
		}
		return Key(raw), nil
	}
	return Key{}, fmt.Errorf("open the grant's checkpoint key: it opens with none of the %d issuers tried (this provider and agent.trusted_issuers): the grant was sealed by another key",
		len(tried))
}

// GrantMembers lists a lease's members once each, in order: the keys
// NewGrantKey seals to.
func GrantMembers(primary string, standbys []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range append([]string{primary}, standbys...) {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// sealedManifest is the manifest of a sealed checkpoint (itself stored
// sealed): the stored tiles in order, as the uploader.Manifest of their
// stream, and the file they open to.
type sealedManifest struct {
	uploader.Manifest
	Plain plainFile `json:"plain"`
}

// plainFile is the checkpoint file a sealed manifest's tiles open to: its
// size and sha256, and the size of its tiles before sealing.
type plainFile struct {
	Size     int64  `json:"size"`
	SHA256   string `json:"sha256"`
	TileSize int    `json:"tile_size"`
}

// parseSealedManifest decodes and checks an opened manifest (untrusted
// until now): the stored tiles as uploader.ParseManifest checks them,
// each a sealed tile of at most Plain.TileSize bytes, adding up to
// Plain.Size. Errors wrap uploader.ErrBadManifest.
func parseSealedManifest(b []byte) (sealedManifest, error) {
	var m sealedManifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return sealedManifest{}, fmt.Errorf("parse sealed manifest: %w: %w", uploader.ErrBadManifest, err)
	}
	if dec.More() {
		return sealedManifest{}, fmt.Errorf("parse sealed manifest: trailing data: %w", uploader.ErrBadManifest)
	}
	if err := m.Manifest.Validate(); err != nil {
		return sealedManifest{}, fmt.Errorf("parse sealed manifest: %w", err)
	}
	p := m.Plain
	if p.TileSize <= 0 || p.TileSize+SealOverhead != m.TileSize || !identity.IsLowerHex(p.SHA256) || len(p.SHA256) != 64 {
		return sealedManifest{}, fmt.Errorf("parse sealed manifest: plain tile_size %d, sha256 %.70q (sealed tile_size %d): %w",
			p.TileSize, p.SHA256, m.TileSize, uploader.ErrBadManifest)
	}
	var total int64
	for i, t := range m.Tiles {
		if t.Size <= SealOverhead {
			return sealedManifest{}, fmt.Errorf("parse sealed manifest: tile %d of %d bytes is no sealed tile: %w", i, t.Size, uploader.ErrBadManifest)
		}
		total += t.Size - SealOverhead
	}
	if total != p.Size {
		return sealedManifest{}, fmt.Errorf("parse sealed manifest: plain size %d, the tiles open to %d: %w", p.Size, total, uploader.ErrBadManifest)
	}
	return m, nil
}

// manifest is what a restore needs of a checkpoint's manifest: the tiles
// as stored (sealed with key, or plaintext when key is nil) and the file
// they make.
type manifest struct {
	stored uploader.Manifest
	key    *Key
	size   int64
	sha256 string
}

// decodeManifest reads a manifest blob: with a key, a sealed manifest
// (plaintext allowed only when plainOK: a grant's own state_uri, which
// its issuer may have stored unsealed); without, a plaintext one.
func decodeManifest(blob []byte, key *Key, plainOK bool) (manifest, error) {
	if key != nil {
		opened, err := key.open(sealManifest, blob)
		if err == nil {
			m, err := parseSealedManifest(opened)
			if err != nil {
				return manifest{}, err
			}
			return manifest{stored: m.Manifest, key: key, size: m.Plain.Size, sha256: m.Plain.SHA256}, nil
		}
		if !plainOK {
			return manifest{}, err
		}
		m, perr := uploader.ParseManifest(blob)
		if perr != nil {
			return manifest{}, fmt.Errorf("%w, nor is it a plaintext manifest", err)
		}
		return manifest{stored: m, size: m.Size, sha256: m.SHA256}, nil
	}
	m, err := uploader.ParseManifest(blob)
	if err != nil {
		return manifest{}, err
	}
	return manifest{stored: m, size: m.Size, sha256: m.SHA256}, nil
}
