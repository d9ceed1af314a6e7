package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"provideragent/agent"
	"provideragent/config"
	"provideragent/internal/relaytest"
)

var statusURL = regexp.MustCompile(`status (http://[0-9.]+:[0-9]+/status)`)

// TestRunStopsOnSignal runs `provider-agent run` (built without -race) as a
// child process against three child relays with a temp data dir and a 0600
// key file, waits until it is connected to the relays, and checks that it
// exits 0 after SIGTERM and after SIGINT.
func TestRunStopsOnSignal(t *testing.T) {
	t.Parallel()
	bin := agentBinary(t)
	tests := []struct {
		name string
		sig  syscall.Signal
	}{
		{"SIGTERM", syscall.SIGTERM},
		{"SIGINT", syscall.SIGINT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var relays []string
			for range 3 {
				relays = append(relays, "--relay", relaytest.Start(t).URL())
			}
			dataDir := t.TempDir()
			if _, err := config.GenerateKeyFile(filepath.Join(dataDir, "identity.key")); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"run", "--data-dir", dataDir, "--quorum", "2", "--listen", "127.0.0.1:0"}, relays...)
			cmd := exec.Command(bin, args...)
			// Only the child's own settings: no PROVIDER_AGENT_* from the
			// test's environment.
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, config.EnvPrefix) {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			stderr := &lockedBuffer{}
			cmd.Stderr = stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			lines := make(chan string, 16)
			var stdout lockedBuffer
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					stdout.Write([]byte(sc.Text() + "\n"))
					select {
					case lines <- sc.Text():
					default:
					}
				}
				done <- cmd.Wait()
			}()
			exited := false
			defer func() {
				if !exited {
					_ = cmd.Process.Kill()
					<-done
				}
				if t.Failed() {
					t.Logf("run stdout:\n%s\nrun stderr:\n%s", stdout.String(), stderr.String())
				}
			}()

			// The first line names the status endpoint.
			var status string
			select {
			case line := <-lines:
				m := statusURL.FindStringSubmatch(line)
				if m == nil {
					t.Fatalf("run's first line = %q, want %v", line, statusURL)
				}
				status = m[1]
			case err := <-done:
				exited = true
				t.Fatalf("run exited before starting: %v", err)
			case <-time.After(30 * time.Second):
				t.Fatalf("run printed nothing within 30 s")
			}
			// Steady state: connected to a quorum of relays.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := waitRelaysConnected(ctx, status, 2); err != nil {
				t.Fatalf("waiting for run to connect to 2 relays: %v", err)
			}

			if err := cmd.Process.Signal(tt.sig); err != nil {
				t.Fatal(err)
			}
			sent := time.Now()
			select {
			case err := <-done:
				exited = true
				if err != nil {
					t.Fatalf("run after %s exited with %v, want 0", tt.name, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("run did not exit within 30 s of %s", tt.name)
			}
			if !strings.Contains(stdout.String(), "provider-agent: stopped") {
				t.Errorf("run stdout after %s lacks %q", tt.name, "provider-agent: stopped")
			}
			t.Logf("run exited 0 %v after %s", time.Since(sent).Round(time.Millisecond), tt.name)
		})
	}
}

// waitRelaysConnected polls the agent's /status until at least n relays
// are connected or ctx ends.
func waitRelaysConnected(ctx context.Context, url string, n int) error {
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err != nil {
			last = err
		} else {
			var st agent.Status
			err := json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			up := 0
			for _, r := range st.Relays {
				if r.Connected {
					up++
				}
			}
			if err == nil && up >= n {
				return nil
			}
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return last
			}
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lockedBuffer is a strings.Builder safe for a writer goroutine and a
// reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
