// Package backendtest helps tests run the podman backend for real, with no
// registry: Busybox builds (once per host) a small local OCI image holding
// a static busybox, with podman import, and RunArgs are the podman run
// options this project's CI machines need.
package backendtest

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BusyboxImage is the image Busybox builds.
const BusyboxImage = "localhost/provider-agent-test-busybox:1"

// RunArgs are the podman run options of the CI machines: podman 4.3's
// default runtime, crun, refuses their hybrid cgroups, and podman's
// default limits exceed what their sandbox allows.
var RunArgs = []string{"--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"}

var (
	once     sync.Once
	buildErr error
)

// Busybox returns BusyboxImage, building it first if this host does not
// have it. It skips the test when not root (the podman backend runs
// rootful podman) and fails it when podman, runc or a static busybox is
// missing: CI installs them (.ci/run), and a missing podman must fail CI
// rather than skip the container tests.
func Busybox(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the podman backend needs root")
	}
	for _, tool := range []string{"podman", "runc", "busybox"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: the container tests need podman, runc and busybox-static (apt-get install -y podman runc busybox-static; .ci/run installs them)", tool)
		}
	}
	once.Do(func() { buildErr = build() })
	if buildErr != nil {
		t.Fatalf("build the test image %s: %v", BusyboxImage, buildErr)
	}
	return BusyboxImage
}

// build imports a root filesystem holding busybox and a link per applet,
// unless the image exists. A lock file serialises test binaries that
// build it at the same time.
func build() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lock, err := os.OpenFile(filepath.Join(os.TempDir(), "provider-agent-test-busybox.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	if exec.CommandContext(ctx, "podman", "image", "exists", BusyboxImage).Run() == nil {
		return nil
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return err
	}
	bb, err = filepath.EvalSymlinks(bb)
	if err != nil {
		return err
	}
	if err := static(bb); err != nil {
		return err
	}
	body, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	list, err := exec.CommandContext(ctx, bb, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	for _, d := range []struct {
		name string
		mode int64
	}{{"bin/", 0o755}, {"etc/", 0o755}, {"tmp/", 0o1777}, {"proc/", 0o555}, {"sys/", 0o555}, {"dev/", 0o755}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.name, Mode: d.mode, ModTime: now}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(body)), ModTime: now}); err != nil {
		return err
	}
	if _, err := tw.Write(body); err != nil {
		return err
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777, ModTime: now}); err != nil {
			return err
		}
	}
	for name, text := range map[string]string{
		"etc/passwd": "root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n",
		"etc/group":  "root:x:0:\nnogroup:x:65534:\n",
	} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(text)), ModTime: now}); err != nil {
			return err
		}
		if _, err := tw.Write([]byte(text)); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "provider-agent-busybox-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tarball := filepath.Join(dir, "rootfs.tar")
	if err := os.WriteFile(tarball, buf.Bytes(), 0o600); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "podman", "import", "--quiet", "--change", "CMD [\"/bin/sh\"]", tarball, BusyboxImage).CombinedOutput()
	if err != nil {
		return fmt.Errorf("podman import: %w: %s", err, out)
	}
	return nil
}

// static checks that the ELF file at path needs no interpreter (a
// dynamically linked busybox would not run in an image without a libc).
func static(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: install busybox-static", path)
		}
	}
	return nil
}
