package config

import (
	"errors"
	"fmt"
	"os"

	"provideragent/internal/mkdirs"
)

// ErrDataDirMode means the data dir grants some permission to group or
// others.
var ErrDataDirMode = errors.New("data dir permissions too open")

// CheckDataDirMode reports (ErrDataDirMode, with the path, the mode and
// the chmod fix) when the data dir at path grants any permission to group
// or others: it holds the database, the key file by default, and logs/,
// whose workload logs may hold secrets. run warns rather than refuses, as
// the files in it have modes of their own (0600, and logs/ 0700), and does
// not change the mode itself: the operator may share the directory on
// purpose. Errors of stat are returned as they are.
func CheckDataDirMode(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("data dir %s: mode %04o lets group or others into it (the database, the key file, workload logs); run 'chmod 700 %s': %w",
			path, perm, path, ErrDataDirMode)
	}
	return nil
}

// MakeDataDir creates the data dir at path mode 0700 when it is missing,
// and its missing parents mode 0755 whatever the umask: a parent also
// holds what others must reach (backend.workload_dir's default,
// /var/lib/provider-agent/workloads, lies beside the data dir, and
// workload users must search its parent). Directories that exist are
// left as they are.
func MakeDataDir(path string) error { return mkdirs.Make(path, 0o755, 0o700) }
