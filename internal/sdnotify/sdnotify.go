// Package sdnotify tells a service manager about the daemon's state over
// the sd_notify(3) protocol: one datagram of newline-separated
// "KEY=value" assignments (READY=1, STATUS=..., STOPPING=1) to the unix
// socket named by $NOTIFY_SOCKET, which systemd sets for a Type=notify
// service. A process without the variable gets a nil *Notifier, whose
// Notify does nothing, so callers need no branch.
//
//	n := sdnotify.FromEnv() // first thing: the variable is removed from the environment
//	...
//	_ = n.Notify("READY=1", "STATUS=synced with 3 relays")
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// EnvSocket is the environment variable naming the notification socket.
const EnvSocket = "NOTIFY_SOCKET"

// Notifier sends notifications to one socket; nil sends nothing.
type Notifier struct {
	addr *net.UnixAddr
}

// FromEnv returns the Notifier of $NOTIFY_SOCKET (nil when it is unset or
// empty) and removes the variable from this process's environment, so that
// the processes it starts (workloads) cannot speak for it.
func FromEnv() *Notifier {
	name := os.Getenv(EnvSocket)
	os.Unsetenv(EnvSocket)
	return New(name)
}

// New returns the Notifier of the socket path name ("@name" is an
// abstract socket); nil when name is "".
func New(name string) *Notifier {
	if name == "" {
		return nil
	}
	if strings.HasPrefix(name, "@") {
		name = "\x00" + name[1:]
	}
	return &Notifier{addr: &net.UnixAddr{Name: name, Net: "unixgram"}}
}

// Notify sends the assignments as one datagram ("READY=1", "STATUS=...").
func (n *Notifier) Notify(assignments ...string) error {
	if n == nil {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(strings.Join(assignments, "\n"))); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}
