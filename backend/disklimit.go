package backend

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"
	"time"
)

// A workload's directories (its home and its checkpoint directories, see
// workdirs) live on the host's file system, often the data dir's. Their
// bound is a watchdog of the backend's, with two kernel limits beside it:
//
//   - every DirLimit.Interval the backend measures each running workload's
//     directories (blocks allocated, and entries), and kills a workload
//     over MaxBytes or MaxFiles as a crash (SIGKILL to its tree: the
//     restart policy applies, and a start over the limit fails at once,
//     so a workload that keeps its directories full ends failed, with the
//     reason in its log and in status);
//   - RLIMIT_FSIZE is MaxBytes for the workload's processes (podman:
//     --ulimit fsize), so no single file outgrows the cap between two
//     checks, whatever the write rate;
//   - the workload runs as a uid of its own, so on ext4 it cannot take
//     the blocks reserved for root (5 % by default), which the agent's
//     database, running as root, still has.
//
// Why a watchdog rather than a quota or a size-limited mount: project
// quotas need a file system mounted with them (prjquota on ext4 or xfs),
// which the agent cannot assume or set up; a loop-mounted image per
// workload needs loop devices (PrivateDevices=yes in the unit forbids
// them) and mkfs; a tmpfs takes memory and loses a workload's home at a
// reboot (a workload keeps its files across restarts of the agent). The
// watchdog needs nothing of the host; its cost is a walk of each
// workload's directories per interval, bounded by MaxFiles entries, and
// its bound is MaxBytes plus what the workload writes in one interval,
// each file within RLIMIT_FSIZE. Operators who want a hard bound put
// backend.workload_dir on a file system of its own (or with quotas): the
// agent's database then never shares a disk with a tenant.

// DirLimit bounds a workload's directories.
type DirLimit struct {
	// MaxBytes bounds the bytes allocated under a workload's home and
	// checkpoint directories together (all epochs); 0: no bound.
	MaxBytes int64
	// MaxFiles bounds the entries (files, directories, links) there; 0:
	// no bound.
	MaxFiles int64
	// Interval is how often running workloads are measured. Default 1s.
	Interval time.Duration
}

// DefaultDirLimit is 1 GiB and 100,000 entries, checked every second.
var DefaultDirLimit = DirLimit{MaxBytes: 1 << 30, MaxFiles: 100_000, Interval: time.Second}

// Validate checks the limit.
func (d DirLimit) Validate() error {
	if d.MaxBytes < 0 || d.MaxFiles < 0 {
		return fmt.Errorf("backend: workload_dir_max_mib %d bytes, workload_dir_max_files %d: want 0 (no bound) or more", d.MaxBytes, d.MaxFiles)
	}
	if d.on() && d.Interval < 0 {
		return fmt.Errorf("backend: disk_check_interval = %s: want a positive duration", d.Interval)
	}
	return nil
}

func (d DirLimit) on() bool { return d.MaxBytes > 0 || d.MaxFiles > 0 }

// ErrDiskLimit means a workload's directories are over its DirLimit: a
// start was refused, or the running workload was killed.
var ErrDiskLimit = errors.New("workload directories over their disk limit")

// errWalkDone stops a walk early.
var errWalkDone = errors.New("walk done")

// dirUsage returns the bytes allocated and the entries under dirs, and
// why they exceed lim ("" when they do not). The walk stops as soon as
// either bound is passed, so it reads at most MaxFiles entries.
func dirUsage(dirs []string, lim DirLimit) (bytes, files int64, over string) {
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil // gone meanwhile, or not readable: skip it
			}
			var st syscall.Stat_t
			if syscall.Lstat(path, &st) != nil {
				return nil
			}
			files++
			bytes += st.Blocks * 512
			if (lim.MaxBytes > 0 && bytes > lim.MaxBytes) || (lim.MaxFiles > 0 && files > lim.MaxFiles) {
				return errWalkDone
			}
			return nil
		})
		if (lim.MaxBytes > 0 && bytes > lim.MaxBytes) || (lim.MaxFiles > 0 && files > lim.MaxFiles) {
			break
		}
	}
	switch {
	case lim.MaxBytes > 0 && bytes > lim.MaxBytes:
		over = fmt.Sprintf("its home and checkpoint directories hold more than %d MiB (backend.workload_dir_max_mib)", lim.MaxBytes>>20)
	case lim.MaxFiles > 0 && files > lim.MaxFiles:
		over = fmt.Sprintf("its home and checkpoint directories hold more than %d entries (backend.workload_dir_max_files)", lim.MaxFiles)
	}
	return bytes, files, over
}

// dirsOf are the directories of a workload's start that count against
// its limit: its home, and its checkpoint directories of every epoch.
func dirsOf(wd workdir) []string {
	return []string{wd.home, filepath.Dir(wd.checkpoint)}
}

// watchDisk measures the running workloads' directories every interval
// and kills those over the limit, until quit is closed.
func (b *Process) watchDisk() {
	defer close(b.diskDone)
	t := time.NewTicker(b.cfg.Dirs.Interval)
	defer t.Stop()
	for {
		select {
		case <-b.quit:
			return
		case <-t.C:
		}
		b.mu.Lock()
		running := make([]*proc, 0, len(b.procs))
		for _, p := range b.procs {
			if p.cmd != nil && !p.stopping && p.wd.home != "" {
				running = append(running, p)
			}
		}
		b.mu.Unlock()
		for _, p := range running {
			if _, _, over := dirUsage(dirsOf(p.wd), b.cfg.Dirs); over != "" {
				b.killOverLimit(p, over)
			}
		}
	}
}

// killOverLimit kills p's tree and supervisor (a crash: the restart
// policy applies) because over; its end line in the log says so.
func (b *Process) killOverLimit(p *proc, over string) {
	b.mu.Lock()
	if p.stopping || p.diskNote != "" || b.procs[p.id] != p {
		b.mu.Unlock()
		return
	}
	p.diskNote = "killed: " + over
	b.overLimit[p.id] = p.diskNote
	shim := p.cmd.Process
	b.mu.Unlock()
	b.logger.Warn("workload over its disk limit: killed", "workload", p.id, "why", over)
	if p.group != nil {
		_, _ = p.group.kill()
	}
	if !p.hold && p.wpid > 1 {
		_ = syscall.Kill(-p.wpid, syscall.SIGKILL)
	}
	_ = shim.Kill()
}

// overLimitNote returns, once, why workload id's last run was killed over
// its disk limit ("" when it was not).
func (b *Process) overLimitNote(id string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.overLimit[id]
	delete(b.overLimit, id)
	return n
}
