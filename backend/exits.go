package backend

// Exits: each shim's waiter reaps it, reads the workload's exit status
// from the status pipe and reports the exit in order, after killing what a
// killed shim left.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

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
