package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockFileName is the file in the data dir that 'run' holds an exclusive
// flock on for its whole life; it contains the holder's pid.
const lockFileName = "provider-agent.lock"

// dataDirLockedError means another process holds the data dir's lock.
type dataDirLockedError struct {
	dir, path string
	holder    string // its pid as written in the lock file, or "unknown"
}

func (e *dataDirLockedError) Error() string {
	return fmt.Sprintf("data dir %s is in use by another provider-agent run (pid %s holds %s)", e.dir, e.holder, e.path)
}

// lockDataDir takes the exclusive lock on dir's lock file, without
// waiting, and writes this process's pid into it. The lock lasts until the
// returned file is closed or the process dies, however it dies (the kernel
// releases a flock with its last descriptor, and the descriptor is
// close-on-exec, so no child holds it). When another process holds it, the
// error is a *dataDirLockedError naming the holder's pid. Operator commands
// that only read do not take it.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &dataDirLockedError{dir: dir, path: path, holder: lockHolder(path)}
		}
		return nil, fmt.Errorf("lock data dir: %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock data dir: write pid: %w", err)
	}
	return f, nil
}

// dataDirHeld returns a *dataDirLockedError when another process holds
// dir's lock, else nil. It creates nothing: a missing lock file means no
// run holds the data dir.
func dataDirHeld(dir string) error {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		if err == nil {
			_ = flock(f, syscall.LOCK_UN)
		}
		return nil
	}
	return &dataDirLockedError{dir: dir, path: path, holder: lockHolder(path)}
}

// lockHolder is the pid the holder of the lock file at path wrote in it
// ("unknown" when it cannot be read).
func lockHolder(path string) string {
	if data, err := os.ReadFile(path); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
			return strconv.Itoa(pid)
		}
	}
	return "unknown"
}

// flock applies how to f, retrying when a signal interrupts it.
func flock(f *os.File, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = syscall.Flock(int(fd), how)
			if !errors.Is(ferr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	return ferr
}
