package mkdirs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestMake(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	base := t.TempDir()
	if err := os.Chmod(base, 0o750); err != nil {
		t.Fatal(err)
	}
	leaf := filepath.Join(base, "a", "b", "data")
	if err := Make(leaf, 0o755, 0o700); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{base: 0o750, filepath.Join(base, "a"): 0o755, filepath.Join(base, "a", "b"): 0o755, leaf: 0o700} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
			t.Errorf("Make: %s mode %v (%v), want %04o", path, st.Mode().Perm(), err, want)
		}
	}
	if err := Make(leaf, 0o711, 0o711); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(leaf); st.Mode().Perm() != 0o700 {
		t.Errorf("Make on an existing dir changed its mode to %04o", st.Mode().Perm())
	}
}
