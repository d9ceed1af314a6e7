package backend

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRotatingLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.log")
	l, err := openRotatingLog(path, 1<<20, 2, false)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("x"), 300<<10)
	for i := range 20 {
		chunk[0] = byte('a' + i)
		if _, err := l.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	var total int64
	for _, name := range []string{"w.log", "w.log.1", "w.log.2"} {
		st, err := os.Stat(filepath.Join(filepath.Dir(path), name))
		if err != nil {
			t.Fatalf("after 6 MiB into a 1 MiB log keeping 2: %v", err)
		}
		if st.Size() > 1<<20 {
			t.Errorf("%s is %d bytes, want at most 1 MiB", name, st.Size())
		}
		total += st.Size()
	}
	if _, err := os.Stat(path + ".3"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("w.log.3 exists (%v), want only 2 rotated parts kept", err)
	}
	data, _ := os.ReadFile(path)
	if !bytes.Contains(data, []byte("t")) || total > 3<<20 {
		t.Errorf("current log lacks the last write, or %d bytes in all (want at most 3 MiB)", total)
	}
	// keep 0: truncated in place.
	l, err = openRotatingLog(path, 4096, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = l.Write(bytes.Repeat([]byte("y"), 10000))
	l.Close()
	if st, _ := os.Stat(path); st.Size() > 4096 {
		t.Errorf("keep 0: log is %d bytes, want at most 4096", st.Size())
	}
}

func TestDirUsage(t *testing.T) {
	dir := t.TempDir()
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(dir, "f"+string(rune('0'+i))), bytes.Repeat([]byte("z"), 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b, n, over := dirUsage([]string{dir, filepath.Join(dir, "missing")}, DirLimit{MaxBytes: 10 << 20, MaxFiles: 100})
	if b < 5<<20 || n != 6 || over != "" {
		t.Errorf("dirUsage = %d bytes, %d entries, %q; want 5 MiB, 6 entries, not over", b, n, over)
	}
	if _, _, over := dirUsage([]string{dir}, DirLimit{MaxBytes: 2 << 20}); !strings.Contains(over, "workload_dir_max_mib") {
		t.Errorf("dirUsage over 2 MiB = %q, want it to name workload_dir_max_mib", over)
	}
	if _, n, over := dirUsage([]string{dir}, DirLimit{MaxFiles: 3}); !strings.Contains(over, "workload_dir_max_files") || n != 4 {
		t.Errorf("dirUsage over 3 entries = %d, %q; want it to stop at 4 and name workload_dir_max_files", n, over)
	}
}

// TestHostileWriterIsBounded: a workload that writes to its output and to
// its home as fast as it can keeps its log within the cap (rotated), is
// killed once its directory passes the bound (a crash, with the reason on
// its end line and in ExitReason), and cannot start again while its
// directory stays full.
func TestHostileWriterIsBounded(t *testing.T) {
	t.Parallel()
	cfg := DefaultProcessConfig()
	cfg.StopGrace = time.Second
	cfg.LogDir = filepath.Join(t.TempDir(), "logs")
	cfg.WorkloadDir = reachableDir(t)
	cfg.Log = LogLimit{MaxBytes: 1 << 20, Keep: 1}
	cfg.Dirs = DirLimit{MaxBytes: 8 << 20, MaxFiles: 1000, Interval: 100 * time.Millisecond}
	b, err := NewProcess(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	// The directory fills a second after the output starts, so that the log
	// has rotated by then even where the disk is much faster than the
	// copy of the output (on a fresh CI machine the directory passed 8 MiB
	// 313 ms after the start, with the log still at 1 MiB).
	line := `yes AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA & sleep 1; i=0; while :; do head -c 1048576 /dev/zero > f$i; i=$((i+1)); done`
	start := time.Now()
	if err := b.Start(context.Background(), StartSpec{WorkloadID: "hog", Epoch: 1, Command: ShellCommand(line)}); err != nil {
		t.Fatal(err)
	}
	e := nextExit(t, b)
	if e.Stopped || e.Signal != "SIGKILL" {
		t.Errorf("exit = %+v, want a crash by SIGKILL (killed over its disk limit)", e)
	}
	t.Logf("killed %v after its start", time.Since(start).Round(time.Millisecond))
	var total int64
	for _, p := range []string{b.LogPath("hog"), b.LogPath("hog") + ".1"} {
		if st, err := os.Stat(p); err == nil {
			total += st.Size()
		}
	}
	if _, err := os.Stat(b.LogPath("hog") + ".1"); err != nil || total > 2<<20+4096 {
		t.Errorf("log: %d bytes in all (rotated part: %v), want rotated and at most 2 MiB", total, err)
	}
	if r := ExitReason(b.LogPath("hog")); !strings.Contains(r, "workload_dir_max_mib") {
		t.Errorf("ExitReason = %q, want the disk limit", r)
	}
	err = b.Start(context.Background(), StartSpec{WorkloadID: "hog", Epoch: 1, Command: ShellCommand("sleep 100")})
	if !errors.Is(err, ErrDiskLimit) {
		t.Errorf("Start with its directory still full = %v, want ErrDiskLimit", err)
	}
}
