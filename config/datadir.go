package config

import (
	"errors"
	"fmt"
	"os"
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
