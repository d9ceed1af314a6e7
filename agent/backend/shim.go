package backend

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A Process backend does not start a workload itself: it starts its own
// binary again (/proc/self/exe) as a small supervisor, the shim, which
// starts the workload and stays its parent. The shim is a child subreaper,
// so every process the workload forks, including double-forked setsid
// daemons, stays below it. It holds the read end of the backend's lifeline
// pipe, whose only write end the agent holds: when the agent dies, however
// it dies, the kernel closes that end, the shim reads EOF and SIGKILLs the
// whole tree. Pdeathsig alone cannot do this: it reaches one child, and
// a shell line's real workload is a grandchild.
//
// The protocol between the backend and the shim:
//   - environment shimEnv = "v1,<agent pid>,<stop grace in ns>"; the shim
//     removes it from the workload's environment;
//   - argv = [shimArgv0, path, workload argv...];
//   - fd 3: the lifeline's read end (one pipe per backend: one descriptor
//     in the agent however many workloads run);
//   - fd 4: the handshake pipe's write end: "ok <workload pid>\n" once the
//     workload was exec'd, or "error <reason>\n", then closed;
//   - SIGTERM (or SIGINT) asks for a stop: the shim forwards SIGTERM to the
//     workload's tree and SIGKILLs it after the grace;
//   - the shim exits when the workload's main process has ended and the
//     rest of its tree is dead, with the main process's status: the same
//     exit code, or killed by the same signal.
const (
	shimEnv        = "PROVIDER_AGENT_SHIM"
	shimArgv0      = "provider-agent-shim"
	shimLifelineFd = 3
	shimStartFd    = 4
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
	os.Exit(runShim(v, os.Args))
}

// shimConfig is what the backend passes in shimEnv.
type shimConfig struct {
	agent int
	grace time.Duration
}

func (c shimConfig) env() string {
	return fmt.Sprintf("%s=v1,%d,%d", shimEnv, c.agent, int64(c.grace))
}

func parseShimConfig(v string) (shimConfig, error) {
	f := strings.Split(v, ",")
	if len(f) != 3 || f[0] != "v1" {
		return shimConfig{}, fmt.Errorf("%s = %q: want v1,<pid>,<grace ns>", shimEnv, v)
	}
	pid, err1 := strconv.Atoi(f[1])
	grace, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil || pid <= 1 || grace <= 0 {
		return shimConfig{}, fmt.Errorf("%s = %q: want v1,<pid>,<grace ns>", shimEnv, v)
	}
	return shimConfig{agent: pid, grace: time.Duration(grace)}, nil
}

// shimNote writes one line of the shim's own to its stderr (the workload's
// log), best effort.
func shimNote(format string, args ...any) {
	_, _ = fmt.Fprintf(os.Stderr, "=== provider-agent shim: "+format+"\n", args...)
}

// runShim is the shim's main; it returns the exit code for the cases where
// it does not mirror the workload's status itself.
func runShim(v string, args []string) int {
	cfg, err := parseShimConfig(v)
	if err != nil || len(args) < 3 || !isPipe(shimLifelineFd) || !isPipe(shimStartFd) {
		// Not started by a backend (someone set the variable by hand).
		fmt.Fprintf(os.Stderr, "provider-agent: %s is set but this process was not started as a workload supervisor (%v)\n", shimEnv, err)
		return 2
	}
	// Neither pipe may reach the workload.
	syscall.CloseOnExec(shimLifelineFd)
	syscall.CloseOnExec(shimStartFd)
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
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		started("error set child subreaper: " + err.Error())
		return 1
	}
	// The agent may have died between forking the shim and now: then the
	// shim was reparented and the lifeline is already at EOF. Start
	// nothing.
	lifeline := watchLifeline(shimLifelineFd)
	if os.Getppid() != cfg.agent {
		started("error the agent is gone")
		return 1
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, shimEnv+"=") {
			env = append(env, kv)
		}
	}
	path, argv := args[1], args[2:]
	main, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		started("error " + (&os.PathError{Op: "fork/exec", Path: path, Err: err}).Error())
		return 127
	}
	started("ok " + strconv.Itoa(main))
	debug.FreeOSMemory()
	return superviseShim(cfg, main, sigs, lifeline)
}

// superviseShim waits for the workload's main process, forwards stops,
// kills the tree when the main process ends or the agent dies, and exits
// like the main process.
func superviseShim(cfg shimConfig, main int, sigs <-chan os.Signal, lifeline <-chan struct{}) int {
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
			n := killTree(main, true)
			shimNote("the agent died: killed the workload's %d processes", n)
			return 137
		case s := <-sigs:
			switch s {
			case syscall.SIGCHLD:
				reap()
			case syscall.SIGTERM, syscall.SIGINT:
				if !stopping {
					stopping = true
					signalTree(main, syscall.SIGTERM)
					escalate = time.After(cfg.grace)
				}
			}
		case <-escalate:
			escalate = nil
			shimNote("the workload ignored SIGTERM for %s: SIGKILL", cfg.grace)
			signalTree(main, syscall.SIGKILL)
		case <-backstop.C:
			reap()
		}
	}
	// What the main process left behind goes with it.
	killTree(main, false)
	mirrorStatus(ws)
	return 0 // not reached
}

// signalTree sends sig to the workload's process group at once, then to
// every other process below the shim (setsid'ed daemons, processes that
// changed group), each once.
func signalTree(main int, sig syscall.Signal) {
	_ = syscall.Kill(-main, sig)
	for _, pid := range descendants(os.Getpid()) {
		if pg, err := syscall.Getpgid(pid); err == nil && pg == main {
			continue
		}
		_ = syscall.Kill(pid, sig)
	}
}

// killTree SIGKILLs everything below the shim and reaps it, until the shim
// has no child left: as a subreaper it inherits every orphan of the tree,
// so no child means no descendant. The main process's group is killed at
// once too while main is not reaped yet (after that its number may be
// reused). It returns how many processes it killed.
func killTree(main int, mainUnreaped bool) int {
	n := 0
	if mainUnreaped {
		_ = syscall.Kill(-main, syscall.SIGKILL)
	}
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		n += killDescendants(os.Getpid(), 1)
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
		}
		time.Sleep(pause)
	}
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

// mirrorStatus ends the shim with ws: the same exit code, or death by the
// same signal (core dumps off, so the shim leaves none).
func mirrorStatus(ws syscall.WaitStatus) {
	if !ws.Signaled() {
		os.Exit(ws.ExitStatus())
	}
	sig := ws.Signal()
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	// The default disposition, set directly: the Go runtime's handlers
	// would turn some signals (SIGQUIT, SIGABRT, SIGSEGV) into an exit
	// code. A zero struct sigaction is SIG_DFL with no flags and an empty
	// mask on every architecture.
	var act [8]uint64
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	set := uint64(1) << (uint(sig) - 1)
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_UNBLOCK, uintptr(unsafe.Pointer(&set)), 0, 8, 0, 0)
	_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), unix.Signal(sig))
	// A signal whose default is not to terminate (it cannot have killed
	// the workload, but be safe): the shell's convention.
	os.Exit(128 + int(sig))
}

// isPipe reports whether fd is an open pipe.
func isPipe(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}
