package netlab_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"provideragent/internal/netlab"
)

// dialEnv makes this test binary, run inside a node, dial the address it
// names once and print what happened: "ok", "refused" or "timeout".
const dialEnv = "NETLAB_TEST_DIAL"

// listenEnv makes it listen on the address it names, print "listening",
// and accept connections until killed.
const listenEnv = "NETLAB_TEST_LISTEN"

func TestMain(m *testing.M) {
	if addr := os.Getenv(dialEnv); addr != "" {
		c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		switch {
		case err == nil:
			c.Close()
			fmt.Println("ok")
		case errors.Is(err, syscall.ECONNREFUSED):
			fmt.Println("refused")
		case errors.Is(err, os.ErrDeadlineExceeded) || strings.Contains(err.Error(), "timeout"):
			fmt.Println("timeout")
		default:
			fmt.Println("error:", err)
		}
		os.Exit(0)
	}
	if addr := os.Getenv(listenEnv); addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println("listening")
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			c.Close()
		}
	}
	os.Exit(m.Run())
}

// listen runs a TCP listener on node at port and returns its address.
func listen(t *testing.T, n *netlab.Node, port int) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("%s:%d", n.IP, port)
	cmd := n.Command(exe)
	cmd.Env = append(os.Environ(), listenEnv+"="+addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	buf := make([]byte, 64)
	k, _ := out.Read(buf)
	if got := strings.TrimSpace(string(buf[:k])); got != "listening" {
		t.Fatalf("listener on %s printed %q", addr, got)
	}
	return addr
}

// dial dials addr once from inside node.
func dial(t *testing.T, from *netlab.Node, addr string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := from.Command(exe)
	cmd.Env = append(os.Environ(), dialEnv+"="+addr)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, from.Name, err)
	}
	return strings.TrimSpace(string(out))
}

// TestFaults: a closed port answers with a reset ("refused"), so a
// timeout means the packets vanished; each fault makes the dial time out
// and healing it makes it succeed again.
func TestFaults(t *testing.T) {
	lab := netlab.New(t)
	server, client := lab.Node("server"), lab.Node("client")
	addr := listen(t, server, 7000)
	closed := fmt.Sprintf("%s:%d", server.IP, 7001)

	check := func(what, target, want string) {
		t.Helper()
		if got := dial(t, client, target); got != want {
			t.Errorf("%s: dial %s = %s, want %s", what, target, got, want)
		}
	}
	check("no fault", addr, "ok")
	check("a closed port", closed, "refused")

	faults := []struct {
		name string
		make func()
	}{
		{"server cuts client", func() { server.Cut(client) }},
		{"server drops from client", func() { server.DropFrom(client) }},
		{"server drops to client", func() { server.DropTo(client) }},
		{"client drops to server", func() { client.DropTo(server) }},
		{"client drops from server", func() { client.DropFrom(server) }},
	}
	for _, f := range faults {
		f.make()
		check(f.name, addr, "timeout")
		check(f.name+" (closed port: no reset either)", closed, "timeout")
		server.Heal()
		client.Heal()
		check(f.name+", healed", addr, "ok")
	}

	server.LinkDown()
	check("server's link down", addr, "timeout")
	server.LinkUp()
	check("server's link up", addr, "ok")

	// The host reaches every node through the bridge.
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("host dial %s: %v", addr, err)
	}
	c.Close()
}

// TestLabIsRemoved: when a test ends, its lab's namespaces, processes,
// links and forward rule are gone, even when the test failed.
func TestLabIsRemoved(t *testing.T) {
	var ns []string
	var pid int
	var bridgeIP, tag string
	t.Run("lab", func(t *testing.T) {
		lab := netlab.New(t)
		bridgeIP = lab.HostIP
		tag = lab.LinkPrefix()
		for _, name := range []string{"a", "b"} {
			ns = append(ns, lab.Node(name).NS)
		}
		cmd := lab.Node("c").Command("sleep", "1000")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go cmd.Wait()
		pid = cmd.Process.Pid
	})
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if strings.Contains(string(out), n) {
			t.Errorf("namespace %s still exists", n)
		}
	}
	links, _ := exec.Command("ip", "-o", "link", "show").Output()
	if strings.Contains(string(links), tag) {
		t.Errorf("links of the lab remain:\n%s", links)
	}
	addrs, _ := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if strings.Contains(string(addrs), " "+bridgeIP+"/") {
		t.Errorf("the bridge with %s still exists", bridgeIP)
	}
	time.Sleep(100 * time.Millisecond)
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("process %d started in the lab still runs", pid)
	}
}
