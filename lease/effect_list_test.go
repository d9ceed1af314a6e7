package lease_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"provideragent/lease"
	"provideragent/lease/leasetest"
)

// TestEffectExamplesCoverEveryEffect: leasetest.Effects has one example of
// every type that implements lease.Effect (found in effect.go by its
// isEffect method, in any of the package's files), so drivers' tests that range over it see a new effect
// type as soon as it exists; and every one has a durability class.
func TestEffectExamplesCoverEveryEffect(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Name.Name != "isEffect" || fn.Recv == nil {
				continue
			}
			if id, ok := fn.Recv.List[0].Type.(*ast.Ident); ok {
				want = append(want, id.Name)
			}
		}
	}
	var got []string
	for _, e := range leasetest.Effects() {
		got = append(got, reflect.TypeOf(e).Name())
		if d := lease.DurabilityOf(e); d.String() == "" {
			t.Errorf("DurabilityOf(%T) has no name", e)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("leasetest.Effects() types = %v, want every Effect type of the package %v", got, want)
	}
}
