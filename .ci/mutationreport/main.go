// Command mutationreport reads the gremlins results that .ci/mutation
// collected, one JSON file per target, and sorts every mutant gremlins ran
// into killed (tests failed or hung), equivalent (listed in the reviewed
// equivalents file) and survived (unexplained). It prints a table per target
// and one line per unexplained survivor in the equivalents file's format, and
// exits 1 when a survivor is unexplained or a target has no result.
//
// A mutant is keyed by what a reviewer reads, not by its line number, so an
// entry survives edits elsewhere in the file:
//
//	<path> <function> <TYPE> <source line, the mutated token in «»>[ #n] ## <reason>
//
// for example
//
//	courier/flush.go (*Courier).Flush CONDITIONALS_BOUNDARY if n «>» 0 { ## n is never negative: > 0 and >= 0 differ only at 0, where ...
//
// <function> is "-" outside a function; "#n" tells apart the n-th identical
// (path, function, type, line) in source order.
//
// A target stopped by its time budget has no JSON: its mutants are read
// from gremlins' log beside it (<name>.log), shown as a partial result, and
// the run still fails.
//
// Usage (the manifest is written by .ci/mutation, one target a line: name,
// dir, JSON file, seconds, status):
//
//	go run ./.ci/mutationreport -manifest OUT/targets.tsv -equivalents .ci/mutation-equivalents.txt [-markdown]
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

func main() {
	manifest := flag.String("manifest", "", "targets.tsv written by .ci/mutation")
	equivalents := flag.String("equivalents", ".ci/mutation-equivalents.txt", "the reviewed list of equivalent mutants")
	root := flag.String("root", ".", "the module root the targets' dirs are relative to")
	markdown := flag.Bool("markdown", false, "print the per-target table as Markdown")
	flag.Parse()
	if *manifest == "" {
		fmt.Fprintln(os.Stderr, "mutationreport: -manifest is required")
		os.Exit(2)
	}
	ok, err := run(os.Stdout, *manifest, *equivalents, *root, *markdown)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutationreport:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// Target is one line of the manifest: a package (or a set of its files)
// gremlins ran over.
type Target struct {
	Name    string
	Dir     string // relative to the module root, e.g. "agentdb"
	JSON    string // gremlins' -o output
	Elapsed time.Duration
	Status  string // "ok", or why there is no result
}

// Mutant is one mutation gremlins reported.
type Mutant struct {
	Path   string // relative to the module root
	Line   int
	Col    int
	Type   string
	Status string // gremlins' status: KILLED, LIVED, TIMED OUT, NOT COVERED, NOT VIABLE, SKIPPED
	Key    string // see the package comment
}

// Equivalent is one reviewed entry of the equivalents file.
type Equivalent struct {
	Key    string
	Reason string
	Line   int // in the equivalents file
	used   bool
}

// Counts is one target's row of the table.
type Counts struct {
	Total, Killed, TimedOut, Equivalent, Survived, NotCovered, NotViable int
	// Partial: the target was stopped; these are the mutants it got to,
	// read from its log.
	Partial bool
}

// Efficacy is gremlins' figure: killed over killed plus lived (listed
// equivalents count as lived, timeouts as neither).
func (c Counts) Efficacy() float64 {
	return percent(c.Killed, c.Killed+c.Equivalent+c.Survived)
}

// EfficacyExcludingEquivalents leaves the listed equivalents out: killed over
// killed plus unexplained survivors.
func (c Counts) EfficacyExcludingEquivalents() float64 {
	return percent(c.Killed, c.Killed+c.Survived)
}

func percent(n, d int) float64 {
	if d == 0 {
		return 100
	}
	return 100 * float64(n) / float64(d)
}

func run(w io.Writer, manifestPath, equivalentsPath, root string, markdown bool) (bool, error) {
	targets, err := readManifest(manifestPath)
	if err != nil {
		return false, err
	}
	equivs, err := readEquivalents(equivalentsPath)
	if err != nil {
		return false, err
	}
	byKey := make(map[string]*Equivalent, len(equivs))
	for _, e := range equivs {
		if prev, dup := byKey[e.Key]; dup {
			return false, fmt.Errorf("%s:%d: same mutant as line %d", equivalentsPath, e.Line, prev.Line)
		}
		byKey[e.Key] = e
	}

	ok := true
	counts := make([]Counts, len(targets))
	var survivors, listedButKilled []Mutant
	ran := map[string]bool{} // dirs with a result, for stale entries
	for i, t := range targets {
		if t.Status != "ok" {
			ok = false
		}
		ms, err := readMutants(root, t)
		if t.Status != "ok" && err != nil {
			continue // no result at all
		}
		if err != nil {
			return false, fmt.Errorf("target %s: %w", t.Name, err)
		}
		counts[i].Partial = t.Status != "ok"
		if !counts[i].Partial {
			ran[t.Dir] = true
		}
		c := &counts[i]
		for _, m := range ms {
			e := byKey[m.Key]
			if e != nil {
				e.used = true
			}
			switch m.Status {
			case "KILLED":
				c.Killed++
				if e != nil {
					listedButKilled = append(listedButKilled, m)
				}
			case "TIMED OUT":
				c.TimedOut++
				if e != nil {
					listedButKilled = append(listedButKilled, m)
				}
			case "LIVED":
				if e != nil {
					c.Equivalent++
				} else {
					c.Survived++
					survivors = append(survivors, m)
				}
			case "NOT COVERED":
				c.NotCovered++
			case "NOT VIABLE":
				c.NotViable++
			}
			if m.Status != "NOT COVERED" && m.Status != "SKIPPED" {
				c.Total++
			}
		}
	}

	printTable(w, targets, counts, markdown)
	if len(survivors) > 0 {
		ok = false
		fmt.Fprintf(w, "\n%d survived (unexplained): kill each with a test, or, if no test can tell it from the original, add its line with a reason to %s:\n",
			len(survivors), equivalentsPath)
		for _, m := range survivors {
			fmt.Fprintf(w, "  %s:%d:%d\n    %s ## <why no test can tell it from the original>\n", m.Path, m.Line, m.Col, m.Key)
		}
	}
	for _, m := range listedButKilled {
		fmt.Fprintf(w, "\nwarning: %s:%d:%d is listed as equivalent but was %s: a test tells it apart, remove its entry:\n    %s\n",
			m.Path, m.Line, m.Col, strings.ToLower(m.Status), m.Key)
	}
	for _, e := range equivs {
		if !e.used && ran[entryDir(e.Key, ran)] {
			fmt.Fprintf(w, "\nwarning: %s:%d matches no mutant (the code changed?): review and update or remove it:\n    %s\n",
				equivalentsPath, e.Line, e.Key)
		}
	}
	return ok, nil
}

// entryDir is the dir of the ran target an entry's path lies in, or "".
func entryDir(key string, ran map[string]bool) string {
	path, _, _ := strings.Cut(key, " ")
	dir := filepath.ToSlash(filepath.Dir(path))
	if ran[dir] {
		return dir
	}
	return ""
}

func printTable(w io.Writer, targets []Target, counts []Counts, markdown bool) {
	header := []string{"target", "time", "mutants", "killed", "timed out", "equivalent (listed)", "survived (unexplained)", "not covered", "not viable", "efficacy", "efficacy without equivalents"}
	rows := [][]string{}
	for i, t := range targets {
		c := counts[i]
		if t.Status != "ok" && !c.Partial {
			rows = append(rows, []string{t.Name, round(t.Elapsed), "no result: " + t.Status, "", "", "", "", "", "", "", ""})
			continue
		}
		name := t.Name
		if c.Partial {
			name += " (partial: " + t.Status + ")"
		}
		rows = append(rows, []string{name, round(t.Elapsed),
			strconv.Itoa(c.Total), strconv.Itoa(c.Killed), strconv.Itoa(c.TimedOut), strconv.Itoa(c.Equivalent),
			strconv.Itoa(c.Survived), strconv.Itoa(c.NotCovered), strconv.Itoa(c.NotViable),
			fmt.Sprintf("%.1f %%", c.Efficacy()), fmt.Sprintf("%.1f %%", c.EfficacyExcludingEquivalents())})
	}
	if markdown {
		fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat("---|", len(header)))
		for _, r := range rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
		}
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

func round(d time.Duration) string {
	return d.Round(time.Second).String()
}

func readManifest(path string) ([]Target, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ts []Target
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fs := strings.Split(sc.Text(), "\t")
		if len(fs) != 5 {
			return nil, fmt.Errorf("%s:%d: %d fields, want 5 (name, dir, json, seconds, status)", path, n, len(fs))
		}
		secs, err := strconv.Atoi(fs[3])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: seconds: %w", path, n, err)
		}
		ts = append(ts, Target{Name: fs[0], Dir: fs[1], JSON: fs[2], Elapsed: time.Duration(secs) * time.Second, Status: fs[4]})
	}
	return ts, sc.Err()
}

// readEquivalents reads "<key> ## <reason>" lines; blank lines and lines
// starting with "#" are comments.
func readEquivalents(path string) ([]*Equivalent, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var es []*Equivalent
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, reason, found := strings.Cut(line, " ## ")
		if !found || strings.TrimSpace(reason) == "" {
			return nil, fmt.Errorf("%s:%d: no reason: want <key> ## <reason>", path, n)
		}
		es = append(es, &Equivalent{Key: normalize(key), Reason: strings.TrimSpace(reason), Line: n})
	}
	return es, sc.Err()
}

func normalize(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// gremlinsOutput is the part of gremlins' -o JSON this reads.
type gremlinsOutput struct {
	Files []gremlinsFile `json:"files"`
}

type gremlinsFile struct {
	FileName  string             `json:"file_name"`
	Mutations []gremlinsMutation `json:"mutations"`
}

type gremlinsMutation struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Line   int    `json:"line"`
	Column int    `json:"column"`
}

func readMutants(root string, t Target) ([]Mutant, error) {
	var out gremlinsOutput
	if t.Status == "ok" {
		b, err := os.ReadFile(t.JSON)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, fmt.Errorf("%s: %w", t.JSON, err)
		}
	} else {
		var err error
		if out, err = readLog(strings.TrimSuffix(t.JSON, ".json") + ".log"); err != nil {
			return nil, err
		}
	}
	var ms []Mutant
	for _, f := range out.Files {
		path := filepath.ToSlash(filepath.Join(t.Dir, f.FileName))
		src, err := parseSource(filepath.Join(root, path))
		if err != nil {
			return nil, err
		}
		var fms []Mutant
		for _, mu := range f.Mutations {
			fms = append(fms, Mutant{Path: path, Line: mu.Line, Col: mu.Column, Type: mu.Type, Status: mu.Status})
		}
		sort.Slice(fms, func(i, j int) bool {
			if fms[i].Line != fms[j].Line {
				return fms[i].Line < fms[j].Line
			}
			if fms[i].Col != fms[j].Col {
				return fms[i].Col < fms[j].Col
			}
			return fms[i].Type < fms[j].Type
		})
		seen := map[string]int{}
		for i := range fms {
			k, err := src.key(fms[i])
			if err != nil {
				return nil, err
			}
			seen[k]++
			if n := seen[k]; n > 1 {
				k += " #" + strconv.Itoa(n)
			}
			fms[i].Key = k
		}
		ms = append(ms, fms...)
	}
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].Path != ms[j].Path {
			return ms[i].Path < ms[j].Path
		}
		if ms[i].Line != ms[j].Line {
			return ms[i].Line < ms[j].Line
		}
		return ms[i].Col < ms[j].Col
	})
	return ms, nil
}

// logLine is one mutant in gremlins' log: "      KILLED CONDITIONALS_NEGATION at store.go:37:10".
var logLine = regexp.MustCompile(`^\s*(KILLED|LIVED|TIMED OUT|NOT COVERED|NOT VIABLE|SKIPPED|RUNNABLE) ([A-Z_]+) at (.+):(\d+):(\d+)$`)

// readLog reads the mutants gremlins logged, for a run stopped before it
// wrote its JSON.
func readLog(path string) (gremlinsOutput, error) {
	f, err := os.Open(path)
	if err != nil {
		return gremlinsOutput{}, err
	}
	defer f.Close()
	var out gremlinsOutput
	index := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := logLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		i, seen := index[m[3]]
		if !seen {
			i = len(out.Files)
			index[m[3]] = i
			out.Files = append(out.Files, gremlinsFile{FileName: m[3]})
		}
		line, _ := strconv.Atoi(m[4])
		col, _ := strconv.Atoi(m[5])
		out.Files[i].Mutations = append(out.Files[i].Mutations, gremlinsMutation{Type: m[2], Status: m[1], Line: line, Column: col})
	}
	return out, sc.Err()
}

// source is one parsed Go file: its lines, its tokens by offset and its
// functions.
type source struct {
	path   string
	fset   *token.FileSet
	file   *ast.File
	tf     *token.File
	lines  []string
	tokens map[int]string // offset -> the token's text
}

func parseSource(path string) (*source, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, b, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	s := &source{path: path, fset: fset, file: file, tf: fset.File(file.Pos()), lines: strings.Split(string(b), "\n"), tokens: map[int]string{}}
	var sc scanner.Scanner
	sf := token.NewFileSet().AddFile(path, -1, len(b))
	sc.Init(sf, b, nil, 0)
	for {
		pos, tok, lit := sc.Scan()
		if tok == token.EOF {
			break
		}
		text := lit
		if tok.IsOperator() || tok.IsKeyword() {
			text = tok.String()
		}
		s.tokens[sf.Offset(pos)] = text
	}
	return s, nil
}

// key is "<path> <function> <TYPE> <line with «token»>".
func (s *source) key(m Mutant) (string, error) {
	if m.Line < 1 || m.Line > len(s.lines) {
		return "", fmt.Errorf("%s:%d: no such line", m.Path, m.Line)
	}
	off := int(s.tf.LineStart(m.Line)) - s.tf.Base() + m.Col - 1
	tok, found := s.tokens[off]
	if !found {
		return "", fmt.Errorf("%s:%d:%d: no token there (the source changed since the run?)", m.Path, m.Line, m.Col)
	}
	line := s.lines[m.Line-1]
	c := m.Col - 1
	marked := line[:c] + "«" + tok + "»" + line[c+len(tok):]
	return normalize(strings.Join([]string{m.Path, s.funcAt(s.tf.Pos(off)), m.Type, marked}, " ")), nil
}

// funcAt names the function declaration around pos: "Name", "(T).Name" or
// "(*T).Name"; "-" outside any.
func (s *source) funcAt(pos token.Pos) string {
	for _, d := range s.file.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || pos < fd.Pos() || pos >= fd.End() {
			continue
		}
		if fd.Recv == nil || len(fd.Recv.List) == 0 {
			return fd.Name.Name
		}
		return "(" + recvType(fd.Recv.List[0].Type) + ")." + fd.Name.Name
	}
	return "-"
}

func recvType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return "*" + recvType(t.X)
	case *ast.IndexExpr:
		return recvType(t.X)
	case *ast.IndexListExpr:
		return recvType(t.X)
	case *ast.Ident:
		return t.Name
	}
	return "?"
}
