package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"provideragent/agent"
	"provideragent/internal/sdnotify"
)

// notifyReady tells a service manager (systemd Type=notify) that run is
// ready once the agent is synced, as /status's synced says: at least M
// relays connected and delivered EOSE, and a restarted agent finished its
// relay sync (its Live workloads then start again). Until then STATUS says
// how many relays synced. It returns once READY=1 was sent, or when ctx
// ends. n nil (no $NOTIFY_SOCKET): it returns at once.
func notifyReady(ctx context.Context, n *sdnotify.Notifier, a *agent.Agent, quorum int, logger *slog.Logger) {
	if n == nil {
		return
	}
	last := ""
	for {
		st := a.Status()
		synced := 0
		for _, r := range st.Relays {
			if r.Connected && r.EOSE {
				synced++
			}
		}
		if st.Synced {
			status := fmt.Sprintf("STATUS=synced with %d of %d relays (quorum %d)", synced, len(st.Relays), quorum)
			if err := n.Notify("READY=1", status); err != nil {
				logger.Warn("service manager notification failed", "err", err)
			}
			return
		}
		status := fmt.Sprintf("STATUS=waiting for relays: %d of %d synced, quorum %d", synced, len(st.Relays), quorum)
		if status != last {
			if err := n.Notify(status); err != nil {
				logger.Warn("service manager notification failed", "err", err)
			}
			last = status
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}
