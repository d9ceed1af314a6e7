// Package netlab builds small real networks for tests: each node is a Linux
// network namespace with one veth link to a bridge on the host, all on one
// /24 the host reaches through the bridge. Tests start relays and agents
// inside nodes (Node.Command, Node.Wrap) and cut them with the faults a real
// network makes: iptables DROP in a node's namespace (packets vanish, no
// reset; both ways or one way, towards chosen peers) and a link set down.
//
// It needs root, iproute2 and iptables. New skips the test, saying why, when
// the process is not root, and fails it when root lacks the tools. Every
// namespace, link and host rule a lab makes is removed when the test ends,
// failed or not; a lab left behind by a test process that was killed is
// removed by the next New.
//
//	lab := netlab.New(t)
//	relay, agent := lab.Node("relay"), lab.Node("agent")
//	cmd := relay.Command("localrelayd", "--listen", relay.IP+":7000")
//	agent.Cut(relay) // silent drops both ways
//	agent.Heal()
package netlab
