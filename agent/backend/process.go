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

// Process is the process backend: each workload is a child process in its
// own process group. A dead agent cannot fence its workload, so the workload
// must not outlive it: the kernel SIGKILLs the child when the agent dies
// (Pdeathsig), and, when LogDir is set, NewProcess kills whatever a previous
// incarnation using the same LogDir left running (grandchildren that
// Pdeathsig does not reach), found by the PROVIDER_AGENT_BACKEND marker in
// their environment.
type Process struct {
	cfg    ProcessConfig
	logger *slog.Logger

	mu     sync.Mutex
	procs  map[string]*proc
	closed bool
	wg     sync.WaitGroup // one per process waiter
	out    *lockedWriter  // shared by all processes when LogDir is ""

	marker string // PROVIDER_AGENT_BACKEND value; "" without LogDir
	queue  *exitQueue
	exits  chan Exit
	quit   chan struct{}
	qdone  chan struct{}
	closer sync.Once
}

type proc struct {
	id    string
	epoch uint64
	cmd   *exec.Cmd
	log   string // log file path; "" when output goes to cfg.Output
	done  chan struct{}

	// guarded by Process.mu
	stopping bool
	reason   string
	killer   *time.Timer
}

var _ Backend = (*Process)(nil)

// NewProcess returns a process backend. LogDir is created (mode 0750) if
// needed.
func NewProcess(cfg ProcessConfig, logger *slog.Logger) (*Process, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
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
		abs, err := filepath.Abs(cfg.LogDir)
		if err != nil {
			return nil, fmt.Errorf("backend: log dir: %w", err)
		}
		sum := sha256.Sum256([]byte(abs))
		marker = hex.EncodeToString(sum[:8])
	}
	b := &Process{
		cfg:    cfg,
		logger: logger,
		procs:  map[string]*proc{},
		queue:  newExitQueue(),
		exits:  make(chan Exit),
		quit:   make(chan struct{}),
		qdone:  make(chan struct{}),
		marker: marker,
	}
	if marker != "" {
		if n := b.reapLeftovers(); n > 0 {
			logger.Warn("killed workload processes left running by a previous agent", "processes", n, "log_dir", cfg.LogDir)
		}
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

// Start implements Backend.
func (b *Process) Start(ctx context.Context, spec StartSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("start %s: %w", spec.WorkloadID, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return fmt.Errorf("start %s: %w", spec.WorkloadID, ErrClosed)
	}
	if p, ok := b.procs[spec.WorkloadID]; ok && !p.stopping {
		if spec.Epoch > p.epoch {
			p.epoch = spec.Epoch
		}
		return nil
	} else if ok {
		// A stop is in progress: let it finish first.
		return fmt.Errorf("start %s: %w", spec.WorkloadID, ErrStopping)
	}

	cmd := exec.Command(spec.Command[0], spec.Command[1:]...)
	cmd.Dir = spec.Dir
	base := b.cfg.BaseEnv
	if base == nil {
		base = os.Environ()
	}
	cmd.Env = append(append([]string(nil), base...),
		"PROVIDER_AGENT_WORKLOAD_ID="+spec.WorkloadID,
		fmt.Sprintf("PROVIDER_AGENT_EPOCH=%d", spec.Epoch))
	cmd.Env = append(cmd.Env, spec.Env...)
	if b.marker != "" {
		// Last, so a spec cannot override it.
		cmd.Env = append(cmd.Env, MarkerEnv+"="+b.marker)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{id: spec.WorkloadID, epoch: spec.Epoch, cmd: cmd, done: make(chan struct{})}
	if b.cfg.LogDir != "" {
		f, err := os.OpenFile(b.LogPath(spec.WorkloadID), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
		if err != nil {
			return fmt.Errorf("start %s: open log: %w", spec.WorkloadID, err)
		}
		fmt.Fprintf(f, "=== provider-agent: start %s epoch %d at %s: %q\n",
			spec.WorkloadID, spec.Epoch, b.cfg.Now().UTC().Format(time.RFC3339), spec.Command)
		p.log = b.LogPath(spec.WorkloadID)
		cmd.Stdout, cmd.Stderr = f, f
		// The child has its own copy: do not hold one descriptor per
		// workload in the agent (10,000 workloads would exceed the limit).
		defer f.Close()
	} else if b.out != nil {
		// exec copies through a pipe and goroutine; Wait waits for it.
		cmd.Stdout, cmd.Stderr = b.out, b.out
	}
	if err := cmd.Start(); err != nil {
		if p.log != "" {
			appendLog(p.log, fmt.Sprintf("=== provider-agent: start failed: %v\n", err))
		}
		return fmt.Errorf("start %s: %w", spec.WorkloadID, err)
	}
	b.procs[spec.WorkloadID] = p
	b.wg.Add(1)
	go b.wait(p)
	b.logger.Info("workload started", "workload", spec.WorkloadID, "epoch", spec.Epoch, "pid", cmd.Process.Pid)
	return nil
}

// wait owns one process: it reaps it, cleans up its group and reports the
// exit.
func (b *Process) wait(p *proc) {
	defer b.wg.Done()
	err := p.cmd.Wait()
	// Whatever is left of the group (children that ignored SIGTERM or were
	// orphaned) goes with the leader.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	e := Exit{WorkloadID: p.id, At: b.cfg.Now(), Code: -1}
	if st := p.cmd.ProcessState; st != nil {
		e.Code = st.ExitCode()
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = signalName(ws.Signal())
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
		appendLog(p.log, fmt.Sprintf("=== provider-agent: %s ended: %s\n", p.id, e))
	}
	close(p.done)
	level := slog.LevelInfo
	if !e.Stopped {
		level = slog.LevelWarn
	}
	b.logger.Log(context.Background(), level, "workload exited", "workload", p.id, "epoch", e.Epoch, "exit", e.String())
	b.queue.push(e)
}

// Stop implements Backend.
func (b *Process) Stop(ctx context.Context, workloadID, reason string) error {
	b.mu.Lock()
	p, ok := b.procs[workloadID]
	if ok && !p.stopping {
		p.stopping, p.reason = true, reason
		pgid := -p.cmd.Process.Pid
		_ = syscall.Kill(pgid, syscall.SIGTERM)
		p.killer = time.AfterFunc(b.cfg.StopGrace, func() {
			b.logger.Warn("workload ignored SIGTERM; sending SIGKILL", "workload", workloadID, "grace", b.cfg.StopGrace)
			_ = syscall.Kill(pgid, syscall.SIGKILL)
		})
		b.logger.Info("stopping workload", "workload", workloadID, "reason", reason)
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
