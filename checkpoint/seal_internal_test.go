package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	"provideragent/uploader"
)

// TestSealOpens: a sealed blob opens with its key and role only; any
// other key, role or changed byte is ErrUndecryptable; sealing is
// deterministic per key (an unchanged tile is the same blob) and reveals
// nothing of the plaintext's bytes.
func TestSealOpens(t *testing.T) {
	k1, k2 := Key(sha256.Sum256([]byte("k1"))), Key(sha256.Sum256([]byte("k2")))
	plain := []byte("counter=4711 and the rest of the state")
	blob := k1.seal(sealTile, plain)
	if len(blob) != len(plain)+SealOverhead {
		t.Errorf("sealed %d bytes into %d, want %d more", len(plain), len(blob), SealOverhead)
	}
	if bytes.Contains(blob, []byte("counter=4711")) {
		t.Errorf("the sealed blob contains the plaintext")
	}
	if got, err := k1.open(sealTile, blob); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("open = %q, %v; want the plaintext", got, err)
	}
	if again := k1.seal(sealTile, plain); !bytes.Equal(again, blob) {
		t.Errorf("sealing the same tile twice under one key gave two blobs: an unchanged tile would be uploaded again")
	}
	if other := k2.seal(sealTile, plain); bytes.Equal(other[:24], blob[:24]) {
		t.Errorf("two keys gave the same nonce")
	}
	flipped := bytes.Clone(blob)
	flipped[len(flipped)/2] ^= 1
	for name, try := range map[string]func() ([]byte, error){
		"another key":       func() ([]byte, error) { return k2.open(sealTile, blob) },
		"a manifest's role": func() ([]byte, error) { return k1.open(sealManifest, blob) },
		"a changed byte":    func() ([]byte, error) { return k1.open(sealTile, flipped) },
		"too short":         func() ([]byte, error) { return k1.open(sealTile, blob[:SealOverhead-1]) },
		"plaintext":         func() ([]byte, error) { return k1.open(sealTile, append(plain, make([]byte, SealOverhead)...)) },
	} {
		if got, err := try(); !errors.Is(err, ErrUndecryptable) || got != nil {
			t.Errorf("open with %s = %q, %v; want ErrUndecryptable", name, got, err)
		}
	}
}

// TestSealingReaderTiles: what sealingReader serves, cut at tile +
// SealOverhead bytes, is the sealed tiles of the input in order; it
// counts and hashes the input.
func TestSealingReaderTiles(t *testing.T) {
	key := Key(sha256.Sum256([]byte("k")))
	for _, n := range []int{0, 1, 7, 8, 9, 64, 65} {
		in := bytes.Repeat([]byte("abcdefghij"), 7)[:n]
		r := newSealingReader(key, bytes.NewReader(in), 8)
		out, err := io.ReadAll(iotestOneByte{r})
		if err != nil {
			t.Fatal(err)
		}
		var back []byte
		for len(out) > 0 {
			cut := min(len(out), 8+SealOverhead)
			p, err := key.open(sealTile, out[:cut])
			if err != nil || len(p) == 0 || len(p) > 8 {
				t.Fatalf("%d bytes: sealed tile of %d bytes: %q, %v", n, cut, p, err)
			}
			back, out = append(back, p...), out[cut:]
		}
		sum := sha256.Sum256(in)
		if !bytes.Equal(back, in) || r.n != int64(n) || r.plainSHA256() != hex.EncodeToString(sum[:]) {
			t.Errorf("%d bytes: tiles open to %q (read %d, sha256 %s), want %q", n, back, r.n, r.plainSHA256(), in)
		}
	}
}

// iotestOneByte reads one byte at a time, as the slowest caller would.
type iotestOneByte struct{ r io.Reader }

func (o iotestOneByte) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

// TestSealedManifestChecked: a sealed manifest whose tiles do not add up
// to its plain size, whose tile sizes disagree, or that has a field of its
// own is refused as bad_manifest before anything is fetched.
func TestSealedManifestChecked(t *testing.T) {
	h := hex.EncodeToString(make([]byte, 32))
	good := `{"version":1,"workload":"w","size":90,"sha256":"` + h + `","tile_size":48,` +
		`"tiles":[{"sha256":"` + h + `","size":48},{"sha256":"` + h + `","size":42}],` +
		`"plain":{"size":10,"sha256":"` + h + `","tile_size":8}}`
	if _, err := parseSealedManifest([]byte(good)); err != nil {
		t.Fatalf("parseSealedManifest(good) = %v", err)
	}
	for _, c := range []struct{ name, old, new string }{
		{"plain size", `"plain":{"size":10,`, `"plain":{"size":11,`},
		{"plain tile size", `"tile_size":8}}`, `"tile_size":9}}`},
		{"a tile no bigger than the overhead", `"size":42}`, `"size":40}`},
		{"unknown field", `"plain":{`, `"plain":{"extra":1,`},
	} {
		doc := strings.Replace(good, c.old, c.new, 1)
		if _, err := parseSealedManifest([]byte(doc)); !errors.Is(err, uploader.ErrBadManifest) {
			t.Errorf("parseSealedManifest(%s) = %v, want ErrBadManifest", c.name, err)
		}
	}
}

// FuzzParseSealedManifest: an opened manifest is a member's bytes, checked
// like any untrusted input: parseSealedManifest never panics, and what it
// accepts adds up (the tiles open to Plain.Size bytes).
func FuzzParseSealedManifest(f *testing.F) {
	h := hex.EncodeToString(make([]byte, 32))
	f.Add([]byte(`{"version":1,"workload":"w","size":90,"sha256":"` + h + `","tile_size":48,"tiles":[{"sha256":"` + h +
		`","size":48},{"sha256":"` + h + `","size":42}],"plain":{"size":10,"sha256":"` + h + `","tile_size":8}}`))
	f.Add([]byte(`{"version":1,"plain":{}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseSealedManifest(b)
		if err != nil {
			return
		}
		var total int64
		for _, tl := range m.Tiles {
			if tl.Size <= SealOverhead || tl.Size > int64(m.TileSize) {
				t.Fatalf("accepted a tile of %d bytes (sealed tile_size %d)", tl.Size, m.TileSize)
			}
			total += tl.Size - SealOverhead
		}
		if total != m.Plain.Size || m.Plain.TileSize+SealOverhead != m.TileSize {
			t.Fatalf("accepted tiles opening to %d bytes, plain size %d", total, m.Plain.Size)
		}
	})
}
