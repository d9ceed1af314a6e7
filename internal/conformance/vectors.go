package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// VectorsDir is where the vector files live, relative to the repository root.
const VectorsDir = "testdata/vectors"

// NIPPath is the NIP draft whose example events the generator writes and
// the tests check, relative to the repository root.
const NIPPath = "docs/nip/XX.md"

// RegenerateCommand regenerates the vector files and the NIP's examples,
// run from the repository root.
const RegenerateCommand = "go run ./internal/conformance/gen"

// File is one vector file: the vectors of one event kind (or of one form
// of it).
type File struct {
	// Kind is the event kind the file is about.
	Kind int `json:"kind"`
	// Title says what the file covers.
	Title string `json:"title"`
	// Regenerate is the command that rewrites the file.
	Regenerate string `json:"regenerate"`
	// Context is the context of every vector that has none of its own.
	Context Context `json:"context"`
	// Vectors are the cases.
	Vectors []Vector `json:"vectors"`
}

// Vector is one event with the context it is judged in and the verdict
// the agent gives.
type Vector struct {
	// Name is unique within the file.
	Name string `json:"name"`
	// About says what the vector shows.
	About string `json:"about"`
	// Example names the NIP section whose example event this is, "" if
	// none.
	Example string `json:"example,omitempty"`
	// Context, when set, replaces the file's context for this vector
	// (whole: it is not merged).
	Context *Context `json:"context,omitempty"`
	// Event is the event, as a relay delivers it.
	Event json.RawMessage `json:"event"`
	// SigValid is true when the id and signature verify as NIP-01 says
	// (lowercase hex, id = sha256 of the serialization, BIP-340 signature).
	SigValid bool `json:"sig_valid"`
	// Verdict is "accept" or "refuse".
	Verdict string `json:"verdict"`
	// Reason is the refusal's reason code, "" when accepted.
	Reason string `json:"reason,omitempty"`
	// Error is the agent's message for a refusal: informative, not part
	// of the protocol.
	Error string `json:"error,omitempty"`
	// Reads is what the agent read from an accepted event, with its
	// defaults applied.
	Reads map[string]any `json:"reads,omitempty"`
}

// ContextIn returns the context v is judged in: its own, or the file's.
func (f File) ContextIn(v Vector) Context {
	if v.Context != nil {
		return *v.Context
	}
	return f.Context
}

// Verdicts.
const (
	Accept = "accept"
	Refuse = "refuse"
)

// LoadFiles reads every vector file under root's VectorsDir, by file name.
func LoadFiles(root string) (map[string]File, error) {
	paths, err := filepath.Glob(filepath.Join(root, VectorsDir, "*.json"))
	if err != nil {
		return nil, err
	}
	files := map[string]File{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var f File
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		files[filepath.Base(p)] = f
	}
	return files, nil
}

// encodeFile is f as written: indented, arrays of plain values on one
// line, no HTML escaping.
func encodeFile(f File) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(f); err != nil {
		return nil, err
	}
	return pretty(bytes.TrimSpace(buf.Bytes())), nil
}

// pretty indents compact JSON (as encoding/json writes it) by two spaces,
// keeping arrays that hold no object or array on one line, and keys in
// their order.
func pretty(compact []byte) []byte {
	var out bytes.Buffer
	p := printer{in: compact, out: &out}
	p.value(0)
	out.WriteByte('\n')
	return out.Bytes()
}

type printer struct {
	in  []byte
	pos int
	out *bytes.Buffer
}

func (p *printer) newline(depth int) {
	p.out.WriteByte('\n')
	for i := 0; i < depth; i++ {
		p.out.WriteString("  ")
	}
}

func (p *printer) value(depth int) {
	switch p.in[p.pos] {
	case '{':
		p.pos++
		if p.in[p.pos] == '}' {
			p.pos++
			p.out.WriteString("{}")
			return
		}
		p.out.WriteByte('{')
		for {
			p.newline(depth + 1)
			p.scalar() // the name
			p.pos++    // :
			p.out.WriteString(": ")
			p.value(depth + 1)
			if p.in[p.pos] == '}' {
				p.pos++
				p.newline(depth)
				p.out.WriteByte('}')
				return
			}
			p.pos++ // ,
			p.out.WriteByte(',')
		}
	case '[':
		p.pos++
		if p.in[p.pos] == ']' {
			p.pos++
			p.out.WriteString("[]")
			return
		}
		flat := p.flatArray()
		p.out.WriteByte('[')
		for {
			if !flat {
				p.newline(depth + 1)
			}
			p.value(depth + 1)
			if p.in[p.pos] == ']' {
				p.pos++
				if !flat {
					p.newline(depth)
				}
				p.out.WriteByte(']')
				return
			}
			p.pos++ // ,
			p.out.WriteByte(',')
			if flat {
				p.out.WriteByte(' ')
			}
		}
	default:
		p.scalar()
	}
}

// flatArray reports whether the array whose first element starts at pos
// holds only plain values.
func (p *printer) flatArray() bool {
	inString := false
	for i := p.pos; i < len(p.in); i++ {
		c := p.in[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			return false
		case c == ']':
			return true
		}
	}
	return true
}

// scalar copies one string, number or literal.
func (p *printer) scalar() {
	start := p.pos
	if p.in[p.pos] == '"' {
		p.pos++
		for p.in[p.pos] != '"' {
			if p.in[p.pos] == '\\' {
				p.pos++
			}
			p.pos++
		}
		p.pos++
	} else {
		for p.pos < len(p.in) && !bytes.ContainsRune([]byte(",]}"), rune(p.in[p.pos])) {
			p.pos++
		}
	}
	p.out.Write(p.in[start:p.pos])
}

// sortedNames returns the keys of m in order.
func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
