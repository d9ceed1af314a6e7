package backend

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// A workload's output goes to <log_dir>/<id>.log through its supervisor,
// not straight to the file: the supervisor copies it from a pipe and
// rotates the file when it reaches LogLimit.MaxBytes (<id>.log.1 is the
// newest rotated part, <id>.log.<Keep> the oldest; older ones are
// removed). So a workload that writes as fast as it can takes at most
// MaxBytes × (Keep + 1) of the disk, and is slowed to the pace the
// supervisor writes at (the pipe is its back pressure), in its own cgroup.

// LogLimit caps a workload's log.
type LogLimit struct {
	// MaxBytes is the size at which the log is rotated; 0 turns the cap
	// (and rotation) off: the workload writes to the file itself.
	MaxBytes int64
	// Keep is how many rotated parts are kept besides the current file.
	Keep int
}

// DefaultLogLimit is 16 MiB per file, the current one and 2 rotated: at
// most 48 MiB per workload.
var DefaultLogLimit = LogLimit{MaxBytes: 16 << 20, Keep: 2}

// Validate checks the limit.
func (l LogLimit) Validate() error {
	if l.MaxBytes < 0 || (l.MaxBytes > 0 && l.MaxBytes < 4096) {
		return fmt.Errorf("backend: log_max_mib: %d bytes: want 0 (no cap) or at least 4 KiB", l.MaxBytes)
	}
	if l.Keep < 0 || l.Keep > 100 {
		return fmt.Errorf("backend: log_keep = %d: want 0 to 100", l.Keep)
	}
	return nil
}

// rotatingLog appends to a log file and rotates it at max bytes. The
// descriptors 1 and 2 of the process follow the current file when follow
// is set (the supervisor's own notes go there too).
type rotatingLog struct {
	path   string
	max    int64
	keep   int
	follow bool
	f      *os.File
	size   int64
}

// openRotatingLog opens path for appending (creating it 0600).
func openRotatingLog(path string, max int64, keep int, follow bool) (*rotatingLog, error) {
	l := &rotatingLog{path: path, max: max, keep: keep, follow: follow}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *rotatingLog) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, st.Size()
	if l.follow {
		_ = unix.Dup2(int(f.Fd()), 1)
		_ = unix.Dup2(int(f.Fd()), 2)
	}
	return nil
}

// Write appends p, rotating first when the file is full; a write larger
// than the room left is split so that no file exceeds max.
func (l *rotatingLog) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if l.size >= l.max {
			if err := l.rotate(); err != nil {
				return n, err
			}
		}
		chunk := p
		if room := l.max - l.size; int64(len(chunk)) > room {
			chunk = chunk[:room]
		}
		w, err := l.f.Write(chunk)
		n += w
		l.size += int64(w)
		if err != nil {
			return n, err
		}
		p = p[w:]
	}
	return n, nil
}

// rotate renames path.(i) to path.(i+1) from the oldest kept down, path
// to path.1, and opens a new path; with keep 0 the file is truncated.
func (l *rotatingLog) rotate() error {
	_ = l.f.Close()
	if l.keep == 0 {
		if err := os.Truncate(l.path, 0); err != nil {
			return err
		}
		return l.open()
	}
	// No remove of the oldest first: each rename replaces its target, so
	// every kept part exists at every moment (a reader that lists them
	// never finds one missing mid-rotation).
	for i := l.keep - 1; i >= 1; i-- {
		_ = os.Rename(l.path+"."+strconv.Itoa(i), l.path+"."+strconv.Itoa(i+1))
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return l.open()
}

// Close closes the current file.
func (l *rotatingLog) Close() error { return l.f.Close() }

// copyLog copies r to l until EOF or a read error; done is closed after.
// A write error (a full disk) drops output rather than blocking the
// workload: it keeps reading.
func copyLog(l *rotatingLog, r io.Reader, done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = l.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// drainLog waits for a copier to reach EOF, at most bound (a process that
// escaped the tree may hold the pipe open).
func drainLog(done <-chan struct{}, bound time.Duration) {
	select {
	case <-done:
	case <-time.After(bound):
	}
}
