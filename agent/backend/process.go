package backend

import (
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
	"syscall"
	"time"
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
}

// DefaultProcessConfig returns the defaults: a 10 s grace period and output
// discarded.
func DefaultProcessConfig() ProcessConfig {
	return ProcessConfig{StopGrace: 10 * time.Second}
}

// Validate checks the config, naming the bad field.
func (c ProcessConfig) Validate() error {
	if c.StopGrace <= 0 {
		return fmt.Errorf("backend: stop_grace = %s: must be > 0", c.StopGrace)
	}
	return nil
}

// Process is the process backend. A dead agent cannot fence its workload,
// so no workload may outlive it, whatever its shape (a shell line, a
// pipeline, a double-forked daemon): each workload runs under a supervisor
// process, the shim (see RunShimIfRequested), that is a child subreaper,
// starts the workload in its own process group and kills the workload's
// whole tree when the workload's main process ends, when a stop's grace
// runs out, or at once when the agent dies (EOF on the backend's lifeline
// pipe). When LogDir is set, NewProcess also kills whatever a previous
// incarnation using the same LogDir left running (KillLeftovers), the
// second line of defence for a shim that was itself SIGKILLed.
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

	marker string // PROVIDER_AGENT_BACKEND value; "" without LogDir
	queue  *exitQueue
	exits  chan Exit
	quit   chan struct{}
	qdone  chan struct{}
	closer sync.Once
}

type proc struct {
	id      string
	log     string        // log file path; "" when output goes to cfg.Output
	started chan struct{} // closed once the start succeeded or failed
	done    chan struct{} // closed once the process was reaped (or the start failed)

	// guarded by Process.mu
	epoch    uint64
	cmd      *exec.Cmd // the shim; nil until started
	wpid     int       // the workload's main process (its process group)
	startErr error
	stopping bool
	reason   string
	killer   *time.Timer
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

// NewProcess returns a process backend. LogDir is created (mode 0750) if
// needed, and the processes an earlier backend on it left are killed. The
// binary must call RunShimIfRequested at the start of main (ErrNoShim).
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
		if err := os.MkdirAll(cfg.LogDir, 0o750); err != nil {
			return nil, fmt.Errorf("backend: log dir: %w", err)
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
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("backend: lifeline: %w", err)
	}
	b := &Process{
		cfg:    cfg,
		logger: logger,
		procs:  map[string]*proc{},
		lifeR:  r,
		lifeW:  w,
		queue:  newExitQueue(),
		exits:  make(chan Exit),
		quit:   make(chan struct{}),
		qdone:  make(chan struct{}),
		marker: marker,
	}
	if cfg.LogDir == "" && cfg.Output != nil {
		b.out = &lockedWriter{w: cfg.Output}
	}
	go b.dispatch()
	return b, nil
}

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
	p := &proc{id: spec.WorkloadID, epoch: spec.Epoch, started: make(chan struct{}), done: make(chan struct{})}
	b.procs[spec.WorkloadID] = p
	b.mu.Unlock()

	cmd, wpid, err := b.spawn(ctx, p, spec)

	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
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
		return nil, 0, fmt.Errorf("start %s: %w", spec.WorkloadID, err)
	}
	if b.cfg.LogDir != "" {
		p.log = b.LogPath(spec.WorkloadID)
	}
	// Resolved here, against the agent's PATH, as exec.Command would, so
	// a missing binary is reported at once.
	path, err := exec.LookPath(spec.Command[0])
	if err != nil {
		return fail(err)
	}
	base := b.cfg.BaseEnv
	if base == nil {
		base = os.Environ()
	}
	env := make([]string, 0, len(base)+len(spec.Env)+4)
	for _, kv := range base {
		if !strings.HasPrefix(kv, shimEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"PROVIDER_AGENT_WORKLOAD_ID="+spec.WorkloadID,
		fmt.Sprintf("PROVIDER_AGENT_EPOCH=%d", spec.Epoch))
	env = append(env, spec.Env...)
	if b.marker != "" {
		// Last, so a spec cannot override it.
		env = append(env, MarkerEnv+"="+b.marker)
	}
	// The shim reads its settings from this one and removes it.
	env = append(env, shimConfig{agent: os.Getpid(), grace: b.cfg.StopGrace}.env())

	hsR, hsW, err := os.Pipe()
	if err != nil {
		return fail(fmt.Errorf("handshake pipe: %w", err))
	}
	defer hsR.Close()
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe",
		Args:       append([]string{shimArgv0, path}, spec.Command...),
		Env:        env,
		Dir:        spec.Dir,
		ExtraFiles: []*os.File{b.lifeR, hsW},
		// Its own process group: signals meant for the agent's group (a
		// terminal's ^C) do not reach the workloads; the agent stops them.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if p.log != "" {
		f, err := os.OpenFile(p.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
		if err != nil {
			hsW.Close()
			return nil, 0, fmt.Errorf("start %s: open log: %w", spec.WorkloadID, err)
		}
		fmt.Fprintf(f, logMarker+"start %s epoch %d at %s: %q\n",
			spec.WorkloadID, spec.Epoch, b.cfg.Now().UTC().Format(time.RFC3339), spec.Command)
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
			if wpid, err := strconv.Atoi(rest); err == nil && wpid > 1 {
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

// wait owns one shim: it reaps it and reports the exit, which mirrors the
// workload's main process.
func (b *Process) wait(p *proc) {
	defer b.wg.Done()
	err := p.cmd.Wait()
	e := Exit{WorkloadID: p.id, At: b.cfg.Now(), Code: -1}
	if st := p.cmd.ProcessState; st != nil {
		e.Code = st.ExitCode()
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = signalName(ws.Signal())
			if ws.Signal() == syscall.SIGKILL && b.marker != "" {
				// The shim mirrors a SIGKILLed workload this way, but a
				// SIGKILLed shim (OOM killer, kill -9) left its tree
				// behind: whatever carries this workload's tags goes too.
				if n, _ := killMarked(b.logger, MarkerEnv+"="+b.marker, "PROVIDER_AGENT_WORKLOAD_ID="+p.id); n > 0 {
					b.logger.Warn("workload supervisor was killed: killed what it left", "workload", p.id, "processes", n)
				}
			}
		}
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
	if p.log != "" {
		appendLog(p.log, fmt.Sprintf(logMarker+"%s ended: %s\n", p.id, e))
	}
	close(p.done)
	level := slog.LevelInfo
	if !e.Stopped {
		level = slog.LevelWarn
	}
	b.logger.Log(context.Background(), level, "workload exited", "workload", p.id, "epoch", e.Epoch, "exit", e.String())
	b.queue.push(e)
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
	b.logger.Error("workload supervisor did not stop the workload in time: killed it and its tree",
		"workload", p.id, "shim_pid", shim.Pid, "processes", n, "waited", b.cfg.StopGrace+shimStopMargin)
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
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.Stop(ctx, id, "backend closed")
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close backend: %w", err)
	}
	b.wg.Wait()
	b.closer.Do(func() {
		close(b.quit)
		<-b.qdone
		// Every shim is gone: nothing reads the lifeline any more.
		_ = b.lifeW.Close()
		_ = b.lifeR.Close()
	})
	return nil
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
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return
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
