package backend

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// descendants returns the pids of every live process below root (children,
// their children, and so on), found through /proc: each task's
// /proc/<pid>/task/<tid>/children file, or, on kernels without it
// (CONFIG_PROC_CHILDREN unset), a scan of every /proc/<pid>/stat. Zombies
// are left out. The listing is a snapshot: callers that must leave nothing
// behind kill what it returns and list again.
func descendants(root int) []int {
	var out []int
	if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(os.Getpid()) + "/children"); err == nil {
		queue := []int{root}
		seen := map[int]bool{root: true}
		for len(queue) > 0 {
			pid := queue[0]
			queue = queue[1:]
			for _, c := range childrenOf(pid) {
				if seen[c] {
					continue
				}
				seen[c] = true
				queue = append(queue, c)
				if !isZombie(c) {
					out = append(out, c)
				}
			}
		}
		return out
	}
	// Fallback: one pass over /proc building the parent map.
	kids := map[int][]int{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	zombie := map[int]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := readStat(pid)
		if !ok {
			continue
		}
		kids[st.ppid] = append(kids[st.ppid], pid)
		zombie[pid] = st.state == 'Z'
	}
	queue := []int{root}
	seen := map[int]bool{root: true}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range kids[pid] {
			if seen[c] {
				continue
			}
			seen[c] = true
			queue = append(queue, c)
			if !zombie[c] {
				out = append(out, c)
			}
		}
	}
	return out
}

// childrenOf lists the children of every thread of pid.
func childrenOf(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		data, err := os.ReadFile(dir + "/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// procStat holds the fields of /proc/<pid>/stat this package needs.
type procStat struct {
	state byte
	ppid  int
	pgrp  int
}

// readStat parses /proc/<pid>/stat.
func readStat(pid int) (procStat, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state ppid pgrp ...
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return procStat{}, false
	}
	return procStat{state: f[0][0], ppid: ppid, pgrp: pgrp}, true
}

func isZombie(pid int) bool {
	st, ok := readStat(pid)
	return ok && st.state == 'Z'
}

// killDescendants SIGKILLs everything below root, listing again until a
// listing finds nothing alive or rounds listings were made. Processes
// being killed cannot fork any more, so a few rounds catch the children
// forked while the first listing was taken. It returns how many processes
// it signalled.
func killDescendants(root, rounds int) int {
	n := 0
	for range rounds {
		pids := descendants(root)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}
