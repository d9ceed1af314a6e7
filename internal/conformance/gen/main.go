// Command gen regenerates the conformance vectors (testdata/vectors/*.json)
// and the example events of the NIP draft (docs/nip/XX.md) from the
// heartbeat package's builders, with fixed keys and times. Run it from
// anywhere in the repository after a wire change:
//
//	go run ./internal/conformance/gen
//
// It fails, changing nothing, when the agent's verdict on a vector is no
// longer the one its case in internal/conformance states.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"provideragent/internal/conformance"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "gen: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	files, err := conformance.Generate(root)
	if err != nil {
		return err
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	// Vector files no case makes any more go.
	old, _ := filepath.Glob(filepath.Join(root, conformance.VectorsDir, "*.json"))
	for _, p := range old {
		rel, _ := filepath.Rel(root, p)
		if _, ok := files[rel]; !ok {
			if err := os.Remove(p); err != nil {
				return err
			}
			fmt.Printf("removed %s\n", rel)
		}
	}
	for _, rel := range paths {
		path := filepath.Join(root, rel)
		if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, files[rel]) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, files[rel], 0o644); err != nil {
			return err
		}
		fmt.Printf("wrote %s\n", rel)
	}
	return nil
}

// repoRoot is the nearest directory up from the working directory with
// the module's go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module provideragent\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the provideragent module")
		}
		dir = parent
	}
}
