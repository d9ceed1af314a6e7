// Package mkdirs creates a directory and its missing parents with modes
// of their own, whatever the umask: the data dir (0700) below parents
// workload users must search (0755), the workloads' directories (0711).
// Directories that exist keep their modes.
package mkdirs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Make creates dir with mode leaf when it is missing, and its missing
// parents with mode parent; each is chmod-ed after its mkdir, so a umask
// (a unit's UMask=0077) cannot narrow them. Directories that exist are
// left as they are.
func Make(dir string, parent, leaf os.FileMode) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	var missing []string
	for p := abs; ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, p)
		if p == filepath.Dir(p) {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		mode := parent
		if i == 0 {
			mode = leaf
		}
		if err := os.Mkdir(missing[i], mode); errors.Is(err, fs.ErrExist) {
			continue
		} else if err != nil {
			return err
		}
		if err := os.Chmod(missing[i], mode); err != nil {
			return err
		}
	}
	return nil
}
