package uploader_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"provideragent/uploader"
)

// The examples of BUD-10 (hzrd149/blossom buds/10.md), as written there.
const (
	budSHA    = "b1674191a88ec5cdd733e4240a81803105dc412d6c6708d53ab94fc248f4f553"
	budAuthor = "ec4425ff5e9446080d2f70440188e3ca5d6da8713db7bdeef73d0ed54d9093f0"
	budAuth2  = "781208004e09102d7da3b7345e64fd193cd1bc3fce8fdae6008d77f9cabcd036"
)

func TestParseBlossomURIBUD10Examples(t *testing.T) {
	for _, tc := range []struct {
		uri  string
		want uploader.BlossomRef
	}{
		{"blossom:" + budSHA + ".pdf", uploader.BlossomRef{SHA256: budSHA, Ext: "pdf"}},
		{"blossom:" + budSHA + ".pdf?xs=cdn.example.com", uploader.BlossomRef{SHA256: budSHA, Ext: "pdf", Servers: []string{"cdn.example.com"}}},
		{"blossom:" + budSHA + ".png?as=" + budAuthor + "&sz=184292", uploader.BlossomRef{SHA256: budSHA, Ext: "png", Authors: []string{budAuthor}, Size: 184292}},
		{"blossom:" + budSHA + ".bin", uploader.BlossomRef{SHA256: budSHA, Ext: "bin"}},
		{"blossom:" + budSHA + ".pdf?as=" + budAuthor + "&as=" + budAuth2, uploader.BlossomRef{SHA256: budSHA, Ext: "pdf", Authors: []string{budAuthor, budAuth2}}},
		{"blossom:" + budSHA + ".pdf?xs=https://cdn.satellite.earth", uploader.BlossomRef{SHA256: budSHA, Ext: "pdf", Servers: []string{"https://cdn.satellite.earth"}}},
		{"blossom:" + budSHA + ".pdf?xs=cdn.satellite.earth&xs=blossom.primal.net", uploader.BlossomRef{SHA256: budSHA, Ext: "pdf", Servers: []string{"cdn.satellite.earth", "blossom.primal.net"}}},
		{"blossom:" + budSHA + ".pdf?xs=cdn.satellite.earth&as=" + budAuthor + "&xs=blossom.primal.net&sz=184292",
			uploader.BlossomRef{SHA256: budSHA, Ext: "pdf", Servers: []string{"cdn.satellite.earth", "blossom.primal.net"}, Authors: []string{budAuthor}, Size: 184292}},
		{"blossom:a7b3c2d1e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1.png?xs=cdn.example.com&xs=media.nostr.build&as=" + budAuth2 +
			"&as=b53185b9f27962ebdf76b8a9b0a84cd8b27f9f3d4abd59f715788a3bf9e7f75e&sz=2547831",
			uploader.BlossomRef{SHA256: "a7b3c2d1e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1", Ext: "png",
				Servers: []string{"cdn.example.com", "media.nostr.build"},
				Authors: []string{budAuth2, "b53185b9f27962ebdf76b8a9b0a84cd8b27f9f3d4abd59f715788a3bf9e7f75e"}, Size: 2547831}},
	} {
		got, err := uploader.ParseBlossomURI(tc.uri)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseBlossomURI(%s) = %+v, %v, want %+v", tc.uri, got, err, tc.want)
			continue
		}
		again, err := uploader.ParseBlossomURI(got.String())
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Errorf("ParseBlossomURI(String() = %s) = %+v, %v, want %+v", got.String(), again, err, got)
		}
	}
	// Examples already in xs, as, sz order are written back as they were.
	for _, uri := range []string{
		"blossom:" + budSHA + ".pdf?xs=cdn.satellite.earth&xs=blossom.primal.net&as=" + budAuthor + "&sz=184292",
		"blossom:" + budSHA + ".pdf?xs=https://cdn.satellite.earth",
		"blossom:" + budSHA + ".bin",
	} {
		ref, err := uploader.ParseBlossomURI(uri)
		if err != nil || ref.String() != uri {
			t.Errorf("ParseBlossomURI(%s).String() = %q, %v, want it unchanged", uri, ref.String(), err)
		}
	}
}

// TestBlossomURIRoundTrip: what we write for a checkpoint manifest (the
// servers with their scheme, the holder, the size) parses back, and
// ServerURLs gives the base URLs to try, in order.
func TestBlossomURIRoundTrip(t *testing.T) {
	servers := []string{"https://b1.example/", "http://127.0.0.1:7448", "https://b2.example:8443/blossom path&x=1"}
	uri := uploader.BlossomURI(budSHA, "json", servers, budAuthor, 412)
	want := "blossom:" + budSHA + ".json?xs=https://b1.example&xs=http://127.0.0.1:7448&xs=https://b2.example:8443/blossom%20path%26x%3D1&as=" + budAuthor + "&sz=412"
	if uri != want {
		t.Fatalf("BlossomURI =\n%s\nwant\n%s", uri, want)
	}
	ref, err := uploader.ParseBlossomURI(uri)
	if err != nil {
		t.Fatal(err)
	}
	wantRef := uploader.BlossomRef{SHA256: budSHA, Ext: "json", Authors: []string{budAuthor}, Size: 412,
		Servers: []string{"https://b1.example", "http://127.0.0.1:7448", "https://b2.example:8443/blossom path&x=1"}}
	if !reflect.DeepEqual(ref, wantRef) {
		t.Fatalf("ParseBlossomURI(BlossomURI(...)) = %+v, want %+v", ref, wantRef)
	}
	if got := uploader.BlossomURI(budSHA, "", nil, "", 0); got != "blossom:"+budSHA+".bin" {
		t.Errorf("BlossomURI(no ext, no hints) = %s, want .bin and nothing else", got)
	}
	mixed := uploader.BlossomRef{SHA256: budSHA, Ext: "pdf", Servers: []string{"cdn.example.com", "http://b.example/"}}
	if got, want := mixed.ServerURLs(), []string{"https://cdn.example.com", "http://cdn.example.com", "http://b.example"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ServerURLs = %v, want %v", got, want)
	}
	mixed.Servers = []string{"http://b.example/", "cdn.example.com"} // every hint after one with a scheme too
	if got, want := mixed.ServerURLs(), []string{"http://b.example", "https://cdn.example.com", "http://cdn.example.com"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ServerURLs(scheme first) = %v, want %v", got, want)
	}
}

func TestParseBlossomURIRejects(t *testing.T) {
	for _, tc := range []struct {
		uri  string
		want string // in the error
	}{
		{"https://cdn.example.com/" + budSHA + ".pdf", "blossom: scheme"},
		{"blossom:", "sha256"},
		{"blossom:" + budSHA, "extension"},
		{"blossom:" + budSHA + ".", "extension"},
		{"blossom:" + budSHA + ".tar.gz", `extension "tar.gz"`},
		{"blossom:" + budSHA + "." + strings.Repeat("x", 17), "extension"},
		{"blossom:" + strings.ToUpper(budSHA) + ".pdf", "sha256"},
		{"blossom:" + budSHA[:63] + ".pdf", "sha256"},
		{"blossom:" + budSHA + ".pdf#frag", "fragment"},
		{"blossom:" + budSHA + ".pdf?sz=0", `sz "0"`},
		{"blossom:" + budSHA + ".pdf?sz=-4", `sz "-4"`},
		{"blossom:" + budSHA + ".pdf?sz=%2B4", `sz "+4"`},
		{"blossom:" + budSHA + ".pdf?sz=1kb", `sz "1kb"`},
		{"blossom:" + budSHA + ".pdf?sz=1&sz=2", "sz given 2 times"},
		{"blossom:" + budSHA + ".pdf?as=npub1xyz", `as[0] "npub1xyz"`},
		{"blossom:" + budSHA + ".pdf?xs=ftp://b.example", `xs[0] "ftp://b.example"`},
		{"blossom:" + budSHA + ".pdf?xs=cdn.example.com&xs=a%20b", `xs[1] "a b"`},
		{"blossom:" + budSHA + ".pdf?xs=", `xs[0] ""`},
		{"blossom:" + budSHA + ".pdf?xs=%zz", "query"},
		{"blossom:" + budSHA + ".pdf?xs=" + strings.Repeat("a", 9000), "max 8192"},
	} {
		_, err := uploader.ParseBlossomURI(tc.uri)
		if !errors.Is(err, uploader.ErrBadURI) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseBlossomURI(%.80s) = %v, want ErrBadURI containing %q", tc.uri, err, tc.want)
		}
	}
	// Case-insensitive scheme and unknown parameters are accepted.
	if ref, err := uploader.ParseBlossomURI("BLOSSOM:" + budSHA + ".pdf?future=1&sz=5"); err != nil || ref.Size != 5 {
		t.Errorf("ParseBlossomURI(upper-case scheme, unknown parameter) = %+v, %v", ref, err)
	}
}

// FuzzParseBlossomURI: anything accepted is well formed and comes back the
// same through String.
func FuzzParseBlossomURI(f *testing.F) {
	f.Add("blossom:" + budSHA + ".pdf?xs=cdn.satellite.earth&as=" + budAuthor + "&xs=blossom.primal.net&sz=184292")
	f.Add(uploader.BlossomURI(budSHA, "json", []string{"https://b.example:8443/x y"}, budAuthor, 9))
	f.Add("blossom:" + budSHA + ".bin?sz=1&sz=2")
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := uploader.ParseBlossomURI(s)
		if err != nil {
			if !errors.Is(err, uploader.ErrBadURI) {
				t.Fatalf("ParseBlossomURI error %v does not wrap ErrBadURI", err)
			}
			return
		}
		if len(ref.SHA256) != 64 || ref.Ext == "" || ref.Size < 0 {
			t.Fatalf("ParseBlossomURI accepted %+v", ref)
		}
		again, err := uploader.ParseBlossomURI(ref.String())
		if err != nil {
			t.Fatalf("ParseBlossomURI(String() = %q) = %v", ref.String(), err)
		}
		norm := ref
		norm.Servers = nil
		for _, s := range ref.Servers {
			norm.Servers = append(norm.Servers, uploader.ServerKey(s))
		}
		if !reflect.DeepEqual(again, norm) {
			t.Fatalf("round trip of %q: %+v, want %+v", s, again, norm)
		}
	})
}

// TestBlossomURIEdges: the last values each rule allows are accepted (an
// extension of 1 and of 16 characters made of the range ends a-z, A-Z,
// 0-9; a URI of exactly MaxBlossomURIBytes) and the first ones past them
// refused; BlossomURI escapes DEL and space and keeps '!' and '~'.
func TestBlossomURIEdges(t *testing.T) {
	for _, ext := range []string{"a", "z", "A", "Z", "0", "9", "azAZ09" + strings.Repeat("m", 10)} {
		if ref, err := uploader.ParseBlossomURI("blossom:" + budSHA + "." + ext); err != nil || ref.Ext != ext {
			t.Errorf("ParseBlossomURI(extension %q) = %+v, %v, want accepted", ext, ref, err)
		}
	}
	for _, ext := range []string{"@", "[", "`", "{", "/", ":", "a-b", strings.Repeat("m", 17)} {
		if _, err := uploader.ParseBlossomURI("blossom:" + budSHA + "." + ext); !errors.Is(err, uploader.ErrBadURI) || !strings.Contains(err.Error(), "extension") {
			t.Errorf("ParseBlossomURI(extension %q) = %v, want an extension error", ext, err)
		}
	}
	base := "blossom:" + budSHA + ".bin?future="
	full := base + strings.Repeat("f", uploader.MaxBlossomURIBytes-len(base))
	if _, err := uploader.ParseBlossomURI(full); err != nil {
		t.Errorf("ParseBlossomURI(%d bytes) = %v, want accepted (the limit is inclusive)", len(full), err)
	}
	if _, err := uploader.ParseBlossomURI(full + "f"); !errors.Is(err, uploader.ErrBadURI) || !strings.Contains(err.Error(), "8193 bytes, max 8192") {
		t.Errorf("ParseBlossomURI(%d bytes) = %v, want too long", len(full)+1, err)
	}
	uri := uploader.BlossomURI(budSHA, "bin", []string{"https://b.example/a\x7fb c!~"}, "", 0)
	if want := "?xs=https://b.example/a%7Fb%20c!~"; !strings.HasSuffix(uri, want) {
		t.Errorf("BlossomURI(server with DEL, space, ! and ~) = %s, want it to end %s", uri, want)
	}
}
