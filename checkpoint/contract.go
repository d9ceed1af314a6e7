package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// FileName is the checkpoint's name in the workload's checkpoint
// directory: the only name the agent reads.
const FileName = "checkpoint"

// Errors Open and File.Verify return; match them with errors.Is. A
// missing checkpoint is os.ErrNotExist.
var (
	// ErrNotRegular: the checkpoint is a symlink, a directory, a FIFO or
	// a device. A symlink to the agent's key file would otherwise be
	// uploaded to a public server.
	ErrNotRegular = errors.New("checkpoint: not a regular file")
	// ErrHardLinked: the checkpoint has more than one link (a hard link
	// to a file the workload could not read, made where the kernel allows
	// it).
	ErrHardLinked = errors.New("checkpoint: hard-linked")
	// ErrWrongOwner: the checkpoint is not owned by the workload's user.
	ErrWrongOwner = errors.New("checkpoint: not owned by the workload's user")
	// ErrTooLarge: the checkpoint is over the configured limit.
	ErrTooLarge = errors.New("checkpoint: too large")
	// ErrModified: the checkpoint changed while it was read (written in
	// place instead of renamed into place).
	ErrModified = errors.New("checkpoint: modified while read: write another name and rename it onto " + FileName)
)

// FileID identifies one version of the checkpoint: a rename always brings
// a new inode, whatever the file system's time granularity.
type FileID struct {
	Dev, Ino uint64
}

// Info is what Stat and Open learn of the checkpoint.
type Info struct {
	ID      FileID
	Size    int64
	ModTime time.Time
	ctime   unix.Timespec
}

// Stat looks at dir/FileName without following a symlink at either level
// and without opening it: one call per poll.
func Stat(dir string) (Info, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(unix.AT_FDCWD, filepath.Join(dir, FileName), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Info{}, &os.PathError{Op: "stat", Path: filepath.Join(dir, FileName), Err: err}
	}
	return infoOf(&st), nil
}

func infoOf(st *unix.Stat_t) Info {
	return Info{
		ID:      FileID{Dev: uint64(st.Dev), Ino: st.Ino},
		Size:    st.Size,
		ModTime: time.Unix(st.Mtim.Unix()),
		ctime:   st.Ctim,
	}
}

// File is an opened checkpoint, read through Read; Verify after reading
// says whether it changed meanwhile.
type File struct {
	*os.File
	Info Info
}

// Open opens dir/FileName for reading the way an agent running as root
// must read a file a workload controls: the directory and the file are
// opened without following symlinks, and the file must be a regular file
// with one link, owned by uid (uid < 0: any owner), of at most max bytes
// (max <= 0: no limit). The caller closes it.
func Open(dir string, uid int, max int64) (*File, error) {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(dfd)
	path := filepath.Join(dir, FileName)
	fd, err := unix.Openat(dfd, FileName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("open %s: %w (a symlink)", path, ErrNotRegular)
	case err != nil:
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if err := check(path, &st, uid, max); err != nil {
		f.Close()
		return nil, err
	}
	return &File{File: f, Info: infoOf(&st)}, nil
}

func check(path string, st *unix.Stat_t, uid int, max int64) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("open %s: %w (mode %o)", path, ErrNotRegular, st.Mode&unix.S_IFMT)
	case st.Nlink != 1:
		return fmt.Errorf("open %s: %w (%d links)", path, ErrHardLinked, st.Nlink)
	case uid >= 0 && int(st.Uid) != uid:
		return fmt.Errorf("open %s: %w (owner uid %d, the workload runs as %d)", path, ErrWrongOwner, st.Uid, uid)
	case max > 0 && st.Size > max:
		return fmt.Errorf("open %s: %w (%d bytes, the limit is %d)", path, ErrTooLarge, st.Size, max)
	}
	return nil
}

// Verify reports ErrModified when the file's size, modification or change
// time differ from when it was opened: it was written in place while read.
func (f *File) Verify() error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return &os.PathError{Op: "stat", Path: f.Name(), Err: err}
	}
	now := infoOf(&st)
	if now.Size != f.Info.Size || !now.ModTime.Equal(f.Info.ModTime) || now.ctime != f.Info.ctime {
		return fmt.Errorf("read %s: %w", f.Name(), ErrModified)
	}
	return nil
}
