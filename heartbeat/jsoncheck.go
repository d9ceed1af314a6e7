package heartbeat

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Content errors of checkContent: a content a receiver could read in more
// than one way is refused, whatever its kind.
var (
	// ErrDuplicateField is wrapped by the rejection of content in which
	// one object names a field twice. encoding/json takes the later value,
	// Paygress (serde_json) refuses the event and other decoders take the
	// first: two receivers would act on different values, so nobody may.
	ErrDuplicateField = errors.New("field given twice")
	// ErrInvalidJSON is wrapped by the rejection of content that is not
	// JSON text (RFC 8259): a leading zero, a bad escape, a raw control
	// character, an unpaired surrogate escape. Paygress refuses it; a
	// lenient decoder would read something.
	ErrInvalidJSON = errors.New("content is not valid JSON")
)

// maxJSONDepth is encoding/json's nesting limit.
const maxJSONDepth = 10000

// checkContent reports whether content is one JSON text (RFC 8259, with no
// unpaired \u surrogate escape) in which no object gives a field twice.
// Names are compared after unescaping and ignoring case as encoding/json
// matches them (Unicode simple folding: "epoch", "Epoch" and "EPOCH" are
// one field to it). The error wraps ErrInvalidJSON or ErrDuplicateField.
// It runs before every content decoder, ahead of the signature check, so it
// is linear in the content's size whatever its shape.
func checkContent(content string) error {
	s := jsonScanner{data: content}
	s.space()
	if err := s.value(0); err != nil {
		return err
	}
	s.space()
	if s.pos != len(s.data) {
		return s.syntax("trailing data")
	}
	return nil
}

// jsonScanner walks one JSON text. names holds the member names of the
// objects being read, innermost last (offsets into data, to allocate
// nothing for plain names).
type jsonScanner struct {
	data  string
	pos   int
	names []jsonName
}

type jsonName struct {
	start, end int  // the name's bytes between the quotes
	escaped    bool // it has a backslash escape
}

func (s *jsonScanner) syntax(what string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrInvalidJSON, what, s.pos)
}

func (s *jsonScanner) space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *jsonScanner) value(depth int) error {
	if s.pos >= len(s.data) {
		return s.syntax("unexpected end")
	}
	switch c := s.data[s.pos]; {
	case c == '{':
		if depth >= maxJSONDepth {
			return s.syntax("nested too deep")
		}
		return s.object(depth + 1)
	case c == '[':
		if depth >= maxJSONDepth {
			return s.syntax("nested too deep")
		}
		return s.array(depth + 1)
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.syntax("unexpected character")
}

func (s *jsonScanner) literal(lit string) error {
	if len(s.data)-s.pos < len(lit) || s.data[s.pos:s.pos+len(lit)] != lit {
		return s.syntax("bad literal")
	}
	s.pos += len(lit)
	return nil
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *jsonScanner) number() error {
	if s.data[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(s.data) && s.data[s.pos] == '0':
		s.pos++ // a digit after it is refused by the caller
	case s.pos < len(s.data) && s.data[s.pos] >= '1' && s.data[s.pos] <= '9':
		s.digits()
	default:
		return s.syntax("bad number")
	}
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		if s.digits() == 0 {
			return s.syntax("bad number")
		}
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			return s.syntax("bad number")
		}
	}
	return nil
}

func (s *jsonScanner) digits() int {
	start := s.pos
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		s.pos++
	}
	return s.pos - start
}

// str reads a string; it returns whether it had an escape.
func (s *jsonScanner) str() (escaped bool, err error) {
	s.pos++ // the opening quote
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			s.pos++
			return escaped, nil
		case c < 0x20:
			return false, s.syntax("control character in string")
		case c != '\\':
			s.pos++
			continue
		}
		escaped = true
		s.pos++
		if s.pos >= len(s.data) {
			return false, s.syntax("unterminated string")
		}
		switch s.data[s.pos] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.pos++
		case 'u':
			r, ok := s.hex4(s.pos + 1)
			if !ok {
				return false, s.syntax("bad \\u escape")
			}
			s.pos += 5
			switch {
			case r >= 0xdc00 && r <= 0xdfff:
				return false, s.syntax("unpaired surrogate escape")
			case r >= 0xd800 && r <= 0xdbff:
				// A high surrogate must be followed by \u and a low one.
				lo, ok := rune(0), s.pos+1 < len(s.data) && s.data[s.pos] == '\\' && s.data[s.pos+1] == 'u'
				if ok {
					lo, ok = s.hex4(s.pos + 2)
				}
				if !ok || lo < 0xdc00 || lo > 0xdfff {
					return false, s.syntax("unpaired surrogate escape")
				}
				s.pos += 6
			}
		default:
			return false, s.syntax("bad escape")
		}
	}
	return false, s.syntax("unterminated string")
}

// hex4 decodes the four hex digits at i.
func (s *jsonScanner) hex4(i int) (rune, bool) {
	if i+4 > len(s.data) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s.data[i : i+4]) {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

func (s *jsonScanner) array(depth int) error {
	s.pos++
	s.space()
	if s.pos < len(s.data) && s.data[s.pos] == ']' {
		s.pos++
		return nil
	}
	for {
		s.space()
		if err := s.value(depth); err != nil {
			return err
		}
		s.space()
		if s.pos >= len(s.data) {
			return s.syntax("unterminated array")
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.syntax("want , or ] in array")
		}
	}
}

// smallObject is the number of names compared pairwise; an object with
// more is checked with a map of folded names, so a content of thousands of
// fields costs linear time.
const smallObject = 16

func (s *jsonScanner) object(depth int) error {
	s.pos++
	mark := len(s.names)
	defer func() { s.names = s.names[:mark] }()
	var folded map[string]struct{}
	s.space()
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		return nil
	}
	for {
		s.space()
		if s.pos >= len(s.data) || s.data[s.pos] != '"' {
			return s.syntax("want a field name")
		}
		start := s.pos + 1
		escaped, err := s.str()
		if err != nil {
			return err
		}
		n := jsonName{start: start, end: s.pos - 1, escaped: escaped}
		seen := s.names[mark:]
		switch {
		case folded != nil:
			f := foldName(s.unquote(n))
			if _, dup := folded[f]; dup {
				return s.duplicate(n)
			}
			folded[f] = struct{}{}
		case len(seen) == smallObject:
			folded = make(map[string]struct{}, 2*smallObject)
			for _, o := range seen {
				folded[foldName(s.unquote(o))] = struct{}{}
			}
			f := foldName(s.unquote(n))
			if _, dup := folded[f]; dup {
				return s.duplicate(n)
			}
			folded[f] = struct{}{}
		default:
			for _, o := range seen {
				if s.sameName(o, n) {
					return s.duplicate(n)
				}
			}
		}
		s.names = append(s.names, n)
		s.space()
		if s.pos >= len(s.data) || s.data[s.pos] != ':' {
			return s.syntax("want : after a field name")
		}
		s.pos++
		s.space()
		if err := s.value(depth); err != nil {
			return err
		}
		s.space()
		if s.pos >= len(s.data) {
			return s.syntax("unterminated object")
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.syntax("want , or } in object")
		}
	}
}

func (s *jsonScanner) duplicate(n jsonName) error {
	return fmt.Errorf("%w: %.64q", ErrDuplicateField, s.unquote(n))
}

func (s *jsonScanner) sameName(a, b jsonName) bool {
	if !a.escaped && !b.escaped {
		return equalFold(s.data[a.start:a.end], s.data[b.start:b.end])
	}
	return equalFold(s.unquote(a), s.unquote(b))
}

// equalFold is strings.EqualFold (encoding/json's name matching), with a
// fast exit for ASCII names of different lengths (none folds to another
// length).
func equalFold(a, b string) bool {
	if len(a) != len(b) && isASCII(a) && isASCII(b) {
		return false
	}
	return strings.EqualFold(a, b)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// unquote returns a name the scanner has checked, unescaped.
func (s *jsonScanner) unquote(n jsonName) string {
	raw := s.data[n.start:n.end]
	if !n.escaped {
		return raw
	}
	b := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			b = append(b, c)
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, _ := s.hex4(n.start + i + 1)
			i += 4
			if utf16.IsSurrogate(r) {
				lo, _ := s.hex4(n.start + i + 3)
				r = utf16.DecodeRune(r, lo)
				i += 6
			}
			b = utf8.AppendRune(b, r)
		default: // " \ /
			b = append(b, raw[i])
		}
	}
	return string(b)
}

// foldName maps every name encoding/json would match with name (its
// bytes.EqualFold) to one string.
func foldName(name string) string {
	b := make([]byte, 0, len(name))
	for _, r := range name {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
			b = append(b, byte(r))
			continue
		}
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		b = utf8.AppendRune(b, r)
	}
	return string(b)
}

// unmarshalContent checks content (checkContent) and decodes it into v
// with encoding/json; what names the kind in the rejection.
func unmarshalContent(what, content string, v any) *RejectError {
	if err := checkContent(content); err != nil {
		return rejectErr(ReasonDecode, err, "%s content", what)
	}
	if err := json.Unmarshal([]byte(content), v); err != nil {
		return rejectErr(ReasonDecode, err, "%s content", what)
	}
	return nil
}
