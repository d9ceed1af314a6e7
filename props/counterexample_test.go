package props_test

import (
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"provideragent/props"
)

// recordingTB is a rapid.TB that records instead of failing, so a test can
// assert that rapid.Check finds (and shrinks) a counterexample.
type recordingTB struct {
	name   string
	mu     sync.Mutex
	failed bool
	lines  []string
}

var _ rapid.TB = (*recordingTB)(nil)

func (r *recordingTB) Helper()      {}
func (r *recordingTB) Name() string { return r.name }
func (r *recordingTB) Logf(format string, args ...any) {
	r.record(fmt.Sprintf(format, args...))
}
func (r *recordingTB) Log(args ...any) { r.record(fmt.Sprint(args...)) }
func (r *recordingTB) Skipf(format string, args ...any) {
	r.record("skip: " + fmt.Sprintf(format, args...))
}
func (r *recordingTB) Skip(args ...any) { r.record("skip: " + fmt.Sprint(args...)) }
func (r *recordingTB) SkipNow()         { r.record("skip") }
func (r *recordingTB) Errorf(format string, args ...any) {
	r.fail(fmt.Sprintf(format, args...))
}
func (r *recordingTB) Error(args ...any) { r.fail(fmt.Sprint(args...)) }
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fail(fmt.Sprintf(format, args...))
}
func (r *recordingTB) Fatal(args ...any) { r.fail(fmt.Sprint(args...)) }
func (r *recordingTB) FailNow()          { r.fail("") }
func (r *recordingTB) Fail()             { r.fail("") }
func (r *recordingTB) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recordingTB) record(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, s)
}

func (r *recordingTB) fail(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	if s != "" {
		r.lines = append(r.lines, s)
	}
}

// setRapidFlag sets a rapid command-line flag for the duration of the test
// unless the user set it explicitly.
func setRapidFlag(t *testing.T, name, value string) {
	t.Helper()
	explicit := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == name {
			explicit = true
		}
	})
	f := flag.Lookup(name)
	if explicit || f == nil {
		return
	}
	old := f.Value.String()
	if err := f.Value.Set(value); err != nil {
		t.Fatalf("flag.Set(%s, %s) = %v, want nil", name, value, err)
	}
	t.Cleanup(func() { _ = f.Value.Set(old) })
}

// shrinkTime bounds the time rapid spends minimising an expected
// counterexample (rapid's default is 30 s); -rapid.shrinktime overrides it.
const shrinkTime = 5 * time.Second

// expectCounterexample runs prop under rapid.Check and reports whether it
// failed with a single-writer violation; out is rapid's report followed by the log of the shrunk failing
// run (the counterexample). No fail file is written: the failure is the
// expected outcome, not a regression.
func expectCounterexample(t *testing.T, name string, prop func(*rapid.T)) (found bool, out string) {
	t.Helper()
	props.SkipSearchUnderRace(t)
	setRapidFlag(t, "rapid.nofailfile", "true")
	setRapidFlag(t, "rapid.shrinktime", shrinkTime.String())
	rec := &recordingTB{name: t.Name() + "/" + name}
	rapid.Check(rec, prop)
	var keep []string
	for _, l := range rec.lines {
		if !strings.HasPrefix(l, "[rapid] draw ") {
			keep = append(keep, l)
		}
	}
	out = strings.Join(keep, "\n")
	// Only a single-writer violation is the expected counterexample; a
	// harness error, a panic or a liveness failure is not.
	return rec.Failed() && (strings.Contains(out, "two writers") || strings.Contains(out, "both hold")), out
}
