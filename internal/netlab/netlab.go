package netlab

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// Lab is a bridge on the host with nodes attached, all on 10.213.X.0/24;
// the host is .1 on the bridge.
type Lab struct {
	tb     testing.TB
	tag    string // pl<pid:6 hex><lab:2 hex>: prefix of the lab's link names
	nsTag  string // netlab-<pid>-<lab>: prefix of its namespace names
	bridge string
	subnet string // 10.213.X
	// HostIP is the host's address on the bridge: nodes reach the test
	// process there, and the host reaches nodes through the bridge.
	HostIP string

	mu    sync.Mutex
	nodes []*Node
}

// Node is one network namespace on the lab's bridge.
type Node struct {
	lab  *Lab
	Name string // as given to Lab.Node
	// NS is the namespace's name (ip netns exec NS ...).
	NS string
	// IP is the node's address on the bridge.
	IP       string
	hostVeth string // the link's end on the host, enslaved to the bridge
}

var labs atomic.Int64

// subnetPrefix is the /16 labs take their /24s from.
const subnetPrefix = "10.213."

// New makes an empty lab and registers its removal with tb.Cleanup. It
// skips the test when the process is not root and fails it when ip or
// iptables is missing. Labs left by dead test processes are removed first.
func New(tb testing.TB) *Lab {
	tb.Helper()
	if uid := os.Geteuid(); uid != 0 {
		tb.Skipf("netlab: making network namespaces, veth links and iptables rules needs root; this test runs as uid %d", uid)
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			tb.Fatalf("netlab: %s not found (install iproute2 and iptables): %v", tool, err)
		}
	}
	sweep(tb)
	n := labs.Add(1)
	pid := os.Getpid()
	l := &Lab{
		tb:    tb,
		tag:   fmt.Sprintf("pl%06x%02x", pid, n%256),
		nsTag: fmt.Sprintf("netlab-%d-%d", pid, n),
	}
	l.bridge = l.tag + "br"
	tb.Cleanup(l.remove)
	unlock := lockAllocation(tb)
	defer unlock()
	l.subnet = freeSubnet(tb)
	l.HostIP = l.subnet + ".1"
	l.must("ip", "link", "add", l.bridge, "type", "bridge")
	l.must("ip", "addr", "add", l.HostIP+"/24", "dev", l.bridge)
	l.must("ip", "link", "set", l.bridge, "up")
	// With br_netfilter loaded, bridged frames cross the host's FORWARD
	// chain, whose policy may be DROP (Docker sets it so).
	l.must("iptables", l.forwardRule("-I")...)
	return l
}

func (l *Lab) forwardRule(op string) []string {
	return []string{op, "FORWARD", "-i", l.bridge, "-o", l.bridge, "-j", "ACCEPT"}
}

// LinkPrefix starts the name of every link the lab makes on the host.
func (l *Lab) LinkPrefix() string { return l.tag }

// Node adds a namespace named for name, linked to the bridge, with the
// next free address.
func (l *Lab) Node(name string) *Node {
	l.tb.Helper()
	l.mu.Lock()
	k := len(l.nodes)
	n := &Node{
		lab:      l,
		Name:     name,
		NS:       fmt.Sprintf("%s-%s", l.nsTag, name),
		IP:       fmt.Sprintf("%s.%d", l.subnet, 10+k),
		hostVeth: fmt.Sprintf("%sv%02d", l.tag, k),
	}
	l.nodes = append(l.nodes, n)
	l.mu.Unlock()
	if k >= 200 {
		l.tb.Fatalf("netlab: more than 200 nodes in one lab")
	}
	peer := n.hostVeth + "p"
	l.must("ip", "netns", "add", n.NS)
	l.must("ip", "link", "add", n.hostVeth, "type", "veth", "peer", "name", peer)
	l.must("ip", "link", "set", peer, "netns", n.NS)
	l.must("ip", "link", "set", n.hostVeth, "master", l.bridge)
	l.must("ip", "link", "set", n.hostVeth, "up")
	l.must("ip", "-n", n.NS, "addr", "add", n.IP+"/24", "dev", peer)
	l.must("ip", "-n", n.NS, "link", "set", peer, "up")
	l.must("ip", "-n", n.NS, "link", "set", "lo", "up")
	return n
}

// Wrap is the command prefix that runs a program inside the node.
func (n *Node) Wrap() []string { return []string{"ip", "netns", "exec", n.NS} }

// Command is exec.Command for a program run inside the node.
func (n *Node) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append(append(n.Wrap()[1:], name), args...)...)
}

// Cut drops every packet between the node and peers, both ways, silently.
func (n *Node) Cut(peers ...*Node) {
	n.lab.tb.Helper()
	n.DropFrom(peers...)
	n.DropTo(peers...)
}

// DropFrom drops, in the node, every packet that peers send it: the node
// still sends (a send-only partition; TCP's acknowledgements are lost too).
func (n *Node) DropFrom(peers ...*Node) {
	n.lab.tb.Helper()
	for _, p := range peers {
		n.iptables("-A", "INPUT", "-s", p.IP, "-j", "DROP")
	}
}

// DropTo drops, in the node, every packet it sends to peers: the node
// still receives (a receive-only partition).
func (n *Node) DropTo(peers ...*Node) {
	n.lab.tb.Helper()
	for _, p := range peers {
		n.iptables("-A", "OUTPUT", "-d", p.IP, "-j", "DROP")
	}
}

// Heal removes every drop the node's namespace has.
func (n *Node) Heal() {
	n.lab.tb.Helper()
	n.iptables("-F", "INPUT")
	n.iptables("-F", "OUTPUT")
}

// LinkDown takes the node's link down at the bridge: the node loses
// carrier, and nothing reaches it or leaves it, the host included.
func (n *Node) LinkDown() {
	n.lab.tb.Helper()
	n.lab.must("ip", "link", "set", n.hostVeth, "down")
}

// LinkUp brings the node's link back.
func (n *Node) LinkUp() {
	n.lab.tb.Helper()
	n.lab.must("ip", "link", "set", n.hostVeth, "up")
}

func (n *Node) iptables(args ...string) {
	n.lab.tb.Helper()
	n.lab.must("ip", append([]string{"netns", "exec", n.NS, "iptables", "-w"}, args...)...)
}

// must runs a command and fails the test with its output when it fails.
func (l *Lab) must(name string, args ...string) {
	l.tb.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		l.tb.Fatalf("netlab: %s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
}

// remove kills every process left in the lab's namespaces and deletes the
// namespaces (their veth links go with them), the bridge and the host's
// forward rule. It keeps going past errors, reporting them.
func (l *Lab) remove() {
	l.mu.Lock()
	nodes := l.nodes
	l.mu.Unlock()
	var errs []error
	for _, n := range nodes {
		_ = quiet("ip", "link", "del", n.hostVeth) // at once; with the namespace it goes a moment later
		errs = append(errs, removeNamespace(n.NS))
	}
	if l.subnet != "" {
		errs = append(errs, quiet("iptables", l.forwardRule("-D")...))
		errs = append(errs, quiet("ip", "link", "del", l.bridge))
	}
	if err := errors.Join(errs...); err != nil {
		l.tb.Errorf("netlab: removing lab %s: %v", l.nsTag, err)
	}
}

// removeNamespace kills the processes in the namespace, then deletes it.
func removeNamespace(ns string) error {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return quiet("ip", "netns", "del", ns)
}

func quiet(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// lockAllocation serializes subnet allocation between test processes.
func lockAllocation(tb testing.TB) (unlock func()) {
	tb.Helper()
	path := filepath.Join(os.TempDir(), "provider-agent-netlab.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		tb.Fatalf("netlab: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		tb.Fatalf("netlab: lock %s: %v", path, err)
	}
	return func() { f.Close() }
}

// freeSubnet is the first 10.213.X that no host address uses.
func freeSubnet(tb testing.TB) string {
	tb.Helper()
	out, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		tb.Fatalf("netlab: ip addr show: %v", err)
	}
	for x := 1; x < 255; x++ {
		s := fmt.Sprintf("%s%d", subnetPrefix, x)
		if !strings.Contains(string(out), " "+s+".") {
			return s
		}
	}
	tb.Fatalf("netlab: no free /24 left in %s0.0/16", subnetPrefix)
	return ""
}

var (
	nsName   = regexp.MustCompile(`^netlab-(\d+)-\d+-\S+`)
	linkName = regexp.MustCompile(`^pl([0-9a-f]{6})[0-9a-f]{2}br$`)
)

// sweep removes the namespaces, bridges and forward rules of labs whose
// test process is gone (killed before its cleanup ran).
func sweep(tb testing.TB) {
	tb.Helper()
	dead := func(pid int) bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return errors.Is(err, os.ErrNotExist)
	}
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		m := nsName.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if pid, _ := strconv.Atoi(m[1]); dead(pid) {
			ns := strings.Fields(line)[0]
			if err := removeNamespace(ns); err != nil {
				tb.Logf("netlab: removing a dead lab's namespace: %v", err)
			}
		}
	}
	out, _ = exec.Command("ip", "-o", "link", "show", "type", "bridge").Output()
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := strings.TrimSuffix(f[1], ":")
		m := linkName.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		if pid, _ := strconv.ParseInt(m[1], 16, 64); dead(int(pid)) {
			_ = quiet("iptables", "-D", "FORWARD", "-i", name, "-o", name, "-j", "ACCEPT")
			if err := quiet("ip", "link", "del", name); err != nil {
				tb.Logf("netlab: removing a dead lab's bridge: %v", err)
			}
		}
	}
}
