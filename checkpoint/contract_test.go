package checkpoint

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// put writes a checkpoint as the contract says: another name, then rename.
func put(t *testing.T, dir, content string) {
	t.Helper()
	tmp := filepath.Join(dir, "checkpoint.tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, FileName)); err != nil {
		t.Fatal(err)
	}
}

func TestOpenReadsAWellFormedCheckpoint(t *testing.T) {
	dir := t.TempDir()
	put(t, dir, "state 42")
	f, err := Open(dir, os.Getuid(), 1024)
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil || string(b) != "state 42" || f.Info.Size != 8 {
		t.Fatalf("read %q (%v), size %d; want the file", b, err, f.Info.Size)
	}
	if err := f.Verify(); err != nil {
		t.Fatalf("Verify = %v, want nil", err)
	}
}

// Each way a workload could make the agent read something else is refused
// with its own error, and a missing checkpoint is os.ErrNotExist.
func TestOpenRefuses(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "identity.key")
	if err := os.WriteFile(secret, []byte("the agent's key"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		make func(dir string) error
		uid  int
		max  int64
		want error
	}{
		{"missing", func(string) error { return nil }, -1, 0, os.ErrNotExist},
		{"symlink to the key", func(dir string) error { return os.Symlink(secret, filepath.Join(dir, FileName)) }, -1, 0, ErrNotRegular},
		{"directory", func(dir string) error { return os.Mkdir(filepath.Join(dir, FileName), 0o700) }, -1, 0, ErrNotRegular},
		{"fifo", func(dir string) error { return syscall.Mkfifo(filepath.Join(dir, FileName), 0o600) }, -1, 0, ErrNotRegular},
		{"hard link to the key", func(dir string) error { return os.Link(secret, filepath.Join(dir, FileName)) }, -1, 0, ErrHardLinked},
		{"another owner", func(dir string) error { return os.WriteFile(filepath.Join(dir, FileName), []byte("x"), 0o600) }, os.Getuid() + 1, 0, ErrWrongOwner},
		{"too large", func(dir string) error { return os.WriteFile(filepath.Join(dir, FileName), make([]byte, 11), 0o600) }, -1, 10, ErrTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(filepath.Dir(secret), "ckpt-"+tt.name) // beside the key: a hard link needs one file system
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := tt.make(dir); err != nil {
				t.Fatal(err)
			}
			f, err := Open(dir, tt.uid, tt.max)
			if f != nil {
				f.Close()
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Open = %v, want %v", err, tt.want)
			}
		})
	}
	// The directory itself a symlink: refused too.
	real := t.TempDir()
	put(t, real, "x")
	link := filepath.Join(t.TempDir(), "dir")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if f, err := Open(link, -1, 0); err == nil {
		f.Close()
		t.Fatalf("Open(symlinked directory) = nil, want an error")
	}
}

// A checkpoint written in place while it is read is reported.
func TestVerifySeesAWriteInPlace(t *testing.T) {
	dir := t.TempDir()
	put(t, dir, "v1")
	f, err := Open(dir, -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("v2 longer"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.Verify(); !errors.Is(err, ErrModified) {
		t.Fatalf("Verify after a write in place = %v, want ErrModified", err)
	}
}
