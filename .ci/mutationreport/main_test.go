package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `package p

func Clamp(n, max int) int {
	if n > max {
		return max
	}
	if n > max {
		return max
	}
	return n
}

type T struct{ n int }

func (t *T) Inc() { t.n++ }
`

type mutation struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

// setup writes p/p.go, gremlins' JSON for it and a manifest, and returns the
// root and the manifest's path.
func setup(t *testing.T, ms []mutation) (root, manifest string) {
	t.Helper()
	root = t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "p"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "p", "p.go"), []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	out := map[string]any{"files": []any{map[string]any{"file_name": "p.go", "mutations": ms}}}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	js := filepath.Join(root, "p.json")
	if err := os.WriteFile(js, b, 0o644); err != nil {
		t.Fatal(err)
	}
	manifest = filepath.Join(root, "targets.tsv")
	if err := os.WriteFile(manifest, []byte("p\tp\t"+js+"\t61\tok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root, manifest
}

func TestKeys(t *testing.T) {
	root, _ := setup(t, nil)
	src, err := parseSource(filepath.Join(root, "p", "p.go"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		m    Mutant
		want string
	}{
		{Mutant{Path: "p/p.go", Line: 4, Col: 7, Type: "CONDITIONALS_BOUNDARY"}, "p/p.go Clamp CONDITIONALS_BOUNDARY if n «>» max {"},
		{Mutant{Path: "p/p.go", Line: 15, Col: 24, Type: "INCREMENT_DECREMENT"}, "p/p.go (*T).Inc INCREMENT_DECREMENT func (t *T) Inc() { t.n«++» }"},
	}
	for _, tt := range tests {
		got, err := src.key(tt.m)
		if err != nil || got != tt.want {
			t.Errorf("key(%d:%d) = %q, %v, want %q", tt.m.Line, tt.m.Col, got, err, tt.want)
		}
	}
	if _, err := src.key(Mutant{Path: "p/p.go", Line: 4, Col: 3, Type: "X"}); err == nil {
		t.Error("key(4:3, inside a token) = nil error, want one")
	}
}

func TestRun(t *testing.T) {
	lived := []mutation{
		{"CONDITIONALS_BOUNDARY", "LIVED", 4, 7},
		{"CONDITIONALS_BOUNDARY", "LIVED", 7, 7}, // the same line again: "#2"
		{"CONDITIONALS_NEGATION", "KILLED", 4, 7},
		{"INCREMENT_DECREMENT", "TIMED OUT", 15, 24},
		{"CONDITIONALS_NEGATION", "NOT COVERED", 7, 7},
	}
	tests := []struct {
		name        string
		equivalents string
		wantOK      bool
		wantOut     []string // substrings, spaces collapsed
	}{
		{
			name:    "nothing listed",
			wantOK:  false,
			wantOut: []string{"2 survived (unexplained)", "p/p.go Clamp CONDITIONALS_BOUNDARY if n «>» max { #2 ## <why"},
		},
		{
			name: "both listed",
			equivalents: "# comment\n" +
				"p/p.go Clamp CONDITIONALS_BOUNDARY if n «>» max { ## at n == max both return max\n" +
				"p/p.go   Clamp CONDITIONALS_BOUNDARY if n «>» max {   #2 ## the same\n",
			wantOK:  true,
			wantOut: []string{"p 1m1s 4 1 1 2 0 1 0 33.3 % 100.0 %"},
		},
		{
			name: "one listed, a killed one listed, a stale one",
			equivalents: "p/p.go Clamp CONDITIONALS_BOUNDARY if n «>» max { ## at n == max both return max\n" +
				"p/p.go Clamp CONDITIONALS_NEGATION if n «>» max { ## wrong\n" +
				"p/p.go Gone ARITHMETIC_BASE a «+» b ## stale\n",
			wantOK: false,
			wantOut: []string{
				"1 survived (unexplained)",
				"p/p.go:4:7 is listed as equivalent but was killed",
				"equivalents.txt:3 matches no mutant",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, manifest := setup(t, lived)
			eq := filepath.Join(root, "equivalents.txt")
			if err := os.WriteFile(eq, []byte(tt.equivalents), 0o644); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			ok, err := run(&out, manifest, eq, root, false)
			if err != nil || ok != tt.wantOK {
				t.Fatalf("run() = %v, %v, want %v, nil; output:\n%s", ok, err, tt.wantOK, out.String())
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(normalize(out.String()), normalize(w)) {
					t.Errorf("run() output lacks %q; output:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestEquivalentWithoutReason(t *testing.T) {
	root, manifest := setup(t, nil)
	eq := filepath.Join(root, "equivalents.txt")
	if err := os.WriteFile(eq, []byte("p/p.go Clamp CONDITIONALS_BOUNDARY if n «>» max {\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(&bytes.Buffer{}, manifest, eq, root, false); err == nil {
		t.Error("run(entry without a reason) = nil error, want one")
	}
}

// TestPartialFromLog: a target stopped by its budget has no JSON; its
// mutants come from gremlins' log, the row says partial, and the run fails.
func TestPartialFromLog(t *testing.T) {
	root, manifest := setup(t, nil)
	log := "Starting...\nGathering coverage... done in 1s\n" +
		"      KILLED CONDITIONALS_NEGATION at p.go:4:7\n" +
		"       LIVED CONDITIONALS_BOUNDARY at p.go:4:7\n" +
		"   TIMED OUT INCREMENT_DECREMENT at p.go:15:24\n"
	if err := os.WriteFile(filepath.Join(root, "p.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	js := filepath.Join(root, "p.json")
	if err := os.Remove(js); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(manifest, []byte("p\tp\t"+js+"\t2400\tover its 40m budget\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eq := filepath.Join(root, "equivalents.txt")
	if err := os.WriteFile(eq, []byte("p/p.go Clamp CONDITIONALS_BOUNDARY if n «>» max { ## at n == max both return max\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ok, err := run(&out, manifest, eq, root, false)
	want := normalize("p (partial: over its 40m budget) 40m0s 3 1 1 1 0 0 0 50.0 % 100.0 %")
	if err != nil || ok || !strings.Contains(normalize(out.String()), want) {
		t.Errorf("run(stopped target) = %v, %v, want false, nil and the row %q; output:\n%s", ok, err, want, out.String())
	}
}
