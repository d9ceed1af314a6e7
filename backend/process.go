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
	"sync/atomic"
	"syscall"
	"time"

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
