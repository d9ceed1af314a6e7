package lease_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"testing"

	"provideragent/lease"
	"provideragent/lease/leasetest"
)

// TestEffectExamplesCoverEveryEffect: leasetest.Effects has one example of
// every type that implements lease.Effect (found in effect.go by its
// isEffect method), so drivers' tests that range over it see a new effect
// type as soon as it exists; and every one has a durability class.
func TestEffectExamplesCoverEveryEffect(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "effect.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "isEffect" || fn.Recv == nil {
			continue
		}
		if id, ok := fn.Recv.List[0].Type.(*ast.Ident); ok {
			want = append(want, id.Name)
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
		t.Fatalf("leasetest.Effects() types = %v, want every Effect type in effect.go %v", got, want)
	}
}
