package backend

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// PodmanProbe is what ProbePodman found: podman as the podman backend
// will run it.
type PodmanProbe struct {
	// Podman is the resolved podman binary, Version its version.
	Podman, Version string
	// Runtime is the OCI runtime podman run uses: the one RunArgs name
	// with --runtime, else podman's default.
	Runtime string
	// User is the uid:gid the throwaway container ran as ("" when
	// workloads are not isolated: the image's user).
	User string
	// Took is how long the throwaway container took, from create to exit.
	Took time.Duration
}

// ErrPodmanProbe means the throwaway container of ProbePodman did not
// run; the error carries podman's (or the OCI runtime's) own line.
var ErrPodmanProbe = errors.New("a container with the podman backend's options did not run")

// ProbePodman checks podman as the podman backend will use it, without
// starting the backend: the binary, the OCI runtime, and one throwaway
// container run with cfg.RunArgs and the options the backend adds to
// every container (passthrough log driver, an env file, a bind-mounted
// checkpoint directory, no network, and when isolating the first
// workload uid with no capability and no_new_privs). Its image is made
// here and removed after: one static program that exits 0, imported with
// podman import (no registry needed). It needs root, as the backend does.
func ProbePodman(ctx context.Context, cfg PodmanConfig) (PodmanProbe, error) {
	var pr PodmanProbe
	if cfg.Podman == "" {
		cfg.Podman = "podman"
	}
	path, err := exec.LookPath(cfg.Podman)
	if err != nil {
		return pr, fmt.Errorf("backend.podman = %q: %w: install podman (apt-get install podman runc) or point backend.podman at it: %w", cfg.Podman, err, ErrNoPodman)
	}
	pr.Podman = path
	if os.Geteuid() != 0 {
		return pr, fmt.Errorf("the podman backend runs rootful podman and this user is uid %d, not root: %w", os.Geteuid(), ErrNoPodman)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "version", "--format", "{{.Client.Version}}").Output()
	if err != nil {
		return pr, fmt.Errorf("%s version: %w%s", path, err, stderrOf(err))
	}
	pr.Version = strings.TrimSpace(string(out))
	pr.Runtime = runtimeArg(cfg.RunArgs)
	if pr.Runtime == "" {
		out, err := exec.CommandContext(ctx, path, "info", "--format", "{{.Host.OCIRuntime.Name}}").Output()
		if err != nil {
			return pr, fmt.Errorf("%s info: %w%s", path, err, stderrOf(err))
		}
		pr.Runtime = strings.TrimSpace(string(out)) + " (podman's default)"
	} else if _, err := exec.LookPath(pr.Runtime); err != nil && !filepath.IsAbs(pr.Runtime) {
		// podman also finds runtimes in its own list of paths: only say
		// what run will hit if the container below fails.
		pr.Runtime += " (not in PATH)"
	}

	dir, err := os.MkdirTemp("", "provider-agent-podman-probe-")
	if err != nil {
		return pr, err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o711); err != nil {
		return pr, err
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	image := "localhost/provider-agent-probe:" + hex.EncodeToString(nonce[:])
	rootfs, err := trueImage()
	if err != nil {
		return pr, err
	}
	tarPath := filepath.Join(dir, "rootfs.tar")
	if err := os.WriteFile(tarPath, rootfs, 0o600); err != nil {
		return pr, err
	}
	if out, err := exec.CommandContext(ctx, path, "import", tarPath, image).CombinedOutput(); err != nil {
		return pr, fmt.Errorf("podman import of the probe image: %w: %s", err, strings.TrimSpace(string(out)))
	}
	defer func() {
		rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer rcancel()
		_ = exec.CommandContext(rctx, path, "rmi", "--force", image).Run()
	}()
	ckpt := filepath.Join(dir, "checkpoint")
	envFile := filepath.Join(dir, "env")
	if err := os.Mkdir(ckpt, 0o700); err != nil {
		return pr, err
	}
	if err := os.WriteFile(envFile, []byte("PROVIDER_AGENT_WORKLOAD_ID=probe\n"), 0o600); err != nil {
		return pr, err
	}
	args := []string{"run", "--rm", "--name", "provider-agent-probe-" + hex.EncodeToString(nonce[:])}
	args = append(args, cfg.RunArgs...)
	args = append(args, "--log-driver", "passthrough", "--env-file", envFile,
		"--volume", ckpt+":"+ContainerCheckpointDir, "--network", "none")
	if cfg.Isolation != IsolateNone {
		uid := cfg.WorkloadUIDs.First
		if uid == 0 {
			uid = DefaultWorkloadUIDs.First
		}
		gid := uid
		if cfg.WorkloadUser != "" {
			if u, g, _, err := lookupUser(cfg.WorkloadUser); err == nil {
				uid, gid = u, g
			}
		}
		if err := os.Chown(ckpt, int(uid), int(gid)); err != nil {
			return pr, err
		}
		pr.User = fmt.Sprintf("%d:%d", uid, gid)
		args = append(args, "--user", pr.User, "--cap-drop", "all", "--security-opt", "no-new-privileges")
	}
	args = append(args, image, "/true")
	logPath := filepath.Join(dir, "probe.log")
	log, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return pr, err
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	start := time.Now()
	err = cmd.Run()
	pr.Took = time.Since(start)
	log.Close()
	if err != nil {
		e := Exit{Code: -1}
		if cmd.ProcessState != nil {
			e.Code, e.Signal = podmanStatus(cmd.ProcessState.ExitCode())
		}
		appendLog(logPath, logMarker+"probe ended: "+e.String()+"\n")
		return pr, fmt.Errorf("podman run with run args %q: %s: %w", cfg.RunArgs, ExitReason(logPath), ErrPodmanProbe)
	}
	return pr, nil
}

// runtimeArg is the value of --runtime in args ("" when absent).
func runtimeArg(args []string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--runtime="); ok {
			return v
		}
		if a == "--runtime" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// trueImage is a root file system of one file, /true: a static ELF
// program for this machine that exits 0 (a few instructions: exit(0)).
func trueImage() ([]byte, error) {
	var code []byte
	var machine uint16
	switch runtime.GOARCH {
	case "amd64":
		// mov edi, 0; mov eax, 60 (exit); syscall
		code, machine = []byte{0xbf, 0, 0, 0, 0, 0xb8, 60, 0, 0, 0, 0x0f, 0x05}, 62
	case "arm64":
		// mov x0, #0; mov x8, #93 (exit); svc #0
		code, machine = []byte{0x00, 0x00, 0x80, 0xd2, 0xa8, 0x0b, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4}, 183
	default:
		return nil, fmt.Errorf("the podman probe has no program for %s", runtime.GOARCH)
	}
	const base, hdr = 0x400000, 64 + 56
	var b bytes.Buffer
	le := binary.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	for _, v := range []any{uint16(2), machine, uint32(1), uint64(base + hdr), uint64(64), uint64(0), uint32(0),
		uint16(64), uint16(56), uint16(1), uint16(0), uint16(0), uint16(0)} {
		_ = binary.Write(&b, le, v)
	}
	// One PT_LOAD segment, read and execute, mapping the whole file.
	size := uint64(hdr + len(code))
	for _, v := range []any{uint32(1), uint32(5), uint64(0), uint64(base), uint64(base), size, size, uint64(0x1000)} {
		_ = binary.Write(&b, le, v)
	}
	b.Write(code)
	var t bytes.Buffer
	tw := tar.NewWriter(&t)
	if err := tw.WriteHeader(&tar.Header{Name: "true", Mode: 0o755, Size: int64(b.Len()), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(b.Bytes()); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return t.Bytes(), nil
}
