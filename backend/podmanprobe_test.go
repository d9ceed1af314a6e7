package backend_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"provideragent/backend"
	"provideragent/backend/backendtest"
)

// TestProbePodman runs ProbePodman for real: with the CI machines' run
// args a throwaway container runs as the first workload uid; without the
// runtime podman needs here, or with a podman that does not exist, it
// fails naming the cause.
func TestProbePodman(t *testing.T) {
	t.Parallel()
	backendtest.Busybox(t) // root, podman, runc
	ctx := context.Background()
	cfg := backend.DefaultPodmanConfig()
	cfg.RunArgs = backendtest.RunArgs
	pr, err := backend.ProbePodman(ctx, cfg)
	if err != nil {
		t.Fatalf("ProbePodman(%v) = %v, want a container that ran", cfg.RunArgs, err)
	}
	if pr.Runtime != "runc" || pr.User != "1900000000:1900000000" || pr.Version == "" {
		t.Errorf("ProbePodman = %+v, want runtime runc as 1900000000:1900000000", pr)
	}
	cfg.RunArgs = []string{"--runtime", "no-such-runtime"}
	if _, err := backend.ProbePodman(ctx, cfg); !errors.Is(err, backend.ErrPodmanProbe) || !strings.Contains(err.Error(), "no-such-runtime") {
		t.Errorf("ProbePodman(--runtime no-such-runtime) = %v, want ErrPodmanProbe naming the runtime", err)
	}
	cfg.Podman = "/nonexistent/podman"
	if _, err := backend.ProbePodman(ctx, cfg); !errors.Is(err, backend.ErrNoPodman) || !strings.Contains(err.Error(), "/nonexistent/podman") {
		t.Errorf("ProbePodman(podman = /nonexistent/podman) = %v, want ErrNoPodman naming it", err)
	}
}
