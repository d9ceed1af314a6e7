package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestNIPExamples extracts every JSON block of the NIP and checks it: an
// example event is accepted, with the kind its marker states, in the
// context the NIP gives for its examples (ExampleContext), and is the
// vector it names; a content block is that example's content. A JSON block
// without a marker fails: the NIP's JSON is all checked.
func TestNIPExamples(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, NIPPath))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := ParseNIPBlocks(doc)
	if err != nil {
		t.Fatal(err)
	}
	files, err := LoadFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := FixedKeys()
	if err != nil {
		t.Fatal(err)
	}
	examples := 0
	events := map[string]map[string]any{} // FILE#NAME -> the example's event
	for _, b := range blocks {
		body := b.Body(doc)
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Errorf("%s:%d: not a JSON object: %v", NIPPath, b.Line, err)
			continue
		}
		switch b.Marker {
		case "":
			t.Errorf("%s:%d: a ```json block without an <!-- example --> or <!-- content --> marker (fence other JSON as ```jsonc)", NIPPath, b.Line)
		case "example":
			examples++
			events[b.Vector] = v
			got, err := Judge(context.Background(), ExampleContext(keys), body)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Accepted {
				t.Errorf("%s:%d: example %s refused: %v; %s", NIPPath, b.Line, b.Vector, got.Err, regenerateHint)
			}
			if got.Kind != b.Kind {
				t.Errorf("%s:%d: example %s has kind %d, its marker says %d", NIPPath, b.Line, b.Vector, got.Kind, b.Kind)
			}
			file, name, _ := strings.Cut(b.Vector, "#")
			f, ok := files[file]
			if !ok {
				t.Errorf("%s:%d: no vector file %s", NIPPath, b.Line, file)
				continue
			}
			if f.Kind != b.Kind {
				t.Errorf("%s:%d: %s is about kind %d, the marker says %d", NIPPath, b.Line, file, f.Kind, b.Kind)
			}
			found := false
			for _, vec := range f.Vectors {
				if vec.Name == name {
					found = true
					if !jsonEqual(t, vec.Event, body) {
						t.Errorf("%s:%d: example %s is not the vector's event; %s", NIPPath, b.Line, b.Vector, regenerateHint)
					}
				}
			}
			if !found {
				t.Errorf("%s:%d: no vector %s", NIPPath, b.Line, b.Vector)
			}
		case "content":
			ev, ok := events[b.Vector]
			if !ok {
				t.Errorf("%s:%d: content of %s before (or without) its example", NIPPath, b.Line, b.Vector)
				continue
			}
			content, _ := ev["content"].(string)
			if !jsonEqual(t, []byte(content), body) {
				t.Errorf("%s:%d: the content block is not %s's content; %s", NIPPath, b.Line, b.Vector, regenerateHint)
			}
		}
	}
	for name, f := range files {
		for _, v := range f.Vectors {
			if v.Example != "" {
				if _, ok := events[name+"#"+v.Name]; !ok {
					t.Errorf("example vector %s#%s is not in the NIP", name, v.Name)
				}
			}
		}
	}
	// Every field an example's content carries is named in the NIP's text.
	for name, ev := range events {
		content, _ := ev["content"].(string)
		var v any
		if err := json.Unmarshal([]byte(content), &v); err != nil {
			t.Errorf("%s: content: %v", name, err)
			continue
		}
		for _, field := range fieldNames(v) {
			if !bytes.Contains(doc, []byte("`"+field+"`")) && !bytes.Contains(doc, []byte(`"`+field+`"`)) {
				t.Errorf("%s: example %s has the field %s, which the text never names: describe it in its kind's table", NIPPath, name, field)
			}
		}
	}
	// The NIP states the keys and the context its examples are judged in.
	for _, name := range KeyNames {
		k := keys[name]
		if !bytes.Contains(doc, []byte("| "+name+" | `"+k.Secret+"` | `"+k.Public+"` |")) {
			t.Errorf("%s: the key table has no row for %s with secret %s and public key %s", NIPPath, name, k.Secret, k.Public)
		}
	}
	for _, s := range []string{itoa(Now), itoa(Created), itoa(GrantCreated), WorkloadID} {
		if !bytes.Contains(doc, []byte(s)) {
			t.Errorf("%s does not state the examples' %s", NIPPath, s)
		}
	}
	if examples < 9 {
		t.Errorf("%d example events in the NIP, want one per kind and form (9)", examples)
	}
}

// jsonEqual reports whether a and b are the same JSON value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&va) != nil || db.Decode(&vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// fieldNames returns the names of every object member in v, at any depth.
func fieldNames(v any) []string {
	var names []string
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			names = append(names, k)
			names = append(names, fieldNames(e)...)
		}
	case []any:
		for _, e := range v {
			names = append(names, fieldNames(e)...)
		}
	}
	return names
}
