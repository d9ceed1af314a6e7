package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// appendLoop is a workload command that appends "<unix ms> <node> <epoch>
// <copy>" to file every 20 ms, where copy is a random tag of this run of
// the command (a UUID from the kernel: /bin/sh has no $RANDOM, and $$ is a
// number in the workload's PID namespace): two writers show in the file to
// the millisecond, and which copy and epoch each was.
func appendLoop(file, node string) string {
	return fmt.Sprintf(`read -r id </proc/sys/kernel/random/uuid; while :; do echo "$(date +%%s%%3N) %s $PROVIDER_AGENT_EPOCH $id" >> %s; sleep 0.02; done`, node, file)
}

// writeLine is one line appendLoop wrote.
type writeLine struct {
	at    time.Time
	node  string
	epoch uint64
	copy  string
}

func readWrites(t *testing.T, file string) []writeLine {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []writeLine
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 {
			continue
		}
		ms, err1 := strconv.ParseInt(f[0], 10, 64)
		e, err2 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, writeLine{at: time.UnixMilli(ms), node: f[1], epoch: e, copy: f[3]})
	}
	return out
}

// lastWrite is the time of the last line written at epoch, zero when none
// was (every node runs the same command: the epoch tells who wrote).
func lastWrite(ws []writeLine, epoch uint64) time.Time {
	var last time.Time
	for _, w := range ws {
		if w.epoch == epoch && w.at.After(last) {
			last = w.at
		}
	}
	return last
}

// firstWrite is the time of the first line written at epoch, zero when
// none was.
func firstWrite(ws []writeLine, epoch uint64) time.Time {
	var first time.Time
	for _, w := range ws {
		if w.epoch == epoch && (first.IsZero() || w.at.Before(first)) {
			first = w.at
		}
	}
	return first
}

// copySpan is when one copy of the workload wrote: its first and last
// line and the longest pause between two of its lines.
type copySpan struct {
	copy        string
	epoch       uint64
	first, last time.Time
	longestGap  time.Duration
}

// copySpans is every copy's span, in the order the copies started.
func copySpans(ws []writeLine) []copySpan {
	idx := map[string]int{}
	var spans []copySpan
	for _, w := range ws {
		i, ok := idx[w.copy]
		if !ok {
			idx[w.copy] = len(spans)
			spans = append(spans, copySpan{copy: w.copy, epoch: w.epoch, first: w.at, last: w.at})
			continue
		}
		s := &spans[i]
		if gap := w.at.Sub(s.last); gap > s.longestGap {
			s.longestGap = gap
		}
		if w.at.Before(s.first) {
			s.first = w.at
		}
		if w.at.After(s.last) {
			s.last = w.at
		}
	}
	slices.SortFunc(spans, func(a, b copySpan) int { return a.first.Compare(b.first) })
	return spans
}

// checkOneCopyAtATime fails when two copies of the workload wrote to file
// at overlapping times; it returns the copies' spans.
func checkOneCopyAtATime(t *testing.T, file string) []copySpan {
	t.Helper()
	spans := copySpans(readWrites(t, file))
	if len(spans) == 0 {
		t.Errorf("no copy of the workload wrote to %s", file)
	}
	for i := 1; i < len(spans); i++ {
		prev, cur := spans[i-1], spans[i]
		if !cur.first.After(prev.last) {
			t.Errorf("two copies: %s (epoch %d) wrote until %s, %s (epoch %d) from %s",
				prev.copy, prev.epoch, prev.last.Format(time.StampMilli), cur.copy, cur.epoch, cur.first.Format(time.StampMilli))
		}
	}
	t.Logf("%d copies of the workload ran one after another", len(spans))
	return spans
}
