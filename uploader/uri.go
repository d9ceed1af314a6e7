package uploader

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// ErrBadURI means a string is not a BUD-10 blossom: URI.
var ErrBadURI = errors.New("bad blossom uri")

// MaxBlossomURIBytes bounds the URIs ParseBlossomURI reads.
const MaxBlossomURIBytes = 8 << 10

// BlossomRef is a parsed BUD-10 URI: a blob and where to look for it.
type BlossomRef struct {
	// SHA256 is the blob's hash, 64 lowercase hex characters.
	SHA256 string
	// Ext is the file extension without the dot ("bin" when unknown).
	Ext string
	// Servers are the xs hints as written, in order: a domain (BUD-10's
	// form: try https, then http) or an http(s) URL.
	Servers []string
	// Authors are the as hints: uploaders' hex public keys.
	Authors []string
	// Size is the sz hint in bytes, 0 when absent.
	Size int64
}

// BlossomURI returns the BUD-10 URI of blob sha256 with extension ext (""
// means "bin"): blossom:<sha256>.<ext>?xs=<server>...&as=<author>&sz=<size>,
// each hint only when given (author "", size <= 0 and no servers write
// none). Servers are written as given, trailing slashes removed, scheme
// included (BUD-10 allows it), escaped only where the query needs it.
func BlossomURI(sha256, ext string, servers []string, author string, size int64) string {
	var authors []string
	if author != "" {
		authors = []string{author}
	}
	return buildURI(sha256, ext, servers, authors, size)
}

func buildURI(sha256, ext string, servers, authors []string, size int64) string {
	ext = strings.TrimPrefix(ext, ".")
	if ext == "" {
		ext = "bin"
	}
	var b strings.Builder
	b.WriteString("blossom:" + sha256 + "." + ext)
	sep := byte('?')
	param := func(k, v string) {
		b.WriteByte(sep)
		sep = '&'
		b.WriteString(k + "=" + escapeQueryValue(v))
	}
	for _, s := range servers {
		param("xs", ServerKey(s))
	}
	for _, a := range authors {
		param("as", a)
	}
	if size > 0 {
		param("sz", strconv.FormatInt(size, 10))
	}
	return b.String()
}

// escapeQueryValue percent-encodes what would end or change a query value
// (&, #, +, %, =, spaces and non-printable or non-ASCII bytes) and keeps
// the rest, so "https://b.example:8443/x" stays readable, as BUD-10 writes it.
func escapeQueryValue(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= 0x20 || c >= 0x7f || strings.IndexByte("&#+%=", c) >= 0 {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// ParseBlossomURI parses a BUD-10 URI (untrusted input): the blossom:
// scheme (any case), a 64-character lowercase hex sha256, a mandatory
// extension of 1 to 16 letters and digits, and the xs, as and sz hints
// (xs a domain or an http(s) URL, as a hex public key, sz a positive
// integer given once). Other parameters are ignored. Errors wrap ErrBadURI
// and name the part that is wrong.
func ParseBlossomURI(s string) (BlossomRef, error) {
	bad := func(format string, args ...any) (BlossomRef, error) {
		return BlossomRef{}, fmt.Errorf("parse blossom uri %.100q: %s: %w", s, fmt.Sprintf(format, args...), ErrBadURI)
	}
	if len(s) > MaxBlossomURIBytes {
		return bad("%d bytes, max %d", len(s), MaxBlossomURIBytes)
	}
	const scheme = "blossom:"
	if len(s) < len(scheme) || !strings.EqualFold(s[:len(scheme)], scheme) {
		return bad("want the blossom: scheme")
	}
	rest := s[len(scheme):]
	if strings.ContainsRune(rest, '#') {
		return bad("fragment not allowed")
	}
	blob, query, _ := strings.Cut(rest, "?")
	sha, ext, ok := strings.Cut(blob, ".")
	if !isSHA256Hex(sha) {
		return bad("sha256 %.80q: want 64 lowercase hex characters", sha)
	}
	if !ok || !validExt(ext) {
		return bad("extension %.40q: want 1 to 16 letters or digits (.bin when unknown)", ext)
	}
	ref := BlossomRef{SHA256: sha, Ext: ext}
	values, err := url.ParseQuery(query)
	if err != nil {
		return bad("query: %v", err)
	}
	for i, xs := range values["xs"] {
		if err := validServerHint(xs); err != nil {
			return bad("xs[%d] %.80q: %v", i, xs, err)
		}
		ref.Servers = append(ref.Servers, xs)
	}
	for i, as := range values["as"] {
		if !isSHA256Hex(as) { // a hex public key has the same shape
			return bad("as[%d] %.80q: want a hex public key", i, as)
		}
		ref.Authors = append(ref.Authors, as)
	}
	switch sz := values["sz"]; len(sz) {
	case 0:
	case 1:
		n, err := strconv.ParseInt(sz[0], 10, 64)
		if err != nil || n <= 0 || sz[0][0] == '+' {
			return bad("sz %.40q: want a positive integer", sz[0])
		}
		ref.Size = n
	default:
		return bad("sz given %d times", len(sz))
	}
	return ref, nil
}

func validExt(ext string) bool {
	if len(ext) < 1 || len(ext) > 16 {
		return false
	}
	for i := 0; i < len(ext); i++ {
		c := ext[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// validServerHint accepts an xs value: an http(s) URL with a host, or a
// bare host[:port].
func validServerHint(xs string) error {
	if strings.Contains(xs, "://") {
		u, err := url.Parse(xs)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.ForceQuery {
			return errors.New("want a domain or an http(s) URL")
		}
		return nil
	}
	u, err := url.Parse("https://" + xs)
	if xs == "" || err != nil || u.Host != xs {
		return errors.New("want a domain or an http(s) URL")
	}
	return nil
}

// ServerURLs returns the base URLs to try for the xs hints, in order: a
// hint with a scheme as written, a bare domain as https:// then http://
// (BUD-10's resolution order).
func (r BlossomRef) ServerURLs() []string {
	var out []string
	for _, xs := range r.Servers {
		if strings.Contains(xs, "://") {
			out = append(out, ServerKey(xs))
			continue
		}
		out = append(out, "https://"+xs, "http://"+xs)
	}
	return out
}

// String returns the URI of r, hints in the order xs, as, sz.
func (r BlossomRef) String() string {
	return buildURI(r.SHA256, r.Ext, r.Servers, r.Authors, r.Size)
}
