package backend

// Stopping workloads: through their shim (SIGTERM, then SIGKILL after the
// grace), the agent killing the tree and the shim when the shim does not
// end in time; and a holding shim's release.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

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
