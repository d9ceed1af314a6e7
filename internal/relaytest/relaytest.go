package relaytest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/nbd-wtf/go-nostr"

	"provideragent/internal/localrelay"
)

// BinaryEnv names an environment variable that, when set to an existing
// file, is used as the localrelayd binary instead of building one.
const BinaryEnv = "LOCALRELAYD_BIN"

const pkgPath = "provideragent/internal/localrelay/localrelayd"

// buildFlags build localrelayd (part of the binary's name through
// sourceHash).
var buildFlags = []string{"-tags", "libsecp256k1"}

// ProfileDirEnv names an environment variable that, when set to a
// directory, makes every localrelayd child write its CPU profile there
// (localrelayd-<test pid>-<n>.prof, written when the relay stops).
const ProfileDirEnv = "RELAYTEST_CPUPROFILE_DIR"

var profiles atomic.Int64

// localrelayd is the command of one localrelayd child (a start or restart).
func localrelayd(tb testing.TB) []string {
	cmd := []string{Binary(tb)}
	if dir := os.Getenv(ProfileDirEnv); dir != "" {
		name := fmt.Sprintf("localrelayd-%d-%d.prof", os.Getpid(), profiles.Add(1))
		cmd = append(cmd, "--cpuprofile", filepath.Join(dir, name))
	}
	return cmd
}

// startTimeout bounds how long a child relay may take to come up.
const startTimeout = 30 * time.Second

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary returns the path of the localrelayd binary, built once per test
// process without -race (khatru races on its own listener slice) into the
// user cache directory, or taken from $LOCALRELAYD_BIN.
func Binary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() { buildPath, buildErr = build() })
	if buildErr != nil {
		tb.Fatalf("build localrelayd: %v", buildErr)
	}
	return buildPath
}

func build() (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	dir = filepath.Join(dir, "provideragent-relaytest")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create build dir: %w", err)
	}
	// Named by a hash of its sources: test processes of other checkouts
	// (worktrees, branches) of this module share the cache directory and
	// must never run, or replace, each other's binary.
	sum, err := sourceHash()
	if err != nil {
		return "", err
	}
	final := filepath.Join(dir, "localrelayd-"+runtime.GOOS+"-"+runtime.GOARCH+"-"+sum)
	tmp, err := os.CreateTemp(dir, "localrelayd-*.tmp")
	if err != nil {
		return "", fmt.Errorf("create temp binary: %w", err)
	}
	tmpName := tmp.Name()
	_ = tmp.Close()
	defer os.Remove(tmpName)
	// libsecp256k1 (go-nostr's cgo build tag) verifies signatures about four
	// times faster: the scale tests push thousands of events through three
	// relays on two cores.
	cmd := exec.Command("go", append(append([]string{"build"}, buildFlags...), "-o", tmpName, pkgPath)...)
	cmd.Env = withoutRace(os.Environ())
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkgPath, err, out)
	}
	// Rename is atomic, so concurrent test processes never see half a file.
	if err := os.Rename(tmpName, final); err != nil {
		return "", fmt.Errorf("install binary: %w", err)
	}
	return final, nil
}

// sourceHash hashes what localrelayd is built from: every file under
// internal/localrelay, go.mod and go.sum.
func sourceHash() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the relaytest package")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	h := sha256.New()
	fmt.Fprintf(h, "go build %s\n", strings.Join(buildFlags, " "))
	add := func(path string) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("hash localrelayd sources: %w", err)
		}
		rel, _ := filepath.Rel(root, path)
		fmt.Fprintf(h, "%s %d\n", rel, len(b))
		h.Write(b)
		return nil
	}
	err := filepath.WalkDir(filepath.Join(root, "internal", "localrelay"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		return add(path)
	})
	if err != nil {
		return "", fmt.Errorf("hash localrelayd sources: %w", err)
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if err := add(filepath.Join(root, f)); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func withoutRace(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GOFLAGS="); ok {
			var keep []string
			for _, f := range strings.Fields(v) {
				if f != "-race" && f != "-race=true" {
					keep = append(keep, f)
				}
			}
			kv = "GOFLAGS=" + strings.Join(keep, " ")
		}
		out = append(out, kv)
	}
	return out
}

// Relay is one child-process relay. Its methods are meant for the test
// goroutine; URL and Addr are safe from any goroutine.
type Relay struct {
	tb   testing.TB
	args []string
	// program returns the command that runs the relay (before the
	// --listen, --admin and --exit-on-stdin-eof flags and args).
	program func(tb testing.TB) []string
	kind    Kind

	mu   sync.Mutex
	addr string // host:port, fixed after the first start
	proc *child
}

type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	done   chan struct{}
	stderr *lockedBuffer
}

// StartN starts n relays as Start does and returns them and their URLs,
// in the same order.
func StartN(tb testing.TB, n int) ([]*Relay, []string) {
	tb.Helper()
	var rs []*Relay
	var urls []string
	for range n {
		r := Start(tb)
		rs = append(rs, r)
		urls = append(urls, r.URL())
	}
	return rs, urls
}

// Start runs a child relay on a free 127.0.0.1 port with the given extra
// localrelayd flags (e.g. "--reject-writes"; --admin is always on) and waits
// until it accepts a websocket. The relay is stopped when the test ends.
func Start(tb testing.TB, args ...string) *Relay {
	tb.Helper()
	return start(tb, Khatru, localrelayd, args, placement{listen: "127.0.0.1:0"})
}

// placement is where a relay's process runs: the address it listens on
// and a prefix of its command (a network namespace's ip netns exec).
type placement struct {
	listen string
	wrap   []string
}

func start(tb testing.TB, kind Kind, program func(testing.TB) []string, args []string, at placement) *Relay {
	tb.Helper()
	wrapped := func(tb testing.TB) []string { return append(slices.Clone(at.wrap), program(tb)...) }
	r := &Relay{tb: tb, args: args, program: wrapped, kind: kind}
	r.spawn(at.listen)
	tb.Cleanup(func() {
		r.mu.Lock()
		p := r.proc
		r.mu.Unlock()
		if p != nil {
			if tb.Failed() {
				tb.Logf("relay %s stderr:\n%s", r.URL(), p.stderr.String())
			}
			r.stop(p, false)
		}
	})
	return r
}

// PID is the relay process's pid (0 while it is not running), for tests
// that measure its CPU time and memory.
func (r *Relay) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil || r.proc.cmd.Process == nil {
		return 0
	}
	return r.proc.cmd.Process.Pid
}

// Kind is the relay implementation this Relay runs.
func (r *Relay) Kind() Kind { return r.kind }

// URL is ws://host:port; it stays the same across restarts.
func (r *Relay) URL() string { return "ws://" + r.Addr() }

// Addr is host:port.
func (r *Relay) Addr() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addr
}

// Running reports whether the child process is up.
func (r *Relay) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return false
	}
	select {
	case <-r.proc.done:
		return false
	default:
		return true
	}
}

// Kill stops the relay with SIGKILL (no close frames, like a crash) and
// waits for the process to exit. Stored events are lost.
func (r *Relay) Kill() {
	r.tb.Helper()
	r.halt(true)
}

// Stop shuts the relay down gracefully (websocket close frames).
func (r *Relay) Stop() {
	r.tb.Helper()
	r.halt(false)
}

// halt stops the running process, if any, killing it or shutting it down.
func (r *Relay) halt(kill bool) {
	r.mu.Lock()
	p := r.proc
	r.proc = nil
	r.mu.Unlock()
	if p != nil {
		r.stop(p, kill)
	}
}

// Restart starts the relay again on the same port (stopping it first if it
// is running) and waits until it accepts a websocket.
func (r *Relay) Restart() {
	r.tb.Helper()
	r.Kill()
	r.spawn(r.Addr())
}

func (r *Relay) stop(p *child, kill bool) {
	if kill {
		_ = p.cmd.Process.Kill()
	} else {
		_ = p.stdin.Close() // --exit-on-stdin-eof: graceful shutdown
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (r *Relay) spawn(listen string) {
	r.tb.Helper()
	prog := r.program(r.tb)
	var lastErr error
	for attempt := 0; attempt < 20; attempt++ {
		p, addr, err := startChild(prog, listen, r.args)
		if err == nil {
			r.mu.Lock()
			r.proc, r.addr = p, addr
			r.mu.Unlock()
			return
		}
		lastErr = err
		if !strings.HasSuffix(listen, ":0") {
			// The old port may be briefly unavailable; try again.
			time.Sleep(100 * time.Millisecond)
			continue
		}
		break
	}
	r.tb.Fatalf("start relay on %s: %v", listen, lastErr)
}

func startChild(prog []string, listen string, extra []string) (*child, string, error) {
	bin := prog[0]
	args := append(append(slices.Clone(prog[1:]), "--listen", listen, "--admin", "--exit-on-stdin-eof"), extra...)
	cmd := exec.Command(bin, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", fmt.Errorf("stdin pipe: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", fmt.Errorf("stdout pipe: %w", err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s: %w", bin, err)
	}
	p := &child{cmd: cmd, stdin: stdin, done: make(chan struct{}), stderr: stderr}
	lineCh := make(chan string, 1)
	go func() {
		// Owned by the child: ends when the process closes stdout.
		sc := bufio.NewScanner(stdout)
		first := true
		for sc.Scan() {
			if first {
				lineCh <- sc.Text()
				first = false
			}
		}
		if first {
			close(lineCh)
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	fail := func(err error) (*child, string, error) {
		_ = cmd.Process.Kill()
		<-p.done
		return nil, "", fmt.Errorf("%w (stderr: %s)", err, strings.TrimSpace(stderr.String()))
	}
	var line string
	select {
	case l, ok := <-lineCh:
		if !ok {
			return fail(fmt.Errorf("relay exited before listening"))
		}
		line = l
	case <-time.After(startTimeout):
		return fail(fmt.Errorf("relay did not report its address within %v", startTimeout))
	}
	url, ok := strings.CutPrefix(line, "LISTEN ")
	if !ok {
		return fail(fmt.Errorf("unexpected first line %q", line))
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := waitWebsocket(ctx, url); err != nil {
		return fail(err)
	}
	return p, strings.TrimPrefix(url, "ws://"), nil
}

func waitWebsocket(ctx context.Context, url string) error {
	for {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, resp, err := websocket.Dial(dctx, url, &websocket.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
		cancel()
		if resp != nil && resp.Body != nil {
			_ = resp.Body.Close()
		}
		if err == nil {
			_ = c.CloseNow()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("relay at %s never accepted a websocket: %w", url, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Inject delivers ev verbatim (no checks) to the relay's matching
// subscribers, and stores it when store is true; it returns how many
// subscriptions got it (-1 for NostrRelay, whose broadcast does not say).
// Use it to serve forged, stale or future events.
func (r *Relay) Inject(ev nostr.Event, store bool) int {
	r.tb.Helper()
	body, err := json.Marshal(ev)
	if err != nil {
		r.tb.Fatalf("encode event: %v", err)
	}
	u := "http://" + r.Addr() + localrelay.InjectPath
	if store {
		u += "?store=1"
	}
	resp, err := adminClient.Post(u, "application/json", bytes.NewReader(body))
	if err != nil {
		r.tb.Fatalf("inject into %s: %v", r.URL(), err)
	}
	defer resp.Body.Close()
	var out struct {
		Delivered int `json:"delivered"`
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		r.tb.Fatalf("inject into %s: status %d: %s", r.URL(), resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		r.tb.Fatalf("inject into %s: decode reply: %v", r.URL(), err)
	}
	return out.Delivered
}

// Stats asks the relay what it holds.
func (r *Relay) Stats() localrelay.Stats {
	r.tb.Helper()
	resp, err := adminClient.Get("http://" + r.Addr() + localrelay.StatsPath)
	if err != nil {
		r.tb.Fatalf("stats of %s: %v", r.URL(), err)
	}
	defer resp.Body.Close()
	var s localrelay.Stats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		r.tb.Fatalf("stats of %s: decode: %v", r.URL(), err)
	}
	return s
}

// adminClient keeps no idle connections, so tests that count goroutines see
// none left behind by it.
var adminClient = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{DisableKeepAlives: true},
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
