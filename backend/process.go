package backend

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"provideragent/internal/imagespec"
)

// ProcessConfig configures Process.
type ProcessConfig struct {
	// StopGrace is the time between SIGTERM and SIGKILL. Default 10s.
	StopGrace time.Duration
	// LogDir receives one append-only log file per workload
	// (<id>.log, stdout and stderr together). When "", output goes to
	// Output.
	LogDir string
	// Output receives the workloads' output when LogDir is "" (nil
	// discards it).
	Output io.Writer
	// BaseEnv is the environment every workload starts from; nil means the
	// agent's own (os.Environ()). Use an empty, non-nil slice to pass only
	// the PROVIDER_AGENT_* variables and the spec's Env.
	BaseEnv []string
	// Now is the clock stamped on exits. Default time.Now.
	Now func() time.Time
	// Containment says how each workload's processes are held together
	// (see ContainMode). Default ContainAuto; "" means the same.
	Containment ContainMode
	// Isolation says whether each workload runs as a user of its own (see
	// IsolationMode). Default IsolateUser; "" means the same.
	Isolation IsolationMode
	// WorkloadUser, when set (a user name or uid), is the user every
	// isolated workload runs as; "" gives each workload a uid of its own
	// from WorkloadUIDs (zero: DefaultWorkloadUIDs).
	WorkloadUser string
	WorkloadUIDs UIDRange
	// WorkloadDir holds the workloads' directories (working directory and
	// checkpoint directory), under a directory of this backend's. When
	// isolating, workload users must be able to reach it. "" means a
	// temporary directory, removed by Close.
	WorkloadDir string

	// Log caps each workload's log (LogDir): rotated at Log.MaxBytes,
	// Log.Keep parts kept. Zero: DefaultLogLimit is not applied; the
	// workload writes to the file itself, without a cap.
	Log LogLimit
	// Dirs bounds each workload's home and checkpoint directories (see
	// DirLimit). Zero: no bound.
	Dirs DirLimit

	// cgroupVersion, when not 0, restricts cgroups to that version (tests
	// of the v1 freezer on a host that has both).
	cgroupVersion int
}

// DefaultProcessConfig returns the defaults: a 10 s grace period, output
// discarded, containment auto, each workload isolated as a uid of its own
// in a temporary workload dir, logs and directories bounded
// (DefaultLogLimit, DefaultDirLimit).
func DefaultProcessConfig() ProcessConfig {
	return ProcessConfig{StopGrace: 10 * time.Second, Containment: ContainAuto, Isolation: IsolateUser,
		WorkloadUIDs: DefaultWorkloadUIDs, Log: DefaultLogLimit, Dirs: DefaultDirLimit}
}

// Validate checks the config, naming the bad field.
func (c ProcessConfig) Validate() error {
	if c.StopGrace <= 0 {
		return fmt.Errorf("backend: stop_grace = %s: must be > 0", c.StopGrace)
	}
	if err := c.Isolation.Validate(); err != nil {
		return err
	}
	if err := c.Log.Validate(); err != nil {
		return err
	}
	if err := c.Dirs.Validate(); err != nil {
		return err
	}
	if c.WorkloadUIDs != (UIDRange{}) {
		if err := c.WorkloadUIDs.Validate(); err != nil {
			return fmt.Errorf("backend: workload_uids: %w", err)
		}
	}
	return c.Containment.Validate()
}

// Process is the process backend. A dead agent cannot fence its workload,
// so no workload may outlive it, whatever its shape (a shell line, a
// pipeline, a double-forked daemon, a daemon that clears its environment):
// each workload runs under a supervisor process, the shim (see
// RunShimIfRequested), that starts the workload in its own process group
// and kills the workload's whole tree when the workload's main process
// ends, when a stop's grace runs out, or at once when the agent dies (EOF
// on the backend's lifeline pipe). The kernel holds the tree together
// (Containment): the shim is the init of the workload's PID namespace, so
// nothing of the workload survives the shim, and each workload has a
// cgroup, which the backend kills whole when a shim was killed. When
// LogDir is set, NewProcess also kills whatever a previous incarnation
// using the same LogDir left running (KillLeftovers).
type Process struct {
	cfg    ProcessConfig
	logger *slog.Logger

	mu     sync.Mutex
	procs  map[string]*proc
	closed bool
	wg     sync.WaitGroup // one per process waiter
	out    *lockedWriter  // shared by all processes when LogDir is ""

	// The lifeline: every shim holds the read end (one descriptor passed
	// at its start), the agent alone holds the write end and never writes.
	lifeR, lifeW *os.File

	// The status pipe: every shim holds the write end and writes its
	// workload's exact wait status there before it exits; readStatuses
	// hands each line to the waiter of that shim.
	statusR, statusW *os.File
	statuses         *statusBoard
	statusDone       chan struct{}
	tokens           atomic.Uint64

	contain *Containment
	iso     *Isolation
	dirs    *workdirs
	marker  string // PROVIDER_AGENT_BACKEND value; "" without LogDir
	queue   *exitQueue
	exits   chan Exit
	quit    chan struct{}
	qdone   chan struct{}
	closer  sync.Once

	diskDone  chan struct{}     // closed when watchDisk returned (nil: no watchdog)
	overLimit map[string]string // workload -> why its last run was killed over its disk limit
}

type proc struct {
	id      string
	log     string        // log file path; "" when output goes to cfg.Output
	started chan struct{} // closed once the start succeeded or failed
	done    chan struct{} // closed once the process was reaped (or the start failed)

	token  uint64       // its shim's status line
	status chan uint32  // receives that line's wait status
	group  *cgroupGroup // its cgroup; nil without one
	hold   bool         // a holding shim (Podman): no command, no log lines
	ns     *os.File     // a holding shim's PID namespace (/proc/<pid>/ns/pid)
	wd     workdir      // its directories and uid
	logIn  *os.File     // a holding shim's: podman run's output, to copy to the log

	// guarded by Process.mu
	epoch    uint64
	cmd      *exec.Cmd // the shim; nil until started
	wpid     int       // the workload's main process (its process group)
	startErr error
	stopping bool
	reason   string
	killer   *time.Timer
	diskNote string // set when the disk watchdog killed it
}

var _ Backend = (*Process)(nil)

// ErrNoShim means the running binary cannot be re-executed as a workload
// supervisor: its main (or TestMain) does not call RunShimIfRequested first.
var ErrNoShim = errors.New("backend: this binary does not call backend.RunShimIfRequested at the start of main")

// shimStopMargin is how long after the grace period the agent waits for a
// stopping shim (which escalates to SIGKILL itself at the grace) before it
// kills the shim's tree and the shim itself: the bound on a stop when the
// shim is stuck.
const shimStopMargin = 5 * time.Second

// shimStartTimeout bounds the wait for a shim's handshake.
const shimStartTimeout = time.Minute

// NewProcess returns a process backend. LogDir is created (mode 0700) if
// needed (a WARN says so when it exists readable by others: workload logs
// may hold secrets), and the processes an earlier backend on it left are
// killed. It resolves cfg.Containment on this host: an explicit mode that
// is not available is an error (ErrNoContainment); with auto, what is
// missing is logged as a WARN and reported by Containment. The binary
// must call RunShimIfRequested at the start of main (ErrNoShim).
func NewProcess(cfg ProcessConfig, logger *slog.Logger) (*Process, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !shimHooked.Load() {
		return nil, ErrNoShim
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var marker string
	if cfg.LogDir != "" {
		if err := os.MkdirAll(cfg.LogDir, 0o700); err != nil {
			return nil, fmt.Errorf("backend: log dir: %w", err)
		}
		if st, err := os.Stat(cfg.LogDir); err == nil && st.Mode().Perm()&0o077 != 0 {
			logger.Warn("workload log dir is open to group or others: workload logs may hold secrets; chmod 700 it",
				"log_dir", cfg.LogDir, "mode", fmt.Sprintf("%04o", st.Mode().Perm()))
		}
		m, err := markerFor(cfg.LogDir)
		if err != nil {
			return nil, err
		}
		marker = m
		if _, err := KillLeftovers(cfg.LogDir, logger); err != nil {
			return nil, err
		}
	}
	contain, err := detectContainment(cfg.Containment, marker, cfg.cgroupVersion)
	if err != nil {
		return nil, err
	}
	if contain.Warning != "" {
		logger.Warn("workloads are not fully contained: "+contain.Warning, "containment", contain.String())
	} else {
		logger.Info("workload containment", "containment", contain.String())
	}
	iso, dirs, err := detectIsolation(isolationConfig{mode: cfg.Isolation, user: cfg.WorkloadUser, uids: cfg.WorkloadUIDs,
		dir: cfg.WorkloadDir, label: marker})
	if err != nil {
		contain.close()
		return nil, err
	}
	if iso.Warning != "" {
		logger.Warn("workloads are not isolated: "+iso.Warning, "isolation", iso.String())
	} else {
		logger.Info("workload isolation", "isolation", iso.String())
	}
	r, w, err := os.Pipe()
	if err != nil {
		contain.close()
		dirs.close()
		return nil, fmt.Errorf("backend: lifeline: %w", err)
	}
	sr, sw, err := os.Pipe()
	if err != nil {
		r.Close()
		w.Close()
		contain.close()
		dirs.close()
		return nil, fmt.Errorf("backend: status pipe: %w", err)
	}
	b := &Process{
		cfg:        cfg,
		logger:     logger,
		procs:      map[string]*proc{},
		lifeR:      r,
		lifeW:      w,
		statusR:    sr,
		statusW:    sw,
		statuses:   &statusBoard{waiting: map[uint64]chan uint32{}},
		statusDone: make(chan struct{}),
		contain:    contain,
		iso:        iso,
		dirs:       dirs,
		queue:      newExitQueue(),
		exits:      make(chan Exit),
		quit:       make(chan struct{}),
		qdone:      make(chan struct{}),
		marker:     marker,
		overLimit:  map[string]string{},
	}
	if cfg.LogDir == "" && cfg.Output != nil {
		b.out = &lockedWriter{w: cfg.Output}
	}
	go b.dispatch()
	go b.readStatuses()
	if cfg.Dirs.on() {
		if b.cfg.Dirs.Interval <= 0 {
			b.cfg.Dirs.Interval = DefaultDirLimit.Interval
		}
		b.diskDone = make(chan struct{})
		go b.watchDisk()
	}
	return b, nil
}

// Containment reports how this backend contains its workloads (the agent
// shows it, and its warning, on /status).
func (b *Process) Containment() Containment {
	c := *b.contain
	c.tree = nil
	return c
}

// Isolation reports how this backend isolates its workloads (the agent
// shows it, and its warning, on /status).
func (b *Process) Isolation() Isolation { return *b.iso }

// LogPath returns the log file of a workload under LogDir ("" when output
// goes to the injected writer). IDs with characters other than letters,
// digits, '.', '_' and '-' get a hash suffix so that the name is safe and
// unique.
func (b *Process) LogPath(workloadID string) string {
	if b.cfg.LogDir == "" {
		return ""
	}
	return filepath.Join(b.cfg.LogDir, logName(workloadID))
}

// LogFile is the log file of workload id under dir, as a Process whose
// LogDir is dir names it (the CLI reads it while the agent is down).
func LogFile(dir, id string) string { return filepath.Join(dir, logName(id)) }

var _ Checkpointer = (*Process)(nil)

// CheckpointDir makes the checkpoint directory of workloadID's run at
// epoch as Start will (the workload's own user owns it, its parents are
// the agent's) and returns it with that user's ids.
func (b *Process) CheckpointDir(workloadID string, epoch uint64) (CheckpointDir, error) {
	if workloadID == "" || len(workloadID) > MaxWorkloadIDLen {
		return CheckpointDir{}, fmt.Errorf("checkpoint dir: workload id of %d bytes, want 1 to %d: %w", len(workloadID), MaxWorkloadIDLen, ErrBadSpec)
	}
	wd, err := b.dirs.prepare(strings.TrimSuffix(logName(workloadID), ".log"), epoch)
	if err != nil {
		return CheckpointDir{}, fmt.Errorf("checkpoint dir of %s: %w", workloadID, err)
	}
	d := CheckpointDir{Path: wd.checkpoint, UID: os.Geteuid(), GID: os.Getegid()}
	if b.dirs.isolate {
		d.UID, d.GID = int(wd.uid), int(wd.gid)
	}
	return d, nil
}

func logName(id string) string {
	safe := true
	var sb strings.Builder
	for i, r := range id {
		ok := r == '-' || r == '_' || (r == '.' && i > 0) ||
			('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9')
		if !ok {
			safe = false
			r = '_'
		}
		if sb.Len() < 64 {
			sb.WriteRune(r)
		}
	}
	name := sb.String()
	if !safe || len(id) > 64 {
		sum := sha256.Sum256([]byte(id))
		name += "-" + hex.EncodeToString(sum[:6])
	}
	return name + ".log"
}

// Start implements Backend. It returns once the workload's process was
// exec'd (or failed to be), without holding the backend's lock meanwhile.
func (b *Process) Start(ctx context.Context, spec StartSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if imagespec.Is(spec.Command) {
		return fmt.Errorf("start %s: the workload names a container image (%s), and backend.kind = process runs commands; "+
			"run it with backend.kind = podman: %w", spec.WorkloadID, spec.Command[min(1, len(spec.Command)-1)], ErrBadSpec)
	}
	return b.start(ctx, spec, false, nil)
}

// start starts spec's workload, or with hold a holding shim for it, which
// copies logIn (podman run's output; nil: none) to the workload's log.
func (b *Process) start(ctx context.Context, spec StartSpec, hold bool, logIn *os.File) error {
	if b.iso.refuse != nil {
		return fmt.Errorf("start %s: %w", spec.WorkloadID, b.iso.refuse)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("start %s: %w", spec.WorkloadID, err)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return fmt.Errorf("start %s: %w", spec.WorkloadID, ErrClosed)
	}
	if p, ok := b.procs[spec.WorkloadID]; ok {
		if p.stopping {
			b.mu.Unlock()
			// A stop is in progress: let it finish first.
			return fmt.Errorf("start %s: %w", spec.WorkloadID, ErrStopping)
		}
		if spec.Epoch > p.epoch {
			p.epoch = spec.Epoch
		}
		b.mu.Unlock()
		// Starting a workload that runs (or is being started) is a no-op
		// with the outcome of that start.
		select {
		case <-p.started:
		case <-ctx.Done():
			return fmt.Errorf("start %s: %w", spec.WorkloadID, ctx.Err())
		}
		b.mu.Lock()
		err := p.startErr
		b.mu.Unlock()
		return err
	}
	p := &proc{id: spec.WorkloadID, epoch: spec.Epoch, hold: hold, logIn: logIn, started: make(chan struct{}), done: make(chan struct{})}
	p.token, p.status = b.statuses.register(&b.tokens)
	b.procs[spec.WorkloadID] = p
	b.mu.Unlock()

	cmd, wpid, err := b.spawn(ctx, p, spec)

	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.statuses.drop(p.token)
		p.startErr = err
		if b.procs[p.id] == p {
			delete(b.procs, p.id)
		}
		close(p.started)
		close(p.done)
		return err
	}
	p.cmd, p.wpid = cmd, wpid
	close(p.started)
	b.wg.Add(1)
	go b.wait(p)
	b.logger.Info("workload started", "workload", p.id, "epoch", p.epoch, "pid", wpid, "shim_pid", cmd.Process.Pid)
	if p.stopping {
		// Stop was called while the shim was starting.
		b.signalStop(p)
	}
	return nil
}

// spawn starts the shim for spec and waits for its handshake. It returns
// the shim's command and the workload's pid.
func (b *Process) spawn(ctx context.Context, p *proc, spec StartSpec) (*exec.Cmd, int, error) {
	fail := func(err error) (*exec.Cmd, int, error) {
		if p.log != "" {
			appendLog(p.log, fmt.Sprintf(logMarker+"start failed: %v\n", err))
		}
		if p.group != nil {
			if _, kerr := p.group.kill(); kerr != nil {
				b.logger.Error("workload start failed and its cgroup could not be emptied", "workload", spec.WorkloadID, "err", kerr)
			}
			_ = p.group.remove()
			b.contain.tree.remove()
		}
		return nil, 0, fmt.Errorf("start %s: %w", spec.WorkloadID, err)
	}
	if b.cfg.LogDir != "" {
		p.log = b.LogPath(spec.WorkloadID)
	}
	name := strings.TrimSuffix(logName(spec.WorkloadID), ".log")
	wd, err := b.dirs.prepare(name, spec.Epoch)
	if err != nil {
		return fail(err)
	}
	p.wd = wd
	if b.cfg.Dirs.on() {
		if _, _, over := dirUsage(dirsOf(wd), b.cfg.Dirs); over != "" {
			return fail(fmt.Errorf("%s: %w", over, ErrDiskLimit))
		}
	}
	var path string
	if !p.hold {
		// Resolved here, against the agent's PATH, as exec.Command would,
		// so a missing binary is reported at once.
		if path, err = exec.LookPath(spec.Command[0]); err != nil {
			return fail(err)
		}
	}
	base := b.cfg.BaseEnv
	switch {
	case base != nil:
	case b.dirs.isolate:
		// Nothing of the agent's environment: it may hold secrets.
		base = []string{"PATH=" + defaultPath, "HOME=" + wd.home}
	default:
		base = os.Environ()
	}
	env := make([]string, 0, len(base)+len(spec.Env)+5)
	for _, kv := range base {
		if !strings.HasPrefix(kv, shimEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"PROVIDER_AGENT_WORKLOAD_ID="+spec.WorkloadID,
		fmt.Sprintf("PROVIDER_AGENT_EPOCH=%d", spec.Epoch),
		CheckpointDirEnv+"="+wd.checkpoint)
	env = append(env, spec.Env...)
	if b.marker != "" {
		// Last, so a spec cannot override it.
		env = append(env, MarkerEnv+"="+b.marker)
	}
	group, err := b.contain.newGroup("w" + strconv.FormatUint(p.token, 10) + "-" + strings.TrimSuffix(logName(spec.WorkloadID), ".log"))
	if err != nil {
		return fail(err)
	}
	p.group = group
	// Its own process group: signals meant for the agent's group (a
	// terminal's ^C) do not reach the workloads; the agent stops them.
	attr := &syscall.SysProcAttr{Setpgid: true}
	b.contain.Apply(attr)
	cgDir, join, err := b.contain.place(group, attr)
	if err != nil {
		return fail(err)
	}
	if cgDir != nil {
		defer cgDir.Close()
	}
	scfg := shimConfig{agent: os.Getpid(), grace: b.cfg.StopGrace, token: p.token, join: join, uid: -1, gid: -1, hold: p.hold}
	if p.log != "" && b.cfg.Log.MaxBytes > 0 && (!p.hold || p.logIn != nil) {
		scfg.logMax, scfg.logKeep, scfg.logPath = b.cfg.Log.MaxBytes, b.cfg.Log.Keep, p.log
	}
	if !p.hold {
		scfg.fsize = b.cfg.Dirs.MaxBytes
	}
	if b.dirs.isolate && !p.hold {
		scfg.uid, scfg.gid = int64(wd.uid), int64(wd.gid)
	}
	if group != nil {
		scfg.cgroup = group.dir
	}
	// The shim reads its settings from these and removes them.
	env = append(env, scfg.env())
	if le := scfg.logEnv(); le != "" {
		env = append(env, le)
	}

	hsR, hsW, err := os.Pipe()
	if err != nil {
		return fail(fmt.Errorf("handshake pipe: %w", err))
	}
	defer hsR.Close()
	args := []string{shimArgv0}
	if !p.hold {
		args = append(args, path)
		args = append(args, spec.Command...)
	}
	dir := spec.Dir
	if dir == "" {
		dir = wd.home
	}
	extra := []*os.File{b.lifeR, hsW, b.statusW}
	if scfg.logMax > 0 && p.logIn != nil {
		extra = append(extra, p.logIn) // fd shimLogFd
	}
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        args,
		Env:         env,
		Dir:         dir,
		ExtraFiles:  extra,
		SysProcAttr: attr,
	}
	if p.log != "" {
		f, err := os.OpenFile(p.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			hsW.Close()
			return fail(fmt.Errorf("open log: %w", err))
		}
		if !p.hold {
			fmt.Fprintf(f, logMarker+"start %s epoch %d at %s: %q\n",
				spec.WorkloadID, spec.Epoch, b.cfg.Now().UTC().Format(time.RFC3339), spec.Command)
		}
		cmd.Stdout, cmd.Stderr = f, f
		// The child has its own copy: do not hold one descriptor per
		// workload in the agent (10,000 workloads would exceed the limit).
		defer f.Close()
	} else if b.out != nil {
		// exec copies through a pipe and goroutine; Wait waits for it.
		cmd.Stdout, cmd.Stderr = b.out, b.out
	}
	err = cmd.Start()
	hsW.Close() // the shim's copy is the only write end left
	if err != nil {
		return fail(err)
	}
	msg, err := readHandshake(ctx, hsR)
	if err == nil {
		if rest, ok := strings.CutPrefix(msg, "ok "); ok {
			wpid, err := strconv.Atoi(rest)
			if err == nil && wpid > 1 && p.hold {
				// Opened before anything reaps the shim (its pid cannot
				// have been reused): the namespace a container joins is
				// this shim's, or, if it died meanwhile, a dead one that
				// no process can enter.
				if p.ns, err = os.Open(fmt.Sprintf("/proc/%d/ns/pid", cmd.Process.Pid)); err != nil {
					msg = "error holding supervisor's namespace: " + err.Error()
				}
			}
			if err == nil && wpid > 1 {
				return cmd, wpid, nil
			}
		}
		if rest, ok := strings.CutPrefix(msg, "error "); ok {
			err = errors.New(rest)
		} else {
			err = fmt.Errorf("workload supervisor: bad handshake %q", msg)
		}
	}
	// Nothing may stay behind a failed start.
	killDescendants(cmd.Process.Pid, 10)
	_ = cmd.Process.Kill()
	werr := cmd.Wait()
	if msg == "" && werr != nil {
		err = fmt.Errorf("%w (workload supervisor: %v)", err, werr)
	}
	return fail(err)
}

// readHandshake reads the shim's one line, bounded by ctx and
// shimStartTimeout.
func readHandshake(ctx context.Context, r *os.File) (string, error) {
	deadline := time.Now().Add(shimStartTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = r.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = r.SetReadDeadline(time.Now()) })
	defer stop()
	data, err := io.ReadAll(io.LimitReader(r, 4096))
	msg := strings.TrimSpace(string(data))
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return msg, fmt.Errorf("workload supervisor handshake: %w", err)
	}
	if msg == "" {
		return "", errors.New("workload supervisor exited before starting the workload")
	}
	return msg, nil
}

// wait owns one shim: it reaps it and reports the exit of the workload's
// main process, which the shim wrote on the status pipe. A shim that died
// by a signal was killed (it never dies by one itself): what it left is
// killed before the exit is reported, so a respawn never runs beside it.
func (b *Process) wait(p *proc) {
	defer b.wg.Done()
	err := p.cmd.Wait()
	e := Exit{WorkloadID: p.id, At: b.cfg.Now(), Code: -1}
	if st := p.cmd.ProcessState; st != nil {
		e.Code = st.ExitCode()
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = signalName(ws.Signal())
			b.killRemains(p, e.Signal)
		} else if ok {
			// The shim wrote the line before it exited; its reader may be a
			// moment behind.
			select {
			case raw := <-p.status:
				e.Code, e.Signal = statusOf(syscall.WaitStatus(raw))
			case <-time.After(statusWait):
				b.logger.Warn("workload supervisor exited without reporting the workload's status: reporting its own",
					"workload", p.id, "exit", e.Code)
			}
		}
	}
	b.statuses.drop(p.token)
	if p.group != nil {
		// Empty unless the shim was killed, but a cgroup is removed only
		// empty.
		if _, err := p.group.kill(); err != nil {
			b.logger.Error("could not empty the workload's cgroup", "workload", p.id, "err", err)
		}
		if err := p.group.remove(); err != nil {
			b.logger.Warn("could not remove the workload's cgroup", "workload", p.id, "err", err)
		}
		b.contain.tree.remove() // when it was the last
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		e.Err = err
	}
	b.mu.Lock()
	if p.killer != nil {
		p.killer.Stop()
	}
	e.Epoch, e.Stopped, e.Reason = p.epoch, p.stopping, p.reason
	if b.procs[p.id] == p {
		delete(b.procs, p.id)
	}
	b.mu.Unlock()
	if p.log != "" && !p.hold {
		note := ""
		if n := b.overLimitNote(p.id); n != "" {
			note = " (" + n + ")"
		} // a holding shim's note is the container's end line's (Podman.wait)
		appendLog(p.log, fmt.Sprintf(logMarker+"%s ended: %s%s\n", p.id, e, note))
	}
	if p.ns != nil {
		_ = p.ns.Close()
	}
	close(p.done)
	level := slog.LevelInfo
	if !e.Stopped {
		level = slog.LevelWarn
	}
	b.logger.Log(context.Background(), level, "workload exited", "workload", p.id, "epoch", e.Epoch, "exit", e.String())
	b.queue.push(e)
}

// statusWait bounds the wait for a shim's status line after its exit.
const statusWait = 5 * time.Second

// statusOf returns an Exit's Code and Signal for a wait status.
func statusOf(ws syscall.WaitStatus) (int, string) {
	if ws.Signaled() {
		return -1, signalName(ws.Signal())
	}
	return ws.ExitStatus(), ""
}

// killRemains kills what a killed shim left. In a PID namespace the
// kernel did it before the shim's exit was reported; a cgroup is killed
// whole; without either, the processes that still carry the backend's
// tag go (a process that cleared its environment and left the shim's
// tree escapes this last way: see Containment's warning).
func (b *Process) killRemains(p *proc, signal string) {
	n := 0
	if p.group != nil {
		k, err := p.group.kill()
		if err != nil {
			b.logger.Error("workload supervisor was killed and its workload's cgroup could not be emptied", "workload", p.id, "err", err)
		}
		n += k
	}
	if b.marker != "" {
		k, _ := killMarked(b.logger, MarkerEnv+"="+b.marker, "PROVIDER_AGENT_WORKLOAD_ID="+p.id)
		n += k
	}
	if n > 0 {
		b.logger.Warn("workload supervisor was killed: killed what it left", "workload", p.id, "signal", signal, "processes", n)
	}
}

// Stop implements Backend: it asks the workload's shim to stop it (SIGTERM
// to the workload's tree, SIGKILL after StopGrace, the shim's own
// escalation); if the shim itself has not exited StopGrace+5s later, the
// agent kills the tree and the shim.
func (b *Process) Stop(ctx context.Context, workloadID, reason string) error {
	b.mu.Lock()
	p, ok := b.procs[workloadID]
	if ok && !p.stopping {
		p.stopping, p.reason = true, reason
		b.logger.Info("stopping workload", "workload", workloadID, "reason", reason)
		if p.cmd != nil {
			b.signalStop(p)
		} // else Start signals it once the shim is up
	}
	b.mu.Unlock()
	if !ok {
		return nil
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", workloadID, ctx.Err())
	}
}

// signalStop sends the stop to p's shim and arms the fallback. b.mu held.
// The shim is signalled through its os.Process (a pidfd), never by a pid
// that might have been reused since it exited.
func (b *Process) signalStop(p *proc) {
	shim := p.cmd.Process
	_ = shim.Signal(syscall.SIGTERM)
	grace := b.cfg.StopGrace
	p.killer = time.AfterFunc(grace, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		select {
		case <-p.done:
			return
		default:
		}
		b.logger.Warn("workload ignored SIGTERM; its supervisor sends SIGKILL", "workload", p.id, "grace", grace)
		p.killer = time.AfterFunc(shimStopMargin, func() { b.killShim(p) })
	})
}

// killShim is the bounded fallback of a stop: the shim did not end
// StopGrace+shimStopMargin after SIGTERM (stopped, stuck, starved). Its
// descendants go first, while the shim still holds them, then the shim.
func (b *Process) killShim(p *proc) {
	shim := p.cmd.Process
	if shim.Signal(syscall.Signal(0)) != nil {
		return // already ended
	}
	n := killDescendants(shim.Pid, 10)
	if st, ok := readStat(p.wpid); ok && st.ppid == shim.Pid {
		// Not reaped yet, so the number is still the workload's group.
		_ = syscall.Kill(-p.wpid, syscall.SIGKILL)
	}
	_ = shim.Kill()
	if p.group != nil {
		k, _ := p.group.kill()
		n += k
	}
	b.logger.Error("workload supervisor did not stop the workload in time: killed it and its tree",
		"workload", p.id, "shim_pid", shim.Pid, "processes", n, "waited", b.cfg.StopGrace+shimStopMargin)
}

// holding returns a holding shim's PID namespace (a descriptor of the
// caller's, to close), directories and done channel; ok is false when
// workload id has no holding shim.
func (b *Process) holding(id string) (ns *os.File, wd workdir, done <-chan struct{}, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, found := b.procs[id]
	if !found || !p.hold || p.ns == nil {
		return nil, workdir{}, nil, false
	}
	fd, err := unix.FcntlInt(p.ns.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, workdir{}, nil, false
	}
	return os.NewFile(uintptr(fd), p.ns.Name()), p.wd, p.done, true
}

// release tells a holding shim that its container ended: it kills what
// is left in its namespace and exits. Until it has, a start of the same
// workload is refused (ErrStopping), as during a stop.
func (b *Process) release(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.procs[id]; ok && p.hold && p.cmd != nil {
		if !p.stopping {
			p.stopping, p.reason = true, "container ended"
		}
		_ = p.cmd.Process.Signal(syscall.SIGUSR1)
	}
}

// killHolder kills a holding shim that did not exit when released (the
// kernel then kills what is left in its namespace).
func (b *Process) killHolder(id string) {
	b.mu.Lock()
	p, ok := b.procs[id]
	b.mu.Unlock()
	if ok && p.hold && p.cmd != nil {
		b.killShim(p)
	}
}

// Running implements Backend.
func (b *Process) Running(workloadID string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.procs[workloadID]
	return ok
}

// Exits implements Backend.
func (b *Process) Exits() <-chan Exit { return b.exits }

// Close implements Backend: it refuses new starts, stops every workload
// (reason "backend closed"), waits for them and closes Exits.
func (b *Process) Close(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	ids := make([]string, 0, len(b.procs))
	for id := range b.procs {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	if err := stopAll(ctx, ids, b.Stop); err != nil {
		return err
	}
	b.wg.Wait()
	b.closer.Do(func() {
		close(b.quit)
		<-b.qdone
		if b.diskDone != nil {
			<-b.diskDone
		}
		// Every shim is gone: nothing reads the lifeline any more, and
		// nothing else holds the status pipe's write end.
		_ = b.lifeW.Close()
		_ = b.lifeR.Close()
		_ = b.statusW.Close()
		<-b.statusDone
		_ = b.statusR.Close()
		b.contain.close()
		b.dirs.close()
	})
	return nil
}

// readStatuses hands each shim's status line to its waiter, until every
// write end of the status pipe is closed (Close).
func (b *Process) readStatuses() {
	defer close(b.statusDone)
	sc := bufio.NewScanner(b.statusR)
	for sc.Scan() {
		tok, ws, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		token, err1 := strconv.ParseUint(tok, 10, 64)
		raw, err2 := strconv.ParseUint(ws, 10, 32)
		if err1 == nil && err2 == nil {
			b.statuses.deliver(token, uint32(raw))
		}
	}
}

// statusBoard routes status lines to the waiters of their shims.
type statusBoard struct {
	mu      sync.Mutex
	waiting map[uint64]chan uint32
}

// register returns a new token and the channel its line will arrive on.
func (s *statusBoard) register(seq *atomic.Uint64) (uint64, chan uint32) {
	token := seq.Add(1)
	ch := make(chan uint32, 1)
	s.mu.Lock()
	s.waiting[token] = ch
	s.mu.Unlock()
	return token, ch
}

func (s *statusBoard) deliver(token uint64, ws uint32) {
	s.mu.Lock()
	ch := s.waiting[token]
	delete(s.waiting, token)
	s.mu.Unlock()
	if ch != nil {
		ch <- ws // buffered, one line per token
	}
}

func (s *statusBoard) drop(token uint64) {
	s.mu.Lock()
	delete(s.waiting, token)
	s.mu.Unlock()
}

// dispatch forwards queued exits to the Exits channel so that process
// waiters never block on a slow reader.
func (b *Process) dispatch() {
	defer close(b.qdone)
	defer close(b.exits)
	for {
		e, ok := b.queue.pop()
		if !ok {
			select {
			case <-b.queue.notify:
				continue
			case <-b.quit:
				return
			}
		}
		select {
		case b.exits <- e:
		case <-b.quit:
			return
		}
	}
}

// exitQueue is an unbounded FIFO of exits.
type exitQueue struct {
	mu     sync.Mutex
	items  []Exit
	notify chan struct{}
}

func newExitQueue() *exitQueue { return &exitQueue{notify: make(chan struct{}, 1)} }

func (q *exitQueue) push(e Exit) {
	q.mu.Lock()
	q.items = append(q.items, e)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *exitQueue) pop() (Exit, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return Exit{}, false
	}
	e := q.items[0]
	q.items[0] = Exit{}
	q.items = q.items[1:]
	return e, true
}

// appendLog appends a line of the agent's own to a workload log, best effort.
func appendLog(path, line string) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	// A workload killed mid-line leaves its last line open: the backend's
	// line starts on a line of its own, or ExitReason, which reads lines
	// that start with logMarker, would not find it.
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			line = "\n" + line
		}
	}
	_, _ = f.WriteString(line)
	_ = f.Close()
}

// lockedWriter serialises writes of several processes to one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGABRT: "SIGABRT", syscall.SIGALRM: "SIGALRM", syscall.SIGBUS: "SIGBUS",
	syscall.SIGFPE: "SIGFPE", syscall.SIGHUP: "SIGHUP", syscall.SIGILL: "SIGILL",
	syscall.SIGINT: "SIGINT", syscall.SIGKILL: "SIGKILL", syscall.SIGPIPE: "SIGPIPE",
	syscall.SIGQUIT: "SIGQUIT", syscall.SIGSEGV: "SIGSEGV", syscall.SIGTERM: "SIGTERM",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2", syscall.SIGXCPU: "SIGXCPU",
}

func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}

// stopAll stops the workloads ids at once (reason "backend closed") with
// a backend's Stop and waits for every stop: Close of each backend.
func stopAll(ctx context.Context, ids []string, stop func(ctx context.Context, id, reason string) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = stop(ctx, id, "backend closed")
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close backend: %w", err)
	}
	return nil
}
