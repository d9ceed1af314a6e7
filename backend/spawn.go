package backend

// Starting a workload: its supervising shim is spawned (in its namespaces,
// cgroup and user when contained and isolated), and its handshake read.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

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
	env := b.workloadEnv(spec, wd)
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
	scfg := b.shimSettings(p, wd, group, join)
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
	wpid, err := b.handshake(ctx, p, cmd, hsR)
	if err != nil {
		return fail(err)
	}
	return cmd, wpid, nil
}

// handshake reads the handshake of the shim cmd started (hsR): the
// workload's pid, once the shim started it (for a holding shim, its PID
// namespace is opened too). Anything else is an error, and nothing stays
// behind it: the shim and what it started are killed.
func (b *Process) handshake(ctx context.Context, p *proc, cmd *exec.Cmd, hsR *os.File) (int, error) {
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
				return wpid, nil
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
	return 0, err
}

// workloadEnv is the environment of spec's process, in the run's
// directories wd: the configured base (none: the agent's own, or only PATH
// and HOME when isolating, since the agent's may hold secrets) without the
// shim's variable, then the workload's identity, epoch and checkpoint
// directory, the spec's own, and the backend's marker last.
func (b *Process) workloadEnv(spec StartSpec, wd workdir) []string {
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
	return env
}

// shimSettings are the settings of p's shim: its agent, stop grace and
// token, whether it joins its cgroup itself (join) and which (group), the
// log rotation when it writes the log, and for a workload (not a holding
// shim) the file size limit and, when isolating, its user.
func (b *Process) shimSettings(p *proc, wd workdir, group *cgroupGroup, join bool) shimConfig {
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
	return scfg
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
