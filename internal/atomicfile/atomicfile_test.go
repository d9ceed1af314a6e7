package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: the file appears whole (mode 0600) or not at all; a
// failed write leaves the old contents and no temporary file behind.
func TestWrite(t *testing.T) {
	errBoom := errors.New("boom")
	tests := []struct {
		name    string
		old     string // "" = no file before
		write   func(io.Writer) error
		wantErr error
		want    string
	}{
		{"new file", "", func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }, nil, "new"},
		{"replace", "old", func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }, nil, "new"},
		{"write fails", "old", func(w io.Writer) error { io.WriteString(w, "half"); return errBoom }, errBoom, "old"},
		{"write fails, no file", "", func(w io.Writer) error { return errBoom }, errBoom, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out.json")
			if tt.old != "" {
				if err := os.WriteFile(path, []byte(tt.old), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := Write(path, tt.write)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Write(%s) = %v, want %v", tt.name, err, tt.wantErr)
			}
			got, rerr := os.ReadFile(path)
			if tt.want == "" {
				if !errors.Is(rerr, os.ErrNotExist) {
					t.Errorf("after failed Write: stat = %v, want no file", rerr)
				}
			} else if string(got) != tt.want {
				t.Errorf("Write(%s) left %q, want %q", tt.name, got, tt.want)
			}
			if err == nil {
				if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
					t.Errorf("Write mode = %v, want 0600", st.Mode().Perm())
				}
			}
			wantFiles := 1
			if tt.want == "" {
				wantFiles = 0
			}
			if ents, _ := os.ReadDir(dir); len(ents) != wantFiles {
				t.Errorf("Write(%s) left %d files in the directory, want %d (no temporary file)", tt.name, len(ents), wantFiles)
			}
		})
	}
	if err := Write(filepath.Join(t.TempDir(), "no", "dir", "f"), func(io.Writer) error { return nil }); err == nil {
		t.Errorf("Write into a missing directory = nil, want an error")
	}
}
