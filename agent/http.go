package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"provideragent/relay"
)

// Status is the JSON document served at /status and printed by
// `provider-agent status`.
type Status struct {
	// Provider is this agent's public key (npub).
	Provider string `json:"provider"`
	// Version is the running build ("v1.2.3 (commit …, go1.26.8)"); empty
	// when read from the database.
	Version string `json:"version,omitempty"`
	// Source says where the document came from: "agent" (the running
	// agent's endpoint) or "database" (read from the SQLite file while the
	// agent is down).
	Source string `json:"source"`
	// Now is the agent's clock when the document was made.
	Now time.Time `json:"now"`
	// Synced is true while at least M relays are connected and delivered
	// EOSE on their current connection, once a restored machine finished
	// its relay sync (before that, restored Live workloads wait). It is
	// false with no relay connected.
	Synced bool `json:"synced"`
	// ClockSuspect is set while this node's clock is outside the bound of
	// the relays' (the clock check): it takes over nothing and fences what
	// it holds; ClockWhy says by how much.
	ClockSuspect bool   `json:"clock_suspect,omitempty"`
	ClockWhy     string `json:"clock_why,omitempty"`
	// Draining is set while the operator's drain is on: this node claims
	// and takes over nothing, and its durable workloads were moved away.
	Draining  bool             `json:"draining,omitempty"`
	Workloads []WorkloadStatus `json:"workloads"`
	Relays    []RelayStatus    `json:"relays"`

	// Containment says how the backend holds each workload's processes
	// together ("pid namespace + cgroup v2 …", "none"); ContainmentWarning
	// is set when a workload process can outlive its supervisor on this
	// host (backend.Containment). Both are empty for a backend that does
	// not say.
	Containment        string `json:"containment,omitempty"`
	ContainmentWarning string `json:"containment_warning,omitempty"`
	// Isolation says as which users workloads run (backend.Isolation);
	// IsolationWarning is set when they are not isolated (no workload
	// starts, or isolation is off). Both are empty for a backend that does
	// not say.
	Isolation        string `json:"isolation,omitempty"`
	IsolationWarning string `json:"isolation_warning,omitempty"`
}

// WorkloadStatus is one workload as this agent sees it (WorkloadView
// makes it from the persisted state).
type WorkloadStatus struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Epoch uint64 `json:"epoch"`
	// Primary is the current holder (hex key).
	Primary string `json:"primary"`
	// Standbys are the members of the lease that stand by for the current
	// holder, in rank order: the lease's standbys without the holder, then
	// the former primary (it rejoins as a standby after a failover).
	Standbys []string `json:"standbys,omitempty"`
	// NoStandby is true when this provider holds the workload and sees none
	// of its standbys alive (no heartbeat within stale): if it fails, nobody
	// takes over until one is back.
	NoStandby bool `json:"no_standby,omitempty"`
	// QuorumAt is, for a workload this provider holds, the creation time
	// of its newest heartbeat since it began holding that came back from M
	// relays: what a revocation would carry now. Absent: none has yet, so a
	// standby could not claim on a revocation and would wait for the
	// takeover rule (takeover_after of silence).
	QuorumAt time.Time `json:"quorum_at,omitzero"`
	// Role is "primary" when this agent holds (or is promoting to) the
	// lease, "standby" otherwise ("" when read from the database).
	Role string `json:"role"`
	// Running is whether the workload's process runs on this node.
	Running bool `json:"running"`
	// Reason says why the workload's process last ended, for a failed or
	// respawning workload (backend.ExitReason of its log file), e.g.
	// "exit 127 (command not found): sh: 1: no-such-tool: not found".
	Reason string `json:"reason,omitempty"`
	// Restore is, for a durable workload whose epoch began here, how its
	// state was restored (restoring, waiting, restored, fresh) and
	// RestoreWhy what the last attempt said.
	Restore    string `json:"restore,omitempty"`
	RestoreWhy string `json:"restore_why,omitempty"`
	// Checkpoint is the state_uri of the checkpoint the held epoch stands
	// on (the last published here, or the one restored): what its
	// revocation names.
	Checkpoint string `json:"checkpoint,omitempty"`
}

// RelayStatus is one relay connection as this agent sees it.
type RelayStatus struct {
	URL       string `json:"url"`
	Connected bool   `json:"connected"`
	// EOSE: the subscription reached EOSE and every event the relay served
	// before it has been handed to the agent (after a reconnect it may read
	// true before the new connection's EOSE: relayPool.passed).
	EOSE        bool      `json:"eose"`
	Reconnects  int       `json:"reconnects"`
	LastMessage time.Time `json:"last_message,omitzero"`
	LastError   string    `json:"last_error,omitempty"`
	// LastRejection is the last time this relay refused one of our events
	// (nil: never since the agent started).
	LastRejection *RelayRejection `json:"last_rejection,omitempty"`
	// PublishBackoffUntil is set while the relay asked us to slow down
	// (rate-limited:): our publishes to it wait until then.
	PublishBackoffUntil time.Time `json:"publish_backoff_until,omitzero"`
	// Limits are the relay's NIP-11 limits (nil: it advertises none).
	Limits *relay.Limits `json:"limits,omitempty"`
	// REQs is how many REQs the subscription holds open on the relay, and
	// Interests which alternative each part of it got there (narrowest
	// first: 0 is the narrow filter).
	REQs      int            `json:"reqs,omitempty"`
	Interests []relay.Choice `json:"interests,omitempty"`
	// WatchedSince is when the relay's current live stream began to count
	// as evidence (its catch-up ended); zero while none does (never
	// synced, or a new connection or a replaced subscription whose
	// catch-up has not ended). SilenceShownUntil is up to when that stream
	// shows the silence of a holder: the newest own heartbeat that came
	// back on it, less relay_delay; it stops while the link is down or
	// stalled. A takeover or retake by silence counts only between the
	// two, on at least N-M+1 relays at once (docs/reliability.md): a
	// standby that does not take over although the holder is gone shows
	// here which relays do not count yet.
	WatchedSince      time.Time `json:"watched_since,omitzero"`
	SilenceShownUntil time.Time `json:"silence_shown_until,omitzero"`
}

// httpServer serves /metrics, /healthz (200 "ok", or 503 naming the failed
// check: relays below quorum, machine loop stuck, database not writable)
// and /status on a real listener.
type httpServer struct {
	srv *http.Server
	ln  net.Listener
}

// newHTTPServer listens on addr and serves there.
func newHTTPServer(addr string, g prometheus.Gatherer, status func() Status, healthy func() error) (*httpServer, error) {
	return newHTTPServerOn(addr, nil, g, status, healthy)
}

// newHTTPServerOn serves on ln, or listens on addr when ln is nil.
func newHTTPServerOn(addr string, ln net.Listener, g prometheus.Gatherer, status func() Status, healthy func() error) (*httpServer, error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := healthy(); err != nil {
			http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(status())
	})
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("listen status server on %s: %w", addr, err)
		}
	}
	return &httpServer{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		ln:  ln,
	}, nil
}

// Addr is the listener's host:port.
func (h *httpServer) Addr() string { return h.ln.Addr().String() }

// serve runs until ctx ends, then shuts the server down gracefully.
func (h *httpServer) serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- h.srv.Serve(h.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("status server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := h.srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("status server shutdown: %w", err)
	}
	return nil
}
