package heartbeat

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/nbd-wtf/go-nostr"
)

func TestCheckContent(t *testing.T) {
	// many is an object of n fields f0, f1, ...; field dupAt is named dup
	// instead.
	many := func(n int, dupAt int, dup string) string {
		var b strings.Builder
		b.WriteString("{")
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteString(",")
			}
			name := "f" + itoa(int64(i))
			if i == dupAt {
				name = dup
			}
			b.WriteString(`"` + name + `":` + itoa(int64(i)))
		}
		b.WriteString("}")
		return b.String()
	}
	nested := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	nestedObjects := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	// fields is an object of 16 fields f0...f15, then the named ones: past
	// smallObject, so the map of folded names compares them.
	fields := func(names ...string) string {
		return many(16, -1, "")[:len(many(16, -1, ""))-1] + `,"` + strings.Join(names, `":0,"`) + `":0}`
	}
	tests := []struct {
		content string
		want    error // nil, ErrInvalidJSON or ErrDuplicateField
	}{
		{`{"a":1,"b":[1,2,{"a":3}],"c":{"a":{"a":null}}}`, nil},
		{` {"a" : -0.5e+3 , "b":"\u00e9\ud83d\ude00\n\"\\\/"} `, nil},
		{`[]`, nil},
		{`"x"`, nil},
		{`{"a":1,"b":2,"a":3}`, ErrDuplicateField},
		{`{"epoch":1,"Epoch":2}`, ErrDuplicateField},       // encoding/json would take the later one
		{`{"k":1,"\u212a":2}`, ErrDuplicateField},          // KELVIN SIGN folds to k
		{`{"s":1,"\u017f":2}`, ErrDuplicateField},          // LATIN SMALL LETTER LONG S folds to s
		{`{"ab":1,"a\u0062":2}`, ErrDuplicateField},        // names compare unescaped
		{`{"x":[{"id":"a","id":"b"}]}`, ErrDuplicateField}, // at any depth
		{`{"x":{"y":1},"z":{"y":2}}`, nil},                 // sibling objects are separate
		{`{"x":{"y":1,"w":2},"y":3}`, nil},                 // an inner name does not clash with an outer one
		{`{"unknown":1,"unknown":2}`, ErrDuplicateField},   // whether or not anyone reads it
		{many(40, -1, ""), nil},                            // past smallObject: the map
		{many(40, 30, "F0"), ErrDuplicateField},            // found by the map (F0 folds to f0)
		{many(16, 15, "F0"), ErrDuplicateField},            // the last pairwise compare
		{many(17, 16, "F0"), ErrDuplicateField},            // the first by map
		{many(40, 30, `\u0066\u0031`), ErrDuplicateField},  // the map compares unescaped names
		{many(40, 30, `\u212a`), nil},                      // no k among f0...
		{many(40, 30, "k"), nil},
		{fields("a", "A"), ErrDuplicateField},
		{fields("z", "Z"), ErrDuplicateField},
		{fields("a", "b", "y", "z", "`", "{", "@", "["), nil},
		{nestedObjects(10000), nil},
		{nestedObjects(10001), ErrInvalidJSON},
		{`null`, nil},
		{`true`, nil},
		{`false`, nil},
		{`0`, nil},
		{`9`, nil},
		{`-0`, nil},
		{`[10,19,90,0.09,1e09,1E+9,-1.5e-3]`, nil},
		{`-`, ErrInvalidJSON},
		{`1.`, ErrInvalidJSON},
		{`1e`, ErrInvalidJSON},
		{`1e+`, ErrInvalidJSON},
		{`01`, ErrInvalidJSON},
		{`.5`, ErrInvalidJSON},
		{`+1`, ErrInvalidJSON},
		{`nul`, ErrInvalidJSON},
		{`[`, ErrInvalidJSON}, // each ends where the scanner reads on
		{`{`, ErrInvalidJSON},
		{`[1`, ErrInvalidJSON},
		{`[1,`, ErrInvalidJSON},
		{`{"a"`, ErrInvalidJSON},
		{`{"a":`, ErrInvalidJSON},
		{`{"a":1`, ErrInvalidJSON},
		{`{"a":1,`, ErrInvalidJSON},
		{`"\ud800\`, ErrInvalidJSON},
		{`"\u0041`, ErrInvalidJSON},
		{`"\`, ErrInvalidJSON},
		{`{"x":"\uDC00"}`, ErrInvalidJSON},
		{`{"x":"\uDBFF"}`, ErrInvalidJSON},
		{`{"x":"\u09af\u09AF"}`, nil},
		{many(40, 30, "😀"), nil}, // a name no case folds
		{`{"x":"\u00FF\u00ff"}`, nil},
		{`{"x":"\udc00"}`, ErrInvalidJSON},
		{`{"x":"\udfff"}`, ErrInvalidJSON},
		{`{"x":"\ud800\udc00\udbff\udfff"}`, nil},
		{`{"\ud83d\ude00":1,"😀":2}`, ErrDuplicateField}, // a surrogate pair, unescaped
		{`{"\uD83D\uDE00":1}`, nil},                     // hex digits in either case
		{`{"a\nb":1,"a\u000ab":2}`, ErrDuplicateField},
		{`{"a/b":1,"a\/b":2}`, ErrDuplicateField},
		{`{"\"":1,"\u0022":2}`, ErrDuplicateField},
		{`{"\b\f\r\t":1,"\u0008\u000C\u000d\u0009":2}`, ErrDuplicateField},
		{`{"\u00e9":1,"\u00C9":2}`, ErrDuplicateField},  // é and É fold together
		{`{"ab":1,"abc":2,"ABC":3}`, ErrDuplicateField}, // names of other lengths differ
		{nested(10000), nil},                            // encoding/json's depth limit
		{nested(10001), ErrInvalidJSON},                 // one over
		{`{"timestamp":01}`, ErrInvalidJSON},            // jlexer read it as 1
		{`{"x":1.}`, ErrInvalidJSON},                    // and this
		{`{"x":1e}`, ErrInvalidJSON},                    // and this
		{`{"x":-}`, ErrInvalidJSON},                     // and this
		{`{"x":"\q"}`, ErrInvalidJSON},                  // and this
		{"{\"x\":\"\t\"}", ErrInvalidJSON},              // and a raw tab in a string
		{`{"x":"\ud800"}`, ErrInvalidJSON},              // serde_json refuses a lone surrogate
		{`{"x":"\udc00\ud800"}`, ErrInvalidJSON},        //
		{`{"x":"\ud800\u0041"}`, ErrInvalidJSON},        //
		{`{"x":"\ud800x"}`, ErrInvalidJSON},             //
		{`{"x":"\u12"}`, ErrInvalidJSON},                //
		{`{"x":1,}`, ErrInvalidJSON},                    //
		{`{"x":[1,]}`, ErrInvalidJSON},                  //
		{`{"x" 1}`, ErrInvalidJSON},                     //
		{`{x:1}`, ErrInvalidJSON},                       //
		{`{"x":1} {}`, ErrInvalidJSON},                  // one text only
		{`{"x":tru}`, ErrInvalidJSON},                   //
		{`{"x":"abc`, ErrInvalidJSON},                   //
		{``, ErrInvalidJSON},                            //
	}
	for _, tt := range tests {
		err := checkContent(tt.content)
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("checkContent(%.80q) = %v, want %v", tt.content, err, tt.want)
		}
		// The table agrees with encoding/json on what is JSON (lone
		// surrogate escapes aside, which it accepts).
		surrogate := strings.Contains(strings.ToLower(tt.content), `\ud`)
		if valid := json.Valid([]byte(tt.content)); valid != (tt.want != ErrInvalidJSON) && !surrogate {
			t.Errorf("json.Valid(%.80q) = %v, but the table says %v", tt.content, valid, tt.want)
		}
	}
}

// TestDecodersRefuseDuplicateFields: every kind refuses a content that
// gives a field twice, as decode, with ErrDuplicateField in the chain.
func TestDecodersRefuseDuplicateFields(t *testing.T) {
	for _, ev := range seedEvents(t) {
		k := fuzzKeys(t)
		if ev.PubKey != k.PublicKey() {
			continue
		}
		// The content's first field again, first.
		first := ev.Content[:strings.Index(ev.Content, ":")+1]
		dup := mutate(t, ev, k, func(ev *nostr.Event) { ev.Content = first + `null,` + ev.Content[1:] })
		_, rej := decodeKind(dup)
		if rej == nil || rej.Reason != ReasonDecode || !errors.Is(rej, ErrDuplicateField) {
			t.Errorf("decode(kind %d with its first field twice) = %v, want decode wrapping ErrDuplicateField", ev.Kind, rej)
		}
		if _, rej := decodeKind(ev); rej != nil {
			t.Errorf("decode(kind %d seed) = %v", ev.Kind, rej)
		}
	}
}

// FuzzCheckContent: checkContent accepts exactly the JSON texts
// encoding/json accepts (surrogate escapes aside) that have no duplicate
// field under encoding/json's name matching. On invalid JSON it may name a
// duplicate it met before the error.
func FuzzCheckContent(f *testing.F) {
	for _, s := range []string{`{"a":1,"A":2}`, `{"a":[{"b":1},{"b":2}]}`, `{"x":"\u00e9"}`, `[1,2.5e3,-0,true,false,null]`, `{"a":{"a":{"a":1}}}`} {
		f.Add(s)
	}
	for _, ev := range seedEvents(f) {
		f.Add(ev.Content)
	}
	f.Fuzz(func(t *testing.T, content string) {
		err := checkContent(content)
		if strings.Contains(strings.ToLower(content), `\ud`) {
			return // surrogate escapes: json.Valid accepts unpaired ones
		}
		valid := json.Valid([]byte(content))
		dup := valid && referenceHasDuplicate(t, content)
		switch {
		case !valid && err == nil:
			t.Fatalf("checkContent(%q) = nil, want an error (json.Valid is false)", content)
		case !valid && !errors.Is(err, ErrInvalidJSON) && !errors.Is(err, ErrDuplicateField):
			t.Fatalf("checkContent(%q) = %v, want ErrInvalidJSON (or ErrDuplicateField found before the error)", content, err)
		case valid && dup && !errors.Is(err, ErrDuplicateField):
			t.Fatalf("checkContent(%q) = %v, want ErrDuplicateField", content, err)
		case valid && !dup && err != nil:
			t.Fatalf("checkContent(%q) = %v, want nil", content, err)
		}
	})
}

// referenceHasDuplicate walks valid JSON with encoding/json's tokenizer and
// compares every two names of an object with strings.EqualFold.
func referenceHasDuplicate(t *testing.T, content string) bool {
	dec := json.NewDecoder(strings.NewReader(content))
	type frame struct {
		object bool
		names  []string
		key    bool // the next string token is a name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			t.Fatalf("Token(%q) = %v on valid JSON", content, err)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if s, ok := tok.(string); ok && top != nil && top.object && top.key {
			for _, n := range top.names {
				if strings.EqualFold(n, s) {
					return true
				}
			}
			top.names = append(top.names, s)
			top.key = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 {
				top = stack[len(stack)-1]
			} else {
				top = nil
			}
		}
		if top != nil && top.object {
			top.key = true // a value ended: a name comes next
		}
	}
}
