// Package imagespec is how a lease names an OCI container image to run
// instead of a command. The lease machine treats a workload's command
// (lease.Spec.Command) as an opaque argv; an image run is carried in that
// same argv, as Encode writes it: the marker "@image", the image reference,
// its options as key=value words, "--", then the command to run in the
// container (empty: the image's own). The wire format (heartbeat's lease
// grant) carries it as an "image" object beside "command"; backends Decode
// it: the podman backend runs it, the process backend refuses it.
package imagespec

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Marker is Command[0] of a command that names an image.
const Marker = "@image"

// Limits of an Image, checked by Validate.
const (
	MaxRefLen   = 512
	MaxEnv      = 64
	MaxEnvLen   = 4096
	MaxCPUs     = 1024
	MaxMemoryMB = 1 << 24 // 16 TiB
)

// ErrBadImage wraps every error of Validate and Decode.
var ErrBadImage = errors.New("bad image spec")

// Image is a container image run: what a grant's "image" object says.
type Image struct {
	// Ref is the image reference ("docker.io/library/nginx:1.27",
	// "localhost/bb:1"), as podman takes it.
	Ref string `json:"ref"`
	// CPUs limits the container's CPU time (0.5 is half a core); 0 is no
	// limit.
	CPUs float64 `json:"cpus,omitempty"`
	// MemoryMB limits the container's memory in MiB (swap included); 0 is
	// no limit.
	MemoryMB int64 `json:"memory_mb,omitempty"`
	// Env entries ("KEY=value") are added to the container's environment.
	Env []string `json:"env,omitempty"`
	// Network gives the container the host's default container network;
	// false (the default) gives it none (loopback only).
	Network bool `json:"network,omitempty"`
}

// Validate checks an image spec from an untrusted grant.
func (im Image) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadImage}, args...)...)
	}
	if im.Ref == "" || len(im.Ref) > MaxRefLen {
		return bad("image ref of %d bytes, want 1 to %d", len(im.Ref), MaxRefLen)
	}
	for _, c := range im.Ref {
		if c <= 0x20 || c >= 0x7f {
			return bad("image ref %q: want printable ascii without spaces", im.Ref)
		}
	}
	if strings.HasPrefix(im.Ref, "-") {
		return bad("image ref %q starts with '-'", im.Ref)
	}
	if math.IsNaN(im.CPUs) || im.CPUs < 0 || im.CPUs > MaxCPUs {
		return bad("cpus = %v, want 0 (no limit) to %d", im.CPUs, MaxCPUs)
	}
	if im.MemoryMB < 0 || im.MemoryMB > MaxMemoryMB {
		return bad("memory_mb = %d, want 0 (no limit) to %d", im.MemoryMB, MaxMemoryMB)
	}
	if len(im.Env) > MaxEnv {
		return bad("%d env entries, max %d", len(im.Env), MaxEnv)
	}
	for i, kv := range im.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || len(kv) > MaxEnvLen || strings.ContainsAny(kv, "\x00\n") {
			return bad("env[%d] = %q: want KEY=value (at most %d bytes, no NUL or newline)", i, kv, MaxEnvLen)
		}
		if strings.HasPrefix(k, "PROVIDER_AGENT_") {
			return bad("env[%d]: %s: the PROVIDER_AGENT_ variables are the agent's to set", i, k)
		}
	}
	return nil
}

// Encode returns the lease command that runs argv (empty: the image's
// own command) in im. im must be valid.
func Encode(im Image, argv []string) []string {
	out := []string{Marker, im.Ref}
	if im.CPUs > 0 {
		out = append(out, "cpus="+strconv.FormatFloat(im.CPUs, 'f', -1, 64))
	}
	if im.MemoryMB > 0 {
		out = append(out, "memory_mb="+strconv.FormatInt(im.MemoryMB, 10))
	}
	for _, kv := range im.Env {
		out = append(out, "env="+kv)
	}
	if im.Network {
		out = append(out, "network=true")
	}
	out = append(out, "--")
	return append(out, argv...)
}

// Is reports whether command names an image.
func Is(command []string) bool { return len(command) > 0 && command[0] == Marker }

// Decode splits a lease command that names an image into the image and
// the argv to run in it. ok is false when command does not name an image
// (it is a plain command); err is set when it does but is malformed.
func Decode(command []string) (im Image, argv []string, ok bool, err error) {
	if !Is(command) {
		return Image{}, nil, false, nil
	}
	if len(command) < 3 {
		return Image{}, nil, true, fmt.Errorf("%w: %q: want %s REF [key=value...] -- [argv...]", ErrBadImage, command, Marker)
	}
	im.Ref = command[1]
	rest := command[2:]
	for i, w := range rest {
		if w == "--" {
			argv = append([]string(nil), rest[i+1:]...)
			if err := im.Validate(); err != nil {
				return Image{}, nil, true, err
			}
			return im, argv, true, nil
		}
		k, v, found := strings.Cut(w, "=")
		if !found {
			return Image{}, nil, true, fmt.Errorf("%w: option %q: want key=value", ErrBadImage, w)
		}
		switch k {
		case "cpus":
			f, perr := strconv.ParseFloat(v, 64)
			if perr != nil {
				return Image{}, nil, true, fmt.Errorf("%w: cpus=%q: %v", ErrBadImage, v, perr)
			}
			im.CPUs = f
		case "memory_mb":
			n, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil {
				return Image{}, nil, true, fmt.Errorf("%w: memory_mb=%q: %v", ErrBadImage, v, perr)
			}
			im.MemoryMB = n
		case "env":
			im.Env = append(im.Env, v)
		case "network":
			b, perr := strconv.ParseBool(v)
			if perr != nil {
				return Image{}, nil, true, fmt.Errorf("%w: network=%q: %v", ErrBadImage, v, perr)
			}
			im.Network = b
		default:
			return Image{}, nil, true, fmt.Errorf("%w: unknown option %q", ErrBadImage, k)
		}
	}
	return Image{}, nil, true, fmt.Errorf("%w: %q has no \"--\" after the options", ErrBadImage, command)
}
