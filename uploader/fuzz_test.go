package uploader_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"provideragent/uploader"
)

func FuzzParseManifest(f *testing.F) {
	var buf bytes.Buffer
	m, _ := uploader.Split(strings.NewReader("hello, tiles"), "w", 5, func([]byte, string) error { return nil })
	j, _ := json.Marshal(m)
	f.Add(j)
	f.Add([]byte(`{"version":1,"size":0,"sha256":"","tile_size":1,"tiles":[]}`))
	f.Add([]byte(`{"tiles":[{"sha256":1}]}`))
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := uploader.ParseManifest(data)
		if err != nil {
			return
		}
		// Anything accepted is self-consistent and survives a round trip.
		if err := m.Validate(); err != nil {
			t.Fatalf("ParseManifest accepted a manifest that fails Validate: %v", err)
		}
		j, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := uploader.ParseManifest(j); err != nil {
			t.Fatalf("ParseManifest(Marshal(m)) = %v, want nil", err)
		}
	})
}

func FuzzParseDescriptor(f *testing.F) {
	f.Add([]byte(`{"url":"http://x/` + strings.Repeat("a", 64) + `","sha256":"` + strings.Repeat("a", 64) + `","size":3,"type":"application/octet-stream"}`))
	f.Add([]byte(`{"sha256":"zz"}`))
	f.Add([]byte(`{"size":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := uploader.ParseDescriptor(data)
		if err != nil {
			return
		}
		if len(d.SHA256) != 64 || d.Size < 0 {
			t.Fatalf("ParseDescriptor accepted %+v", d)
		}
	})
}

// Split then concatenating the tiles gives back the input, and the manifest
// validates.
func FuzzSplit(f *testing.F) {
	f.Add([]byte("abcdefghij"), 3)
	f.Add([]byte{}, 1)
	f.Fuzz(func(t *testing.T, data []byte, size int) {
		if size <= 0 || size > 1<<16 {
			return
		}
		var joined []byte
		m, err := uploader.Split(bytes.NewReader(data), "w", size, func(b []byte, s string) error {
			if s != sha(b) {
				t.Fatalf("Split hash %s != sha256 of tile", s)
			}
			joined = append(joined, b...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(joined, data) || m.Validate() != nil || m.SHA256 != sha(data) {
			t.Fatalf("Split(%d bytes, %d) does not round-trip: %v", len(data), size, m.Validate())
		}
	})
}
