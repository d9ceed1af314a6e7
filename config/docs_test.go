package config

import (
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"provideragent/backend"
)

// repoRoot is the repository root, seen from this package's directory.
const repoRoot = ".."

// readDoc returns the text of a documentation file, path relative to the
// repository root.
func readDoc(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// docFiles are the documentation files: README.md and every docs/*.md,
// as paths relative to the repository root.
func docFiles(t *testing.T) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(matches) == 0 {
		t.Fatal("no docs/*.md")
	}
	files := []string{"README.md"}
	for _, m := range matches {
		files = append(files, "docs/"+filepath.Base(m))
	}
	return files
}

// TestDocsDocumentEverySetting: every key of the config file has a row in
// the configuration table of docs/configuration.md, and docs/operations.md
// describes the workload environment.
func TestDocsDocumentEverySetting(t *testing.T) {
	var keys []string
	ct := reflect.TypeOf(Config{})
	for i := range ct.NumField() {
		sec := ct.Field(i)
		st := sec.Type
		for j := range st.NumField() {
			if tag := strings.Split(st.Field(j).Tag.Get("toml"), ",")[0]; tag != "" && tag != "-" {
				keys = append(keys, strings.Split(sec.Tag.Get("toml"), ",")[0]+"."+tag)
			}
		}
	}
	if len(keys) < 30 {
		t.Fatalf("found %d config keys by their toml tags, want the whole file's", len(keys))
	}
	documented := tableSettings(readDoc(t, "docs/configuration.md"))
	for _, k := range keys {
		if !documented[k] {
			t.Errorf("docs/configuration.md has no configuration row for %s", k)
		}
	}
	ops := readDoc(t, "docs/operations.md")
	for _, env := range []string{"PROVIDER_AGENT_WORKLOAD_ID", "PROVIDER_AGENT_EPOCH", backend.MarkerEnv} {
		if !strings.Contains(ops, "`"+env+"`") {
			t.Errorf("docs/operations.md does not describe the workload environment variable %s", env)
		}
	}
}

var (
	// mdLink is an inline markdown link or image: [text](target "title").
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// mdScheme is a link target with a URL scheme (https:, mailto:, ...).
	mdScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	// mdAutolink is what GitHub turns into a link by itself outside code:
	// <https://...>, a bare http(s):// URL or a www. address.
	mdAutolink = regexp.MustCompile(`(?:https?://|\bwww\.)[^\s)>\]]*`)
	mdFence    = regexp.MustCompile("(?ms)^```.*?^```")
	mdCode     = regexp.MustCompile("`[^`\n]*`")
)

// docLinks are the link targets of one documentation file (file is
// relative to the repository root), outside code: local ones resolved to
// slash-separated paths relative to the repository root, anchors dropped
// (one that leaves the repository keeps its leading "../"), and the
// others, with a URL scheme, an absolute path or written as an autolink,
// as they are written.
func docLinks(file, text string) (local, other []string) {
	prose := mdCode.ReplaceAllString(mdFence.ReplaceAllString(text, ""), "")
	other = mdAutolink.FindAllString(prose, -1)
	for _, m := range mdLink.FindAllStringSubmatch(prose, -1) {
		target := m[1]
		if mdScheme.MatchString(target) || strings.HasPrefix(target, "/") {
			other = append(other, target)
			continue
		}
		target, _, _ = strings.Cut(target, "#")
		if target == "" {
			continue // an anchor in the same file
		}
		local = append(local, path.Clean(path.Join(path.Dir(file), target)))
	}
	return local, other
}

// TestDocsLinksStayInTheRepository: no link in README.md or docs/*.md
// leads outside the repository (a clone has nothing there), and every
// link's target exists.
func TestDocsLinksStayInTheRepository(t *testing.T) {
	for _, f := range docFiles(t) {
		local, other := docLinks(f, readDoc(t, f))
		for _, target := range other {
			t.Errorf("%s links %s, outside the repository", f, target)
		}
		for _, target := range local {
			if target == ".." || strings.HasPrefix(target, "../") {
				t.Errorf("%s links %s, outside the repository", f, target)
				continue
			}
			if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(target))); err != nil {
				t.Errorf("%s links %s, which does not exist", f, target)
			}
		}
	}
}

// TestDocsReachableFromREADME: README.md stays short (under 350 lines), and
// every docs/*.md is reached from it by links, directly or through
// docs/README.md.
func TestDocsReachableFromREADME(t *testing.T) {
	readme := readDoc(t, "README.md")
	if n := strings.Count(readme, "\n"); n >= 350 {
		t.Errorf("README.md has %d lines, want under 350: move detail into docs/", n)
	}
	reached := map[string]bool{"README.md": true}
	queue := []string{"README.md"}
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		local, _ := docLinks(f, readDoc(t, f))
		for _, target := range local {
			if strings.HasSuffix(target, ".md") && !reached[target] {
				if _, err := os.Stat(filepath.Join(repoRoot, filepath.FromSlash(target))); err != nil {
					continue // TestDocsLinksStayInTheRepository reports it
				}
				reached[target] = true
				queue = append(queue, target)
			}
		}
	}
	for _, f := range docFiles(t) {
		if !reached[f] {
			t.Errorf("%s is not linked from README.md, directly or through docs/README.md", f)
		}
	}
}

// tableSettings are the keys a configuration table names in its rows'
// first cells: "`lease.t1` / `lease.t2`", "`uploader.tile_size` /
// `concurrency`" (the row's section) and "`lease.claim_retry_base` /
// `_max`" (the first key's stem).
func tableSettings(doc string) map[string]bool {
	out := map[string]bool{}
	name := regexp.MustCompile("`([a-z0-9_.]+)`")
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		var section, last string
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			k := m[1]
			switch {
			case strings.Contains(k, "."):
				section, _, _ = strings.Cut(k, ".")
				last = k
			case section == "":
				continue
			case strings.HasPrefix(k, "_"):
				k = last[:strings.LastIndex(last, "_")] + k
			default:
				k = section + "." + k
			}
			out[k] = true
		}
	}
	return out
}
