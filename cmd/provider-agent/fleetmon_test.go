package main

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The fleet's process monitor: every workload runs under a supervisor whose
// argv holds the workload's command line, which begins with a marker and
// the workload's id (plainLine, durableLine). The monitor lists /proc every
// procScanEvery and keeps, for each supervisor process it found, when it
// was first and last seen: two copies of one workload seen at the same
// scan ran at the same time. A copy that lived between two scans is not
// seen; the copies of a failover or a move are seconds apart.

// procScanEvery is the monitor's period.
const procScanEvery = 200 * time.Millisecond

// procCopy is one supervisor process of a workload.
type procCopy struct {
	workload    string
	pid         int
	first, last time.Time
	gone        bool
}

// procMonitor scans /proc for the supervisors of marked workloads.
type procMonitor struct {
	marker []byte

	mu      sync.Mutex
	alive   map[int]*procCopy // by pid
	ignored map[int]bool      // pids that are not supervisors of ours
	copies  []*procCopy
	twice   []string // overlaps found, as sentences
	scans   int
	stop    chan struct{}
	done    chan struct{}
}

func startProcMonitor(tb testing.TB, marker string) *procMonitor {
	m := &procMonitor{marker: []byte(marker), alive: map[int]*procCopy{}, ignored: map[int]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go m.loop()
	tb.Cleanup(m.close)
	return m
}

func (m *procMonitor) close() {
	select {
	case <-m.stop:
	default:
		close(m.stop)
	}
	<-m.done
}

func (m *procMonitor) loop() {
	defer close(m.done)
	t := time.NewTicker(procScanEvery)
	defer t.Stop()
	for {
		m.scan(time.Now())
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
	}
}

// scan lists /proc once.
func (m *procMonitor) scan(now time.Time) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	present := make(map[int]bool, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		present[pid] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.scans++
	for pid, c := range m.alive {
		if present[pid] {
			c.last = now
			continue
		}
		c.gone = true
		delete(m.alive, pid)
	}
	for pid := range m.ignored {
		if !present[pid] {
			delete(m.ignored, pid)
		}
	}
	byWorkload := map[string]*procCopy{}
	for _, c := range m.alive {
		byWorkload[c.workload] = c
	}
	// A supervisor's child, between its fork and its exec of the
	// workload, has the supervisor's argv: it is no second copy.
	type candidate struct {
		id   string
		ppid int
	}
	found := map[int]candidate{}
	for pid := range present {
		if m.alive[pid] != nil || m.ignored[pid] {
			continue
		}
		id, ok := m.supervisorOf(pid)
		if !ok {
			m.ignored[pid] = true
			continue
		}
		found[pid] = candidate{id: id, ppid: parentOf(pid)}
	}
	for pid, cand := range found {
		if _, forked := found[cand.ppid]; forked || m.alive[cand.ppid] != nil {
			continue // not ignored: after its exec it is not a supervisor anyway
		}
		id := cand.id
		c := &procCopy{workload: id, pid: pid, first: now, last: now}
		if other := byWorkload[id]; other != nil {
			m.twice = append(m.twice, fmt.Sprintf("%s: supervisor %d (seen since %s) and %d at %s",
				id, other.pid, other.first.Format(time.StampMilli), pid, now.Format(time.StampMilli)))
		}
		byWorkload[id] = c
		m.alive[pid] = c
		m.copies = append(m.copies, c)
	}
}

// supervisorOf returns the workload whose supervisor pid is, if it is one:
// argv[0] the shim's, and a marked command line.
func (m *procMonitor) supervisorOf(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !bytes.HasPrefix(b, []byte(shimArgv0+"\x00")) {
		return "", false
	}
	i := bytes.Index(b, m.marker)
	if i < 0 {
		return "", false
	}
	rest := b[i+len(m.marker):]
	j := bytes.IndexByte(rest, ';')
	if j < 0 {
		return "", false
	}
	return string(rest[:j]), true
}

// parentOf is pid's parent (0 when it cannot be read).
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// shimArgv0 is the workload supervisor's argv[0] (backend.shimArgv0).
const shimArgv0 = "provider-agent-shim"

// twiceRun is every overlap seen so far.
func (m *procMonitor) twiceRun() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.twice)
}

// running is how many copies of each workload run now.
func (m *procMonitor) running() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for _, c := range m.alive {
		out[c.workload]++
	}
	return out
}

// copiesSeen is how many supervisor processes the monitor saw in all.
func (m *procMonitor) copiesSeen() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.copies)
}

// procSample is a process's CPU time and memory at one instant.
type procSample struct {
	at       time.Time
	cpu      time.Duration // user + system
	rss, hwm int64         // bytes: VmRSS, VmHWM (peak since start or the last resetPeak)
}

// clockTick is the kernel's USER_HZ, the unit of /proc/<pid>/stat's times.
const clockTick = 100

// sampleProc reads pid's CPU time (/proc/<pid>/stat) and memory
// (/proc/<pid>/status).
func sampleProc(pid int) (procSample, error) {
	s := procSample{at: time.Now()}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// The fields after the command's ")" (which may hold spaces): state is
	// the first, utime and stime the 12th and 13th.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return s, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	s.cpu = time.Duration(ut+st) * time.Second / clockTick
	st2, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, l := range strings.Split(string(st2), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "VmRSS":
			s.rss = kb << 10
		case "VmHWM":
			s.hwm = kb << 10
		}
	}
	return s, nil
}

// resetPeak resets pid's VmHWM to its current RSS (/proc/<pid>/clear_refs,
// "5"), so that a later sample's hwm is the peak since now.
func resetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// inMiB is bytes in MiB.
func inMiB(b int64) float64 { return float64(b) / (1 << 20) }
