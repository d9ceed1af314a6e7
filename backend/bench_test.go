package backend

import (
	"context"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"provideragent/backend/backendtest"
	"provideragent/internal/imagespec"
)

// BenchmarkStartStop starts a workload and stops it (SIGTERM, exit observed,
// Exit delivered) per iteration, under each containment this host offers
// (isolated, as by default; auto also without isolation), and reports
// cycles/s next to a baseline measured in the same run: bare exec.Cmd
// start, SIGTERM and wait.
func BenchmarkStartStop(b *testing.B) {
	ctx := context.Background()
	const warm, baseN = 5, 100
	var start time.Time
	for i := 0; i < warm+baseN; i++ {
		if i == warm {
			start = time.Now()
		}
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
	base := float64(baseN) / time.Since(start).Seconds()

	cases := append([]containCase{{"auto", ContainAuto, 0, ""}, {"auto-isolation-none", ContainAuto, 0, IsolateNone}}, containCases(b)...)
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			cfg := ProcessConfig{StopGrace: 10 * time.Second, LogDir: b.TempDir(), Containment: c.mode, cgroupVersion: c.cgroupVersion,
				Isolation: c.isolation}
			p, err := NewProcess(cfg, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(ctx)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id := "bench-" + strconv.Itoa(i%100)
				if err := p.Start(ctx, StartSpec{WorkloadID: id, Epoch: 1, Command: []string{"sleep", "60"}}); err != nil {
					b.Fatal(err)
				}
				if err := p.Stop(ctx, id, "bench"); err != nil {
					b.Fatal(err)
				}
				<-p.Exits()
			}
			rate := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "cycles/s")
			b.ReportMetric(base, "baseline_cycles/s")
			b.ReportMetric(rate/base, "ratio_to_baseline")
		})
	}
}

// BenchmarkPodmanStartStop starts a container of the test image, waits
// until it runs, and stops it (SIGTERM to its processes, podman run ended,
// record removed, Exit delivered) per iteration.
func BenchmarkPodmanStartStop(b *testing.B) {
	backendtest.Busybox(b)
	cfg := DefaultPodmanConfig()
	cfg.StopGrace, cfg.LogDir, cfg.WorkloadDir, cfg.RunArgs = 10*time.Second, b.TempDir(), reachableDir(b), backendtest.RunArgs
	ctx := context.Background()
	p, err := NewPodman(ctx, cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(ctx)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := "bench-" + strconv.Itoa(i%100)
		if err := p.Start(ctx, bbSpec(id, 1, imagespec.Image{}, "exec sleep 60")); err != nil {
			b.Fatal(err)
		}
		// Stopped once it runs (a stop before the container joined its
		// supervisor's namespace would measure a failed start).
		p.holders.mu.Lock()
		holder := p.holders.procs[id].cmd.Process.Pid
		p.holders.mu.Unlock()
		for len(namespaceProcs(holder)) == 0 {
			time.Sleep(time.Millisecond)
		}
		if err := p.Stop(ctx, id, "bench"); err != nil {
			b.Fatal(err)
		}
		<-p.Exits()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/cycle")
}
