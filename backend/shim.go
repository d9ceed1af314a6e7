package backend

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A Process backend does not start a workload itself: it starts its own
// binary again (/proc/self/exe) as a small supervisor, the shim, which
// starts the workload and stays its parent. The shim holds the read end of
// the backend's lifeline pipe, whose only write end the agent holds: when
// the agent dies, however it dies, the kernel closes that end, the shim
// reads EOF and SIGKILLs the whole tree. Pdeathsig alone cannot do this: it
// reaches one child, and a shell line's real workload is a grandchild.
//
// What "the whole tree" is depends on the backend's Containment. With a
// PID namespace the shim is its init (pid 1): every process the workload
// starts is in the namespace, kill(-1) reaches all of them and nothing
// else, and when the shim dies, SIGKILL included, the kernel kills them
// all before the shim's exit is reported. Without one the shim is a child
// subreaper, so every process the workload forks, double-forked setsid
// daemons included, stays below it and is found through /proc. With a
// cgroup the shim is born in the workload's cgroup, or joins it before it
// starts anything; the backend kills that cgroup whole when the shim was
// killed, and removes it when the shim has exited. When the agent died,
// the shim removes it itself on its way out.
//
// The protocol between the backend and the shim:
//   - environment shimEnv = "v4,<agent pid>,<stop grace in ns>,<token>,
//     <join: 0 or 1>,<uid or -1>,<gid or -1>,<hold: 0 or 1>,<log max
//     bytes>,<log keep>,<fsize bytes>,<the workload's cgroup directory or
//     empty>", and shimLogEnv = the log's path; with a log max the
//     workload's output goes through a pipe the shim copies to the log,
//     rotated (a holding shim copies fd 6, podman run's output); with an
//     fsize the workload's RLIMIT_FSIZE is set to it; the shim joins that cgroup
//     first when join is 1, and removes the variable from the workload's
//     environment; with a uid it starts the workload as that uid and gid,
//     without supplementary groups and with no_new_privs (no setuid
//     binary gives it more);
//   - argv = [shimArgv0, path, workload argv...]; with hold, [shimArgv0]:
//     the shim starts nothing and holds its PID namespace for a container
//     that joins it (see Podman);
//   - fd 3: the lifeline's read end (one pipe per backend: one descriptor
//     in the agent however many workloads run);
//   - fd 4: the handshake pipe's write end: "ok <workload pid>\n" once the
//     workload was exec'd (its pid as the agent's /proc names it), or
//     "error <reason>\n", then closed;
//   - fd 5: the backend's status pipe (shared, like the lifeline): when the
//     workload's main process has ended and the rest of its tree is dead,
//     the shim writes "<token> <wait status>\n" there and exits with the
//     shell's code for it (the status, or 128 + the signal). A PID
//     namespace's init cannot die by a signal it sends itself, so the
//     shim never mirrors a signal: a shim that died by a signal was killed;
//   - SIGTERM (or SIGINT) asks for a stop: the shim forwards SIGTERM to the
//     workload's tree and SIGKILLs it after the grace; a holding shim then
//     exits once its namespace is empty;
//   - SIGUSR1 tells a holding shim that its container ended: it kills what
//     is left in its namespace and exits.
const (
	shimEnv        = "PROVIDER_AGENT_SHIM"
	shimLogEnv     = "PROVIDER_AGENT_SHIM_LOG"
	shimArgv0      = "provider-agent-shim"
	shimLifelineFd = 3
	shimStartFd    = 4
	shimStatusFd   = 5
	// shimLogFd, for a holding shim with a log cap: the read end of the
	// pipe podman run's output (the container's, through the passthrough
	// log driver) goes to.
	shimLogFd = 6
)

// shimHooked is set when this binary called RunShimIfRequested: only then
// may a Process backend re-execute it as a shim.
var shimHooked atomic.Bool

// RunShimIfRequested must be called first thing in main, and in TestMain of
// every test binary that starts a Process backend: when the process is a
// workload supervisor a Process backend started, it runs the supervisor and
// exits; otherwise it returns at once, and records that this binary can be
// re-executed as one (NewProcess refuses to work without it).
func RunShimIfRequested() {
	v, ok := os.LookupEnv(shimEnv)
	if !ok {
		shimHooked.Store(true)
		return
	}
	if v == probeEnvValue || strings.HasPrefix(v, probeEnvValue+",") {
		os.Exit(runProbe(v))
	}
	os.Exit(runShim(v, os.Args))
}

// shimConfig is what the backend passes in shimEnv.
type shimConfig struct {
	agent  int
	grace  time.Duration
	token  uint64 // names this shim's line on the status pipe
	join   bool   // join cgroup (else it was born there)
	uid    int64  // run the workload as uid:gid; -1: as the shim's
	gid    int64
	hold   bool   // start nothing: hold the PID namespace for a container
	cgroup string // the workload's cgroup directory; "" for none
	// The workload's output: copied from a pipe to logPath, rotated at
	// logMax bytes keeping logKeep parts (0: the workload writes to the
	// shim's stdout itself). A holding shim copies fd shimLogFd.
	logMax  int64
	logKeep int
	// fsize is the workload's RLIMIT_FSIZE in bytes (0: unchanged).
	fsize   int64
	logPath string
}

func flag01(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (c shimConfig) env() string {
	return fmt.Sprintf("%s=v4,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%s", shimEnv, c.agent, int64(c.grace), c.token, flag01(c.join),
		c.uid, c.gid, flag01(c.hold), c.logMax, c.logKeep, c.fsize, c.cgroup)
}

// logEnv is the log path's variable ("" when the shim copies no log).
func (c shimConfig) logEnv() string {
	if c.logPath == "" {
		return ""
	}
	return shimLogEnv + "=" + c.logPath
}

func parseShimConfig(v string) (shimConfig, error) {
	bad := fmt.Errorf("%s = %q: want v4,<pid>,<grace ns>,<token>,<join 0|1>,<uid or -1>,<gid or -1>,<hold 0|1>,"+
		"<log max bytes>,<log keep>,<fsize bytes>,<cgroup dir or empty>", shimEnv, v)
	f := strings.SplitN(v, ",", 12)
	if len(f) != 12 || f[0] != "v4" || (f[4] != "0" && f[4] != "1") || (f[4] == "1" && f[11] == "") || (f[7] != "0" && f[7] != "1") {
		return shimConfig{}, bad
	}
	pid, err1 := strconv.Atoi(f[1])
	grace, err2 := strconv.ParseInt(f[2], 10, 64)
	token, err3 := strconv.ParseUint(f[3], 10, 64)
	uid, err4 := strconv.ParseInt(f[5], 10, 64)
	gid, err5 := strconv.ParseInt(f[6], 10, 64)
	logMax, err6 := strconv.ParseInt(f[8], 10, 64)
	logKeep, err7 := strconv.Atoi(f[9])
	fsize, err8 := strconv.ParseInt(f[10], 10, 64)
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7, err8); err != nil || pid <= 1 || grace <= 0 ||
		uid < -1 || uid > 1<<32-2 || gid < -1 || gid > 1<<32-2 || (uid < 0) != (gid < 0) || logMax < 0 || logKeep < 0 || fsize < 0 {
		return shimConfig{}, bad
	}
	return shimConfig{agent: pid, grace: time.Duration(grace), token: token, join: f[4] == "1",
		uid: uid, gid: gid, hold: f[7] == "1", logMax: logMax, logKeep: logKeep, fsize: fsize, cgroup: f[11]}, nil
}

// shimNote writes one line of the shim's own to its stderr (the workload's
// log), best effort.
func shimNote(format string, args ...any) {
	_, _ = fmt.Fprintf(os.Stderr, "=== provider-agent shim: "+format+"\n", args...)
}

// runShim is the shim's main; it returns the shim's exit code.
func runShim(v string, args []string) int {
	cfg, err := parseShimConfig(v)
	cfg.logPath = os.Getenv(shimLogEnv)
	if cfg.logMax > 0 && cfg.logPath == "" {
		err = fmt.Errorf("%s: a log max without %s", shimEnv, shimLogEnv)
	}
	if err != nil || (len(args) < 3 && !cfg.hold) || !isPipe(shimLifelineFd) || !isPipe(shimStartFd) || !isPipe(shimStatusFd) {
		// Not started by a backend (someone set the variable by hand).
		fmt.Fprintf(os.Stderr, "provider-agent: %s is set but this process was not started as a workload supervisor (%v)\n", shimEnv, err)
		return 2
	}
	// None of the pipes may reach the workload.
	syscall.CloseOnExec(shimLifelineFd)
	syscall.CloseOnExec(shimStartFd)
	syscall.CloseOnExec(shimStatusFd)
	// Signals the shim handles: stop requests, and everything whose Go
	// default would kill the shim without its tree. Handled (not ignored)
	// signals are reset to their defaults in the workload at exec.
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGCHLD)
	runtime.GOMAXPROCS(1)

	started := func(msg string) {
		_, _ = syscall.Write(shimStartFd, []byte(msg+"\n"))
		_ = syscall.Close(shimStartFd)
	}
	t := newShimTree()
	if !t.nsInit {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			started("error set child subreaper: " + err.Error())
			return 1
		}
	}
	if cfg.join {
		if err := joinCgroup(filepath.Join(cfg.cgroup, "cgroup.procs")); err != nil {
			started("error " + err.Error())
			return 1
		}
	}
	// The agent may have died between forking the shim and now: then the
	// shim was reparented and the lifeline is already at EOF. Start
	// nothing.
	lifeline := watchLifeline(shimLifelineFd)
	if t.parent() != cfg.agent {
		started("error the agent is gone")
		return 1
	}
	if cfg.hold {
		if !t.nsInit {
			started("error a holding supervisor needs a PID namespace")
			return 1
		}
		// A container sees this process as its pid 1: nothing of it (its
		// root, which is the host's, its descriptors) may be reachable
		// through /proc, whatever user the container runs as.
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			started("error set not dumpable: " + err.Error())
			return 1
		}
		var logDone chan struct{}
		if cfg.logMax > 0 && isPipe(shimLogFd) {
			syscall.CloseOnExec(shimLogFd)
			l, err := openRotatingLog(cfg.logPath, cfg.logMax, cfg.logKeep, true)
			if err != nil {
				started("error open log: " + err.Error())
				return 1
			}
			logDone = make(chan struct{})
			go copyLog(l, os.NewFile(shimLogFd, "podman-output"), logDone)
		}
		started("ok " + strconv.Itoa(t.self))
		debug.FreeOSMemory()
		ws := superviseHold(cfg, sigs, lifeline)
		if logDone != nil {
			drainLog(logDone, 2*time.Second)
		}
		_, _ = syscall.Write(shimStatusFd, []byte(fmt.Sprintf("%d %d\n", cfg.token, uint32(ws))))
		return ws.ExitStatus()
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, shimEnv+"=") && !strings.HasPrefix(kv, shimLogEnv+"=") {
			env = append(env, kv)
		}
	}
	path, argv := args[1], args[2:]
	sys := &syscall.SysProcAttr{Setpgid: true}
	if cfg.uid >= 0 {
		sys.Credential = &syscall.Credential{Uid: uint32(cfg.uid), Gid: uint32(cfg.gid), Groups: []uint32{}}
		// no_new_privs is a property of the thread that forks: set it on
		// this one, and fork from it.
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			started("error set no_new_privs: " + err.Error())
			return 1
		}
	}
	files := []uintptr{0, 1, 2}
	var logDone chan struct{}
	var logW *os.File
	if cfg.logMax > 0 {
		r, w, err := os.Pipe()
		if err != nil {
			started("error log pipe: " + err.Error())
			return 1
		}
		l, err := openRotatingLog(cfg.logPath, cfg.logMax, cfg.logKeep, true)
		if err != nil {
			started("error open log: " + err.Error())
			return 1
		}
		files, logW = []uintptr{0, w.Fd(), w.Fd()}, w
		logDone = make(chan struct{})
		go copyLog(l, r, logDone)
	}
	if cfg.fsize > 0 {
		// No file of the workload grows past it (the directory cap's
		// per-file bound; the backend's watchdog bounds them together).
		// The shim's own writes stay within the log cap; SIGXFSZ is
		// ignored, here and so in the workload, which gets EFBIG.
		signal.Ignore(syscall.SIGXFSZ)
		lim := max(cfg.fsize, cfg.logMax)
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: uint64(lim), Max: uint64(lim)}); err != nil {
			started("error set RLIMIT_FSIZE: " + err.Error())
			return 1
		}
	}
	main, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   env,
		Files: files,
		Sys:   sys,
	})
	if logW != nil {
		logW.Close() // the workload's copy is the only write end left
	}
	if err != nil {
		started("error " + (&os.PathError{Op: "fork/exec", Path: path, Err: err}).Error())
		return 127
	}
	started("ok " + strconv.Itoa(t.agentPid(main)))
	debug.FreeOSMemory()
	ws := superviseShim(cfg, t, main, sigs, lifeline)
	if logDone != nil {
		// Everything the tree wrote is in the log before its end line.
		drainLog(logDone, 2*time.Second)
	}
	// The exact status for the backend, then the shell's code for it.
	_, _ = syscall.Write(shimStatusFd, []byte(fmt.Sprintf("%d %d\n", cfg.token, uint32(ws))))
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// shimTree is the set of processes a shim is responsible for: everything
// in its PID namespace when it is the namespace's init, else everything
// below it.
type shimTree struct {
	// nsInit: the shim is pid 1 of its own PID namespace. Only then is
	// kill(-1) the workload's tree (elsewhere it is every process the
	// agent's user may signal), and only then does /proc, which shows the
	// agent's namespace, name processes by other numbers than the shim's.
	nsInit bool
	self   int // the shim's pid as /proc names it
}

func newShimTree() shimTree {
	t := shimTree{nsInit: os.Getpid() == 1, self: os.Getpid()}
	if t.nsInit {
		// /proc/self resolves in the namespace /proc was mounted in: the
		// agent's.
		if s, err := os.Readlink("/proc/self"); err == nil {
			if pid, err := strconv.Atoi(s); err == nil {
				t.self = pid
			}
		}
	}
	return t
}

// parent returns the shim's parent's pid as the agent knows it.
func (t shimTree) parent() int {
	if !t.nsInit {
		return os.Getppid()
	}
	if st, ok := readStat(t.self); ok {
		return st.ppid
	}
	return 0
}

// agentPid returns the pid of the shim's child main as the agent's /proc
// names it (main itself when that cannot be found).
func (t shimTree) agentPid(main int) int {
	if !t.nsInit {
		return main
	}
	// main is the shim's only child right after the fork.
	if kids := childrenOf(t.self); len(kids) == 1 {
		return kids[0]
	}
	return main
}

// signal sends sig to every process of the tree: the main process's group
// at once, then every other process, each once.
func (t shimTree) signal(main int, sig syscall.Signal) {
	if t.nsInit {
		_ = syscall.Kill(-1, sig)
		return
	}
	_ = syscall.Kill(-main, sig)
	for _, pid := range descendants(t.self) {
		if pg, err := syscall.Getpgid(pid); err == nil && pg == main {
			continue
		}
		_ = syscall.Kill(pid, sig)
	}
}

// superviseShim waits for the workload's main process, forwards stops,
// kills the tree when the main process ends or the agent dies, and
// returns the main process's wait status.
func superviseShim(cfg shimConfig, t shimTree, main int, sigs <-chan os.Signal, lifeline <-chan struct{}) syscall.WaitStatus {
	var (
		ws       syscall.WaitStatus
		mainDone bool
		stopping bool
		escalate <-chan time.Time
	)
	reap := func() {
		for {
			var st syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &st, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if pid <= 0 {
				return
			}
			if pid == main {
				ws, mainDone = st, true
			}
		}
	}
	// SIGCHLD notifications coalesce; this backstop reaps anyway.
	backstop := time.NewTicker(time.Second)
	defer backstop.Stop()
	for !mainDone {
		select {
		case <-lifeline:
			n := t.kill(main, true)
			shimNote("the agent died: killed the workload's %d processes", n)
			if cfg.cgroup != "" {
				leaveCgroup(cfg.cgroup)
			}
			os.Exit(137)
		case s := <-sigs:
			switch s {
			case syscall.SIGCHLD:
				reap()
			case syscall.SIGTERM, syscall.SIGINT:
				if !stopping {
					stopping = true
					t.signal(main, syscall.SIGTERM)
					escalate = time.After(cfg.grace)
				}
			}
		case <-escalate:
			escalate = nil
			shimNote("the workload ignored SIGTERM for %s: SIGKILL", cfg.grace)
			t.signal(main, syscall.SIGKILL)
		case <-backstop.C:
			reap()
		}
	}
	// What the main process left behind goes with it.
	t.kill(main, false)
	return ws
}

// kill SIGKILLs everything in the tree and reaps it, until the shim has
// no child left: as init or as a subreaper it inherits every orphan of the
// tree, so no child means no process left. The main process's group is
// killed at once too while main is not reaped yet (after that its number
// may be reused). It returns how many processes it signalled (as init:
// how many it reaped).
func (t shimTree) kill(main int, mainUnreaped bool) int {
	n := 0
	if mainUnreaped && !t.nsInit {
		_ = syscall.Kill(-main, syscall.SIGKILL)
	}
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		if t.nsInit {
			_ = syscall.Kill(-1, syscall.SIGKILL)
		} else {
			n += killDescendants(t.self, 1)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if errors.Is(err, syscall.ECHILD) {
				return n
			}
			if pid <= 0 {
				break
			}
			if t.nsInit {
				n++
			}
		}
		time.Sleep(pause)
	}
}

// superviseHold is superviseShim for a holding shim (the init of the PID
// namespace a container joined): it reaps what is reparented to it,
// forwards a stop to every process of the namespace (SIGKILL after the
// grace) and returns once the namespace holds nothing else; when the
// container ended (SIGUSR1) it kills what is left at once; when the agent
// dies it kills everything and exits.
func superviseHold(cfg shimConfig, sigs <-chan os.Signal, lifeline <-chan struct{}) syscall.WaitStatus {
	var (
		ending   bool // stop asked, or the container ended
		escalate <-chan time.Time
	)
	reap := func() {
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if pid <= 0 {
				return
			}
		}
	}
	// kill(-1, 0) from the namespace's init fails with ESRCH once no other
	// process is left in it (zombies of the container's runtime count as
	// processes until their parent reaps them).
	empty := func() bool { return errors.Is(syscall.Kill(-1, 0), syscall.ESRCH) }
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-lifeline:
			// The container's processes are not the holder's children (the
			// runtime's are), and its own exit kills what this misses.
			_ = syscall.Kill(-1, syscall.SIGKILL)
			shimNote("the agent died: killed the container's processes")
			if cfg.cgroup != "" {
				leaveCgroup(cfg.cgroup)
			}
			os.Exit(137)
		case s := <-sigs:
			switch s {
			case syscall.SIGCHLD:
				reap()
			case syscall.SIGTERM, syscall.SIGINT:
				if !ending {
					ending = true
					_ = syscall.Kill(-1, syscall.SIGTERM)
					escalate = time.After(cfg.grace)
					tick.Reset(10 * time.Millisecond)
				}
			case syscall.SIGUSR1:
				ending, escalate = true, nil
				_ = syscall.Kill(-1, syscall.SIGKILL)
				tick.Reset(10 * time.Millisecond)
			}
		case <-escalate:
			escalate = nil
			shimNote("the container ignored SIGTERM for %s: SIGKILL", cfg.grace)
			_ = syscall.Kill(-1, syscall.SIGKILL)
		case <-tick.C:
			reap()
		}
		if ending && empty() {
			reap()
			return 0
		}
	}
}

// leaveCgroup removes the workload's cgroup dir, which holds only the
// shim now, and the backend's directory above it if that is empty (the
// last shim out removes it), so that a dead agent leaves no cgroup behind.
// The shim moves itself to the cgroup the agent ran in first: a cgroup
// with a process in it cannot be removed. Best effort: a restarted agent's
// KillLeftovers removes what is left.
func leaveCgroup(dir string) {
	tree := filepath.Dir(dir)
	if joinCgroup(filepath.Join(filepath.Dir(tree), "cgroup.procs")) != nil {
		return
	}
	_ = os.Remove(dir)
	_ = os.Remove(tree)
}

// watchLifeline returns a channel closed when no process holds the
// lifeline's write end any more: the agent is dead.
func watchLifeline(fd int) <-chan struct{} {
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		buf := make([]byte, 64)
		for {
			_, err := unix.Poll(fds, -1)
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOMEM) {
				if !errors.Is(err, unix.EINTR) {
					time.Sleep(10 * time.Millisecond)
				}
				continue
			}
			if err != nil {
				return
			}
			re := fds[0].Revents
			if re&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				return
			}
			if re&unix.POLLIN != 0 {
				// Nobody writes to the lifeline; a read of 0 bytes is EOF.
				n, err := unix.Read(fd, buf)
				if n == 0 && err == nil {
					return
				}
			}
		}
	}()
	return gone
}

// isPipe reports whether fd is an open pipe.
func isPipe(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}
