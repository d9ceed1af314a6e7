package conformance

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// NIPBlock is one fenced ```json block of the NIP.
type NIPBlock struct {
	// Marker is "example" (the block is a vector's event), "content" (its
	// content, decoded) or "" (no marker line before the block).
	Marker string
	// Vector is the marker's FILE#NAME; Kind is the kind an example marker
	// states (kind=N).
	Vector string
	Kind   int
	// Line is the block's first line (1-based); Start and End delimit its
	// body in the document (after the opening fence line, up to the
	// closing fence line).
	Line       int
	Start, End int
}

// Body returns the block's text in doc.
func (b NIPBlock) Body(doc []byte) []byte { return doc[b.Start:b.End] }

// ParseNIPBlocks finds every ```json block of a markdown document and the
// marker comment on the line before it, if any:
//
//	<!-- example revocation.json#example kind=38385 -->
//	<!-- content revocation.json#example -->
func ParseNIPBlocks(doc []byte) ([]NIPBlock, error) {
	var blocks []NIPBlock
	lines := bytes.SplitAfter(doc, []byte("\n"))
	off := 0
	prev := ""
	for i := 0; i < len(lines); i++ {
		line := strings.TrimRight(string(lines[i]), "\r\n")
		off += len(lines[i])
		if strings.TrimSpace(line) != "```json" {
			prev = line
			continue
		}
		b := NIPBlock{Line: i + 1, Start: off}
		end := -1
		for j := i + 1; j < len(lines); j++ {
			if strings.TrimSpace(string(lines[j])) == "```" {
				end = j
				break
			}
			off += len(lines[j])
		}
		if end < 0 {
			return nil, fmt.Errorf("line %d: unterminated ```json block", i+1)
		}
		b.End = off
		off += len(lines[end])
		i = end
		if m, ok := strings.CutPrefix(strings.TrimSpace(prev), "<!--"); ok {
			m, ok = strings.CutSuffix(m, "-->")
			f := strings.Fields(m)
			if !ok || len(f) < 2 || (f[0] != "example" && f[0] != "content") || !strings.Contains(f[1], "#") {
				return nil, fmt.Errorf("line %d: marker %q, want <!-- example FILE#NAME kind=N --> or <!-- content FILE#NAME -->", i, prev)
			}
			b.Marker, b.Vector = f[0], f[1]
			for _, kv := range f[2:] {
				v, ok := strings.CutPrefix(kv, "kind=")
				n, err := strconv.Atoi(v)
				if !ok || err != nil {
					return nil, fmt.Errorf("line %d: marker word %q, want kind=N", b.Line-1, kv)
				}
				b.Kind = n
			}
			if b.Marker == "example" && b.Kind == 0 {
				return nil, fmt.Errorf("line %d: example marker without kind=N", b.Line-1)
			}
		}
		blocks = append(blocks, b)
		prev = ""
	}
	return blocks, nil
}
