package backend

import (
	"context"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkStartStop starts a workload and stops it (SIGTERM, exit observed,
// Exit delivered) per iteration, under each containment this host offers,
// and reports cycles/s next to a baseline measured in the same run: bare
// exec.Cmd start, SIGTERM and wait.
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

	for _, c := range append([]containCase{{"auto", ContainAuto, 0, ""}}, containCases(b)...) {
		b.Run(c.name, func(b *testing.B) {
			cfg := ProcessConfig{StopGrace: 10 * time.Second, LogDir: b.TempDir(), Containment: c.mode, cgroupVersion: c.cgroupVersion}
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
