package backend

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"provideragent/internal/imagespec"
)

// A container must not outlive the agent either, and podman keeps
// containers alive on purpose: conmon, the container's monitor, is a
// daemon of its own, and the container's processes are conmon's children,
// not the agent's. So the Podman backend does not tie the container to the
// agent through podman at all, but through the kernel: every container
// runs inside the PID namespace of a supervisor of the agent's (a holding
// shim, see RunShimIfRequested), which the container joins (podman run
// --pid ns:...) instead of getting one of its own.
//
//   - The supervisor is that namespace's init and holds the agent's
//     lifeline, as a process backend's does: when the agent dies, however
//     it dies, the supervisor reads EOF and SIGKILLs every process of the
//     namespace, that is every process of the container.
//   - When the supervisor itself dies (killed together with the agent,
//     kill -9 of both, the OOM killer), the kernel kills every process of
//     its namespace: a container cannot outlive its supervisor, and the
//     supervisor cannot outlive the agent. Neither conmon nor podman is
//     asked for anything: conmon, left outside, merely sees its container
//     exit.
//   - A container cannot join a namespace whose init is gone (fork into it
//     fails), and the namespace is named by a descriptor the agent opened
//     before anything could reap the supervisor, so a container never runs
//     in another process's namespace, and never starts after a stop.
//   - Stops go the same way: SIGTERM to every process of the namespace,
//     SIGKILL after stop_grace; the supervisor exits once the namespace is
//     empty. Exits are podman run's (the container's status, 128+n for a
//     signal), and leftover container records are found by their label at
//     the next start (KillPodmanLeftovers) and removed before the database
//     opens.
//
// The container's output goes to the workload's log file (podman's
// passthrough log driver hands it the file itself); its checkpoint
// directory is bind-mounted at /provider-agent/checkpoint; it has no
// network unless its image spec asks for one; when isolating it runs as
// the workload's uid, with no capabilities and no_new_privs.

// Labels the Podman backend puts on its containers.
const (
	PodmanLabelBackend  = "provider-agent.backend" // the backend's marker (hash of its log dir)
	PodmanLabelWorkload = "provider-agent.workload"
	PodmanLabelEpoch    = "provider-agent.epoch"
)

// ContainerCheckpointDir is where a container finds its checkpoint
// directory (PROVIDER_AGENT_CHECKPOINT_DIR in its environment).
const ContainerCheckpointDir = "/provider-agent/checkpoint"

// PodmanConfig configures Podman.
type PodmanConfig struct {
	// ProcessConfig configures the supervisors (StopGrace, LogDir, which
	// is required, Containment, which must give a PID namespace, and the
	// isolation settings; BaseEnv and Output are not used).
	ProcessConfig
	// Podman is the podman command. Default "podman".
	Podman string
	// RunArgs are added to every podman run before the backend's own
	// options (say "--runtime", "runc").
	RunArgs []string
}

// DefaultPodmanConfig returns DefaultProcessConfig's settings and podman
// from PATH.
func DefaultPodmanConfig() PodmanConfig {
	return PodmanConfig{ProcessConfig: DefaultProcessConfig(), Podman: "podman"}
}

// ErrNoPodman means podman cannot be run (not installed, or no PID
// namespace to hold its containers).
var ErrNoPodman = errors.New("podman backend not available")

// Podman is the container backend: it runs the OCI image a workload's
// command names (imagespec) with podman, inside the PID namespace of a
// supervisor tied to the agent (see above).
type Podman struct {
	cfg      PodmanConfig
	logger   *slog.Logger
	holders  *Process
	instance string // names this backend's containers
	envDir   string // private: the containers' env files, and podman's working directory

	mu     sync.Mutex
	ctrs   map[string]*container
	closed bool
	seq    uint64
	wg     sync.WaitGroup

	queue   *exitQueue
	exits   chan Exit
	quit    chan struct{}
	qdone   chan struct{}
	drained chan struct{}
	closer  sync.Once
}

// container is one workload's container run.
type container struct {
	id      string
	name    string
	log     string
	envFile string
	started chan struct{}
	done    chan struct{}

	// guarded by Podman.mu
	epoch    uint64
	startErr error
	stopping bool
	reason   string
	cmd      *exec.Cmd // podman run, attached
	holder   <-chan struct{}
	ns       *os.File // the supervisor's PID namespace, open until podman run ended
}

var _ Backend = (*Podman)(nil)

// NewPodman returns a podman backend. Like NewProcess it kills what an
// earlier backend on the same log dir left (and removes its containers),
// and it needs root, podman, and a PID namespace for its supervisors.
func NewPodman(ctx context.Context, cfg PodmanConfig, logger *slog.Logger) (*Podman, error) {
	if cfg.Podman == "" {
		cfg.Podman = "podman"
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.LogDir == "" {
		return nil, fmt.Errorf("backend: podman: a log dir is required (it names the containers to clean up): %w", ErrBadSpec)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("backend: kind = podman: the agent runs as uid %d, not root; the podman backend runs rootful podman: %w", os.Geteuid(), ErrNoPodman)
	}
	path, err := exec.LookPath(cfg.Podman)
	if err != nil {
		return nil, fmt.Errorf("backend: kind = podman: %w: %w", err, ErrNoPodman)
	}
	cfg.Podman = path
	if cfg.Containment == ContainCgroup || cfg.Containment == ContainNone {
		return nil, fmt.Errorf("backend: kind = podman needs a PID namespace (the container lives in its supervisor's, which kills it with the agent); containment = %s has none: %w",
			cfg.Containment, ErrNoPodman)
	}
	if _, err := KillPodmanLeftovers(ctx, cfg.Podman, cfg.LogDir, logger); err != nil {
		return nil, err
	}
	holders, err := NewProcess(cfg.ProcessConfig, logger)
	if err != nil {
		return nil, err
	}
	if !holders.contain.PIDNamespace {
		_ = holders.Close(ctx)
		return nil, fmt.Errorf("backend: kind = podman needs a PID namespace (the container lives in its supervisor's, which kills it with the agent): %s: %w",
			holders.contain.Warning, ErrNoPodman)
	}
	envDir, err := os.MkdirTemp("", "provider-agent-podman-")
	if err != nil {
		_ = holders.Close(ctx)
		return nil, fmt.Errorf("backend: podman: %w", err)
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	p := &Podman{
		cfg: cfg, logger: logger, holders: holders, envDir: envDir,
		instance: holders.marker[:8] + "-" + hex.EncodeToString(nonce[:]),
		ctrs:     map[string]*container{},
		queue:    newExitQueue(), exits: make(chan Exit),
		quit: make(chan struct{}), qdone: make(chan struct{}), drained: make(chan struct{}),
	}
	go func() {
		// The supervisors' own exits: the containers' are what counts.
		defer close(p.drained)
		for range holders.Exits() {
		}
	}()
	go p.dispatch()
	logger.Info("podman backend", "podman", cfg.Podman, "run_args", cfg.RunArgs)
	return p, nil
}

var _ Checkpointer = (*Podman)(nil)

// CheckpointDir is the host directory bind-mounted at
// ContainerCheckpointDir in workloadID's container at epoch.
func (p *Podman) CheckpointDir(workloadID string, epoch uint64) (CheckpointDir, error) {
	return p.holders.CheckpointDir(workloadID, epoch)
}

// Containment reports the supervisors' containment.
func (p *Podman) Containment() Containment { return p.holders.Containment() }

// Isolation reports how workloads are isolated.
func (p *Podman) Isolation() Isolation { return p.holders.Isolation() }

// LogPath returns the log file of a workload (see Process.LogPath).
func (p *Podman) LogPath(workloadID string) string { return p.holders.LogPath(workloadID) }

// Start implements Backend: it starts the workload's supervisor, then
// podman run of the image in the supervisor's PID namespace, and returns
// once podman runs (the container may still be being created: a failure
// to create it is an Exit, with podman's code 125, 126 or 127 and its
// message in the log).
func (p *Podman) Start(ctx context.Context, spec StartSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	im, argv, ok, err := imagespec.Decode(spec.Command)
	if err != nil {
		return fmt.Errorf("start %s: %w: %w", spec.WorkloadID, err, ErrBadSpec)
	}
	if !ok {
		return fmt.Errorf("start %s: the workload names no container image, and backend.kind = podman runs images (grant it with --image): %w",
			spec.WorkloadID, ErrBadSpec)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("start %s: %w", spec.WorkloadID, ErrClosed)
	}
	if c, ok := p.ctrs[spec.WorkloadID]; ok {
		if c.stopping {
			p.mu.Unlock()
			return fmt.Errorf("start %s: %w", spec.WorkloadID, ErrStopping)
		}
		if spec.Epoch > c.epoch {
			c.epoch = spec.Epoch
		}
		p.mu.Unlock()
		select {
		case <-c.started:
		case <-ctx.Done():
			return fmt.Errorf("start %s: %w", spec.WorkloadID, ctx.Err())
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return c.startErr
	}
	p.seq++
	c := &container{id: spec.WorkloadID, epoch: spec.Epoch, started: make(chan struct{}), done: make(chan struct{}),
		name: fmt.Sprintf("provider-agent-%s-%d", p.instance, p.seq), log: p.LogPath(spec.WorkloadID)}
	p.ctrs[c.id] = c
	p.mu.Unlock()

	cmd, holder, ns, err := p.launch(ctx, c, spec, im, argv)

	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		c.startErr = err
		delete(p.ctrs, c.id)
		close(c.started)
		close(c.done)
		return err
	}
	c.cmd, c.holder, c.ns = cmd, holder, ns
	close(c.started)
	p.wg.Add(1)
	go p.wait(c)
	p.logger.Info("container started", "workload", c.id, "epoch", c.epoch, "image", im.Ref, "container", c.name)
	if c.stopping {
		go p.stopHolder(c)
	}
	return nil
}

// launch starts c's supervisor and podman run.
func (p *Podman) launch(ctx context.Context, c *container, spec StartSpec, im imagespec.Image, argv []string) (*exec.Cmd, <-chan struct{}, *os.File, error) {
	// With a log cap, podman run's output (the container's, through the
	// passthrough log driver) goes through a pipe that the supervisor
	// copies to the log, rotated; without, to the file itself.
	var logR, logW *os.File
	if p.holders.cfg.Log.MaxBytes > 0 {
		var err error
		if logR, logW, err = os.Pipe(); err != nil {
			return nil, nil, nil, fmt.Errorf("start %s: log pipe: %w", spec.WorkloadID, err)
		}
		defer logW.Close()
	}
	err := p.holders.start(ctx, StartSpec{WorkloadID: spec.WorkloadID, Epoch: spec.Epoch}, true, logR)
	if logR != nil {
		logR.Close() // the supervisor's copy is the only read end
	}
	if err != nil {
		return nil, nil, nil, err
	}
	// The namespace is named by this descriptor (a duplicate of the one
	// opened before anything could reap the supervisor), open until podman
	// run ended: its number cannot come to name anything else meanwhile.
	ns, wd, holder, ok := p.holders.holding(spec.WorkloadID)
	fail := func(err error) (*exec.Cmd, <-chan struct{}, *os.File, error) {
		appendLog(c.log, fmt.Sprintf(logMarker+"start failed: %v\n", err))
		p.holders.release(spec.WorkloadID)
		if ns != nil {
			_ = ns.Close()
		}
		if c.envFile != "" {
			_ = os.Remove(c.envFile)
		}
		return nil, nil, nil, fmt.Errorf("start %s: %w", spec.WorkloadID, err)
	}
	if !ok {
		return fail(errors.New("its supervisor ended at once"))
	}
	// The environment goes in a file of the agent's: on the command line
	// every user of the host could read it.
	var env bytes.Buffer
	fmt.Fprintf(&env, "PROVIDER_AGENT_WORKLOAD_ID=%s\nPROVIDER_AGENT_EPOCH=%d\n%s=%s\n", spec.WorkloadID, spec.Epoch, CheckpointDirEnv, ContainerCheckpointDir)
	for _, kv := range im.Env {
		env.WriteString(kv + "\n")
	}
	c.envFile = filepath.Join(p.envDir, c.name+".env")
	if err := os.WriteFile(c.envFile, env.Bytes(), 0o600); err != nil {
		return fail(err)
	}
	args := []string{"run", "--name", c.name,
		"--label", PodmanLabelBackend + "=" + p.holders.marker,
		"--label", PodmanLabelWorkload + "=" + spec.WorkloadID,
		"--label", PodmanLabelEpoch + "=" + strconv.FormatUint(spec.Epoch, 10)}
	args = append(args, p.cfg.RunArgs...)
	args = append(args,
		"--pid", fmt.Sprintf("ns:/proc/%d/fd/%d", os.Getpid(), ns.Fd()),
		"--log-driver", "passthrough",
		"--env-file", c.envFile,
		"--volume", wd.checkpoint+":"+ContainerCheckpointDir)
	if !im.Network {
		args = append(args, "--network", "none")
	}
	if p.holders.dirs.isolate {
		args = append(args, "--user", fmt.Sprintf("%d:%d", wd.uid, wd.gid),
			"--cap-drop", "all", "--security-opt", "no-new-privileges")
	}
	if im.CPUs > 0 {
		args = append(args, "--cpus", strconv.FormatFloat(im.CPUs, 'f', -1, 64))
	}
	if im.MemoryMB > 0 {
		m := strconv.FormatInt(im.MemoryMB, 10) + "m"
		args = append(args, "--memory", m, "--memory-swap", m)
	}
	if n := p.holders.cfg.Dirs.MaxBytes; n > 0 {
		// No file of the container outgrows its directory bound.
		args = append(args, "--ulimit", fmt.Sprintf("fsize=%d:%d", n, n))
	}
	args = append(args, im.Ref)
	args = append(args, argv...)

	f, err := os.OpenFile(c.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fail(fmt.Errorf("open log: %w", err))
	}
	defer f.Close()
	fmt.Fprintf(f, logMarker+"start %s epoch %d at %s: image %s %q\n",
		spec.WorkloadID, spec.Epoch, p.holders.cfg.Now().UTC().Format(time.RFC3339), im.Ref, argv)
	out := f
	if logW != nil {
		out = logW
	}
	cmd := exec.Command(p.cfg.Podman, args...)
	// A directory of the backend's own, not the agent's: podman and conmon
	// leave files in their working directory (an empty "oom" after an OOM
	// kill).
	cmd.Dir = p.envDir
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: a terminal's ^C to the agent stops nothing.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	return cmd, holder, ns, nil
}

// wait owns one container run: it waits for podman run to end, kills
// what is left in the namespace, removes the container record and
// reports the exit.
func (p *Podman) wait(c *container) {
	defer p.wg.Done()
	ran := make(chan error, 1)
	go func() { ran <- c.cmd.Wait() }()
	var killedPodman bool
	select {
	case <-ran:
	case <-c.holder:
		// The namespace is gone, so is every process of the container:
		// podman run returns once conmon saw it (or it never started one).
		select {
		case <-ran:
		case <-time.After(p.cfg.StopGrace + shimStopMargin):
			killedPodman = true
			_ = c.cmd.Process.Kill()
			<-ran
		}
	}
	_ = c.ns.Close()
	e := Exit{WorkloadID: c.id, At: p.holders.cfg.Now(), Code: -1}
	if st := c.cmd.ProcessState; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = signalName(ws.Signal())
		} else {
			e.Code, e.Signal = podmanStatus(st.ExitCode())
		}
	}
	note := ""
	if killedPodman {
		note = " (podman run did not end with its container: killed)"
	}
	if n := p.holders.overLimitNote(c.id); n != "" {
		note += " (" + n + ")"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	inspect := exec.CommandContext(ctx, p.cfg.Podman, "inspect", "--format", "{{.State.OOMKilled}}", c.name)
	inspect.Dir = p.envDir
	if out, err := inspect.Output(); err == nil && strings.TrimSpace(string(out)) == "true" {
		note += " (out of memory)"
	}
	// Whatever the container left in the namespace goes with it; a stuck
	// supervisor is killed (Stop's bounded fallback).
	p.holders.release(c.id)
	select {
	case <-c.holder:
	case <-time.After(shimStopMargin):
		p.holders.killHolder(c.id)
		<-c.holder
	}
	rm := exec.CommandContext(ctx, p.cfg.Podman, "rm", "--force", "--time", "0", c.name)
	rm.Dir = p.envDir
	if out, err := rm.CombinedOutput(); err != nil {
		p.logger.Warn("could not remove a container (the next start removes it)", "workload", c.id, "container", c.name,
			"err", err, "output", strings.TrimSpace(string(out)))
	}
	_ = os.Remove(c.envFile)
	p.mu.Lock()
	e.Epoch, e.Stopped, e.Reason = c.epoch, c.stopping, c.reason
	if p.ctrs[c.id] == c {
		delete(p.ctrs, c.id)
	}
	p.mu.Unlock()
	appendLog(c.log, fmt.Sprintf(logMarker+"%s ended: %s%s\n", c.id, e, note))
	close(c.done)
	level := slog.LevelInfo
	if !e.Stopped {
		level = slog.LevelWarn
	}
	p.logger.Log(context.Background(), level, "container exited", "workload", c.id, "epoch", e.Epoch, "exit", e.String()+note)
	p.queue.push(e)
}

// podmanStatus returns an Exit's Code and Signal for podman run's exit
// code: the container's, 128+n when a signal n killed it (a container
// that exits with such a code itself reads the same), 125 to 127 when
// podman could not run it.
func podmanStatus(code int) (int, string) {
	if code > 128 && code <= 128+64 {
		return -1, signalName(syscall.Signal(code - 128))
	}
	return code, ""
}

// Stop implements Backend: SIGTERM to every process of the container,
// SIGKILL after StopGrace (by its supervisor), and it returns once the
// container is gone and its record removed.
func (p *Podman) Stop(ctx context.Context, workloadID, reason string) error {
	p.mu.Lock()
	c, ok := p.ctrs[workloadID]
	first := ok && !c.stopping
	if first {
		c.stopping, c.reason = true, reason
		p.logger.Info("stopping container", "workload", workloadID, "reason", reason)
	}
	started := ok && c.cmd != nil
	p.mu.Unlock()
	if !ok {
		return nil
	}
	if first && started {
		go p.stopHolder(c)
	} // else Start stops it once podman runs
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", workloadID, ctx.Err())
	}
}

// stopHolder stops c's supervisor, which stops the container.
func (p *Podman) stopHolder(c *container) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.StopGrace+2*shimStopMargin)
	defer cancel()
	p.mu.Lock()
	reason := c.reason
	p.mu.Unlock()
	if err := p.holders.Stop(ctx, c.id, reason); err != nil {
		p.logger.Error("stop the container's supervisor", "workload", c.id, "err", err)
	}
}

// Running implements Backend.
func (p *Podman) Running(workloadID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.ctrs[workloadID]
	return ok
}

// Exits implements Backend.
func (p *Podman) Exits() <-chan Exit { return p.exits }

// Close implements Backend: it stops every container, waits for them,
// closes Exits and the supervisors' backend.
func (p *Podman) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	ids := make([]string, 0, len(p.ctrs))
	for id := range p.ctrs {
		ids = append(ids, id)
	}
	p.mu.Unlock()
	if err := stopAll(ctx, ids, p.Stop); err != nil {
		return err
	}
	p.wg.Wait()
	var err error
	p.closer.Do(func() {
		close(p.quit)
		<-p.qdone
		err = p.holders.Close(ctx)
		<-p.drained
		_ = os.RemoveAll(p.envDir)
	})
	return err
}

// dispatch forwards queued exits to Exits (see Process.dispatch).
func (p *Podman) dispatch() {
	defer close(p.qdone)
	defer close(p.exits)
	for {
		e, ok := p.queue.pop()
		if !ok {
			select {
			case <-p.queue.notify:
				continue
			case <-p.quit:
				return
			}
		}
		select {
		case p.exits <- e:
		case <-p.quit:
			return
		}
	}
}

// KillPodmanLeftovers removes every container a Podman backend with this
// log dir created, running or not (podman rm --force, no grace): what an
// agent that was killed left as records (its containers died with their
// supervisors), or anything that survived a host without PID namespaces.
// Like KillLeftovers it must run before anything starts workloads on
// logDir, before the database opens. It returns how many it removed.
func KillPodmanLeftovers(ctx context.Context, podman, logDir string, logger *slog.Logger) (int, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	marker, err := markerFor(logDir)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, podman, "ps", "--all", "--quiet", "--no-trunc",
		"--filter", "label="+PodmanLabelBackend+"="+marker).Output()
	if err != nil {
		return 0, fmt.Errorf("backend: list leftover containers: %w%s", err, stderrOf(err))
	}
	ids := strings.Fields(string(out))
	if len(ids) == 0 {
		return 0, nil
	}
	rm, err := exec.CommandContext(ctx, podman, append([]string{"rm", "--force", "--time", "0"}, ids...)...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("backend: remove leftover containers %v: %w: %s", ids, err, strings.TrimSpace(string(rm)))
	}
	logger.Warn("removed containers left by a previous agent", "containers", len(ids), "log_dir", logDir)
	return len(ids), nil
}

// stderrOf returns ": <stderr>" of a failed command, or "".
func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}
