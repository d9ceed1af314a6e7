package backend

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A cgroup holds every process of one workload: its supervisor joins it
// before it starts the workload, and every process forked below inherits
// it, whatever it does to its environment, session or process group. An
// unprivileged process cannot leave it (moving needs write access to a
// common ancestor, which only the agent's user has: isolated workloads run
// as another user). So a cgroup can be killed whole, and what a crashed
// agent left is found by walking its directory, not by a tag a workload can
// drop.
//
// Two kernels' ways are supported: cgroup v2 (cgroup.kill, since Linux
// 5.14; freeze, kill each, thaw before that) and the v1 freezer hierarchy
// (freeze, kill each, thaw). The cgroups of one backend live under
// <the agent's own cgroup>/provider-agent-<marker>/, one per start
// ("w<n>-<log name>"), a directory that exists only while it holds one:
// the agent's own cgroup is the one a service manager delegates to it
// (systemd: Delegate=yes), and root may write anywhere.

// cgroupBasePrefix starts the name of a backend's cgroup directory.
const cgroupBasePrefix = "provider-agent-"

// cgroupTree is a backend's cgroup directory in one hierarchy.
type cgroupTree struct {
	dir     string // <mount>/<agent's cgroup>/provider-agent-<marker>
	version int    // 1 (freezer) or 2
}

// cgroupGroup is the cgroup of one workload start.
type cgroupGroup struct {
	dir     string
	version int
}

// ownCgroupDirs returns the directory of this process's own cgroup in the
// cgroup v2 hierarchy and in the v1 freezer hierarchy ("" for one that is
// not mounted or not found), from /proc/self/cgroup and
// /proc/self/mountinfo.
func ownCgroupDirs() (v2, v1freezer string) {
	paths := map[string]string{} // "" for v2, "freezer" for v1
	if data, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.SplitN(line, ":", 3)
			if len(f) != 3 {
				continue
			}
			switch {
			case f[0] == "0" && f[1] == "":
				paths[""] = f[2]
			case hasItem(f[1], "freezer"):
				paths["freezer"] = f[2]
			}
		}
	}
	mf, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", ""
	}
	defer mf.Close()
	sc := bufio.NewScanner(mf)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 {
			continue
		}
		root, mnt := unescapeMount(a[3]), unescapeMount(a[4])
		switch {
		case b[0] == "cgroup2" && v2 == "":
			if p, ok := paths[""]; ok {
				v2 = cgroupDirIn(mnt, root, p)
			}
		case b[0] == "cgroup" && v1freezer == "" && hasItem(b[2], "freezer"):
			if p, ok := paths["freezer"]; ok {
				v1freezer = cgroupDirIn(mnt, root, p)
			}
		}
	}
	return v2, v1freezer
}

// cgroupDirIn maps cgroup path p (as /proc/self/cgroup shows it) to a
// directory of the hierarchy mounted at mnt whose root is root; "" when
// the mount does not show it.
func cgroupDirIn(mnt, root, p string) string {
	rel, ok := strings.CutPrefix(p, root)
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/") && root != "/") {
		return ""
	}
	dir := filepath.Join(mnt, rel)
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err != nil {
		return ""
	}
	return dir
}

// hasItem reports whether the comma-separated list holds item.
func hasItem(list, item string) bool {
	for _, s := range strings.Split(list, ",") {
		if s == item {
			return true
		}
	}
	return false
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupTrees returns the backend directories for marker in every
// hierarchy this process can see, v2 first. They may not exist.
func cgroupTrees(marker string) []cgroupTree {
	v2, v1 := ownCgroupDirs()
	var out []cgroupTree
	if v2 != "" {
		out = append(out, cgroupTree{dir: filepath.Join(v2, cgroupBasePrefix+marker), version: 2})
	}
	if v1 != "" {
		out = append(out, cgroupTree{dir: filepath.Join(v1, cgroupBasePrefix+marker), version: 1})
	}
	return out
}

// create makes the tree's directory (and checks that it is a cgroup).
func (t cgroupTree) create() error {
	if err := os.Mkdir(t.dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if _, err := os.Stat(filepath.Join(t.dir, "cgroup.procs")); err != nil {
		return fmt.Errorf("%s is not a cgroup: %w", t.dir, err)
	}
	return nil
}

// newGroup makes the cgroup of one start, and the tree's directory if it
// is not there: the tree exists only while it holds a workload's cgroup,
// so an agent killed while it ran nothing leaves no directory behind.
func (t cgroupTree) newGroup(name string) (*cgroupGroup, error) {
	g := &cgroupGroup{dir: filepath.Join(t.dir, name), version: t.version}
	var err error
	// Twice: the last workload's exit may remove the tree in between.
	for range 2 {
		if err = t.create(); err != nil {
			continue
		}
		if err = os.Mkdir(g.dir, 0o755); !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", g.dir, err)
	}
	return g, nil
}

// groups lists the tree's workload cgroups (none when it does not exist).
func (t cgroupTree) groups() []*cgroupGroup {
	ents, err := os.ReadDir(t.dir)
	if err != nil {
		return nil
	}
	var out []*cgroupGroup
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, &cgroupGroup{dir: filepath.Join(t.dir, e.Name()), version: t.version})
		}
	}
	return out
}

// remove removes the tree's directory if it holds no cgroup (best effort).
func (t cgroupTree) remove() { _ = os.Remove(t.dir) }

// procsFile is the file a process writes "0" to in order to join g.
func (g *cgroupGroup) procsFile() string { return filepath.Join(g.dir, "cgroup.procs") }

// pids lists the processes in g.
func (g *cgroupGroup) pids() []int {
	data, err := os.ReadFile(g.procsFile())
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// cgroupKillWait bounds how long kill waits for g to empty.
const cgroupKillWait = 10 * time.Second

// kill SIGKILLs every process in g, also those forked meanwhile, and waits
// (bounded) until g is empty. It returns how many processes g held.
func (g *cgroupGroup) kill() (int, error) {
	n := len(g.pids())
	if n == 0 {
		return 0, nil
	}
	var err error
	switch {
	case g.version == 2 && writeFile(filepath.Join(g.dir, "cgroup.kill"), "1") == nil:
		// The kernel kills the whole cgroup, forks racing included.
	case g.version == 2:
		err = g.freezeKill(filepath.Join(g.dir, "cgroup.freeze"), "1", "0", func() bool {
			return strings.Contains(readString(filepath.Join(g.dir, "cgroup.events")), "frozen 1")
		})
	default:
		err = g.freezeKill(filepath.Join(g.dir, "freezer.state"), "FROZEN", "THAWED", func() bool {
			return strings.TrimSpace(readString(filepath.Join(g.dir, "freezer.state"))) == "FROZEN"
		})
	}
	if err != nil {
		return n, fmt.Errorf("kill cgroup %s: %w", g.dir, err)
	}
	if !waitUntil(cgroupKillWait, func() bool { return len(g.pids()) == 0 }) {
		return n, fmt.Errorf("kill cgroup %s: processes %v still in it after %s", g.dir, g.pids(), cgroupKillWait)
	}
	return n, nil
}

// freezeKill freezes g (so nothing in it can fork), SIGKILLs every
// process in it and thaws it, after which they die. Without a freezer it
// kills what it lists until a listing is empty.
func (g *cgroupGroup) freezeKill(file, freeze, thaw string, frozen func() bool) error {
	if writeFile(file, freeze) != nil {
		for range 50 {
			pids := g.pids()
			if len(pids) == 0 {
				return nil
			}
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return nil
	}
	// Kill even if freezing did not finish in time: the thaw below lets the
	// signals land.
	waitUntil(time.Second, frozen)
	for _, pid := range g.pids() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return writeFile(file, thaw)
}

// remove removes g, which must be empty; a process that is still exiting
// makes rmdir fail with EBUSY for a moment, so it retries (bounded).
func (g *cgroupGroup) remove() error {
	var err error
	waitUntil(2*time.Second, func() bool {
		err = os.Remove(g.dir)
		return err == nil || errors.Is(err, fs.ErrNotExist) || !errors.Is(err, syscall.EBUSY)
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove cgroup %s: %w", g.dir, err)
	}
	return nil
}

// joinCgroup moves the calling process (all its threads) into the cgroup
// whose cgroup.procs file is procs. "0" names the writer in every PID
// namespace.
func joinCgroup(procs string) error {
	if err := writeFile(procs, "0"); err != nil {
		return fmt.Errorf("join cgroup: %w", err)
	}
	return nil
}

func writeFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func readString(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

// waitUntil polls cond (1 ms, doubling to 50 ms) until it holds or limit
// passed; it reports whether it held.
func waitUntil(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
}
