package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestAgentKeepsOnlyWiring holds the Agent type to what the one-driver
// layout promised: the driver owns the lease machine's step, and the agent
// keeps the wiring around it in at most 20 fields, grouping what belongs
// together (a new concern gets its own small type, not another field).
func TestAgentKeepsOnlyWiring(t *testing.T) {
	if n := reflect.TypeFor[Agent]().NumField(); n > 20 {
		t.Errorf("Agent has %d fields, want at most 20: group the new ones by the concern they serve", n)
	}
}

// TestDurablesBehindTheirType holds the durable-workload cluster to its
// own type: no Agent method is declared in its files (durables.go,
// checkpoint_*.go), and its bookkeeping (durables.books, reached only
// under its lock through guarded.with) is touched by durables' methods
// and its constructor alone.
func TestDurablesBehindTheirType(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	durableFile := func(name string) bool {
		return name == "durables.go" || strings.HasPrefix(name, "checkpoint_")
	}
	for _, f := range pkgs["agent"].Files {
		name := filepath.Base(fset.Position(f.Pos()).Filename)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			recv := receiverType(fn)
			if recv == "Agent" && durableFile(name) {
				t.Errorf("%s: (*Agent).%s is declared among the durable cluster's files: make it a durables method or move it out", name, fn.Name.Name)
			}
			if recv == "durables" || (recv == "" && durableFile(name)) {
				continue // its methods, and its constructor
			}
			ast.Inspect(fn, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "books" {
					t.Errorf("%s: %s reaches durables.books: only durables' methods may", fset.Position(sel.Pos()), fn.Name.Name)
				}
				return true
			})
		}
	}
}

// receiverType is the name of fn's receiver type ("" for a function).
func receiverType(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return ""
	}
	t := fn.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
