package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"

	"provideragent/heartbeat"
)

// repoRoot is the repository root (two directories up from this package).
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the conformance package")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

const regenerateHint = "if the change is intended, state it in the case (internal/conformance/cases_*.go) and regenerate the vectors and the NIP's examples: " + RegenerateCommand

// TestVectors runs every checked-in vector through Judge (the agent's own
// ingest) in its context and checks the verdict, reason code, message,
// what was read and whether the signature verifies.
func TestVectors(t *testing.T) {
	files, err := LoadFiles(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no vector files under %s", VectorsDir)
	}
	n := 0
	for _, name := range sortedNames(files) {
		f := files[name]
		for _, v := range f.Vectors {
			n++
			got, err := Judge(context.Background(), f.ContextIn(v), v.Event)
			if err != nil {
				t.Errorf("%s#%s: Judge = %v", name, v.Name, err)
				continue
			}
			want := v.Verdict
			if v.Reason != "" {
				want = v.Reason
			}
			if w := verdictWord(got); w != want {
				t.Errorf("%s#%s: the agent gives %s (%v), the vector says %s; %s", name, v.Name, w, got.Err, want, regenerateHint)
				continue
			}
			if got.Err != nil && got.Err.Error() != v.Error {
				t.Errorf("%s#%s: the agent's message is %q, the vector's %q; %s", name, v.Name, got.Err, v.Error, regenerateHint)
			}
			if got.Kind != f.Kind && v.Verdict == Accept {
				t.Errorf("%s#%s: an accepted event of kind %d in the file of kind %d", name, v.Name, got.Kind, f.Kind)
			}
			if g, w := canonical(t, got.Reads), canonical(t, v.Reads); g != w {
				t.Errorf("%s#%s: the agent reads\n%s\nthe vector says\n%s\n%s", name, v.Name, g, w, regenerateHint)
			}
			if s := SigValid(v.Event); s != v.SigValid {
				t.Errorf("%s#%s: SigValid = %v, the vector says %v", name, v.Name, s, v.SigValid)
			}
		}
	}
	t.Logf("%d vectors in %d files", n, len(files))
}

// canonical is v as sorted, compact JSON ("null" for nil).
func canonical(t *testing.T, v map[string]any) string {
	t.Helper()
	if v == nil {
		return "null"
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var n any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&n); err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(n)
	return string(b)
}

// TestVectorsUpToDate regenerates the vector files and the NIP in memory
// and compares them with the checked-in ones: a builder or decoder change
// that alters an event or a verdict fails here until the vectors are
// regenerated (and a verdict change until its case says so).
func TestVectorsUpToDate(t *testing.T) {
	root := repoRoot(t)
	gen, err := Generate(root)
	if err != nil {
		t.Fatalf("Generate: %v\n%s", err, regenerateHint)
	}
	var stale []string
	for path, want := range gen {
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil || !bytes.Equal(got, want) {
			stale = append(stale, path)
		}
	}
	on, _ := filepath.Glob(filepath.Join(root, VectorsDir, "*.json"))
	for _, p := range on {
		rel, _ := filepath.Rel(root, p)
		if _, ok := gen[rel]; !ok {
			stale = append(stale, rel+" (no case makes it)")
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Fatalf("out of date with the code: %v\nrun %s (from the repository root) and commit the result", stale, RegenerateCommand)
	}
}

// TestGenerateIsDeterministic: two runs give the same bytes (fixed keys,
// fixed times, deterministic signatures).
func TestGenerateIsDeterministic(t *testing.T) {
	root := repoRoot(t)
	a, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for p := range a {
		if !bytes.Equal(a[p], b[p]) {
			t.Errorf("Generate wrote %s differently twice", p)
		}
	}
}

// TestEveryReasonHasAVector: each reason code an event can get (all but
// canceled, which comes from the caller's context) is shown by a vector.
func TestEveryReasonHasAVector(t *testing.T) {
	files, err := LoadFiles(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		for _, v := range f.Vectors {
			seen[v.Reason] = true
		}
	}
	for _, r := range heartbeat.AllReasons {
		if r != heartbeat.ReasonCanceled && !seen[string(r)] {
			t.Errorf("no vector has reason %s", r)
		}
	}
}
